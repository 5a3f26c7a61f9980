/* The streamed matvec's copy cursor (mvs.cuh mvs_cursor), walked on the host: for every type
 * it streams, GLU and segmented launches (odd rows, several segments), rows with a partial
 * last round, several warps of several grid sizes and all 32 lanes, the copies each stage
 * issues (destination in the stage, source, size) must be those derived here from first
 * principles: item p's rows (GLU: row p of both matrices; else rows 2u, 2u + 1 of its
 * segment, the second re-read where absent), stage j's round j, and the type's per-round
 * layout. The cursor reaches its items by additions
 * (mvs_locate once per segment), so this is what checks them. Then each stage, all 32 lanes'
 * copies together, against what the compute step reads of it (unit_reads): a lane predicate
 * wrong in the cursor and in round_copies alike still leaves a read without its bytes there
 * (session 48: two such mirrored faults, in the scale and the swizzle predicates, pass the
 * first check and fail this one on every type they touch). Host code compiled by nvcc; runs
 * without a GPU (tests/py/test_units.py). */
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "check.h"
#include "mvs.cuh"

struct copy_rec {
    uint32_t off;
    const uint8_t *src;
    int bytes;
    bool operator==(const copy_rec &o) const { return off == o.off && src == o.src && bytes == o.bytes; }
};

/* Item p's two rows: plane bases of row i (quants, scales). */
static void item_rows(const rl_mv_args &a, bool glu, int p, const uint8_t *q[2], const uint8_t *s[2]) {
    if (glu) {
        for (int i = 0; i < 2; i++) {
            q[i] = a.seg[i].w.q + (size_t)p * a.seg[i].w.q_row;
            s[i] = a.seg[i].w.s ? a.seg[i].w.s + (size_t)p * a.seg[i].w.s_row : nullptr;
        }
        return;
    }
    int u = p, si = 0;
    while ((a.seg[si].w.rows + 1) / 2 <= u) u -= (a.seg[si++].w.rows + 1) / 2;
    const rl_dmat &m = a.seg[si].w;
    const int r[2] = {2 * u, 2 * u + 1 < m.rows ? 2 * u + 1 : 2 * u};
    for (int i = 0; i < 2; i++) {
        q[i] = m.q + (size_t)r[i] * m.q_row;
        s[i] = m.s ? m.s + (size_t)r[i] * m.s_row : nullptr;
    }
}

/* The copies of round r of a row, lane l, at stage offset ru, from the row's planes q, s. */
template <int T> static void round_copies(int l, int r, int nu, uint32_t ru, const uint8_t *q, const uint8_t *s,
                                          std::vector<copy_rec> &out) {
    using TR = mvs_tr<T>;
    const int left = nu - 32 * r;
    const uint8_t *gq = q + (size_t)r * TR::QB, *gs = s ? s + (size_t)r * TR::SS : nullptr;
    if (T == RL_Q6_K) {
        if (l < left) out.push_back({ru + 16u * l, gq + 16 * l, 16});
        if (l < 16 && 2 * l < left) out.push_back({ru + 512u + 16 * l, gq + 512 + 16 * l, 16});
        if (l < 16 ? 2 * l < left : l < 18 && 16 * (l - 16) < left) out.push_back({ru + TR::QB + 4u * l, gs + 4 * l, 4});
    } else if (T == RL_Q5_K) {
        if (l < left) out.push_back({ru + 16u * l, gq + 16 * l, 16});
        if (l < 8 && 4 * l < left) out.push_back({ru + 512u + 16 * l, gq + 512 + 16 * l, 16});
        if (l < 16 && 2 * l < left) out.push_back({ru + TR::QB + 4u * l, gs + 4 * l, 4});
    } else {
        for (int k = 0; k < TR::NV; k++) {
            const int P = 32 * k + l; /* piece P of the round: unit P / NV */
            if (P / TR::NV < left) out.push_back({ru + 16u * swz<TR::NV>(P), gq + 16 * P, 16});
        }
        if (TR::S && l < 8 * TR::SB && 4 / TR::SB * l < left) out.push_back({ru + TR::QB + 4u * l, gs + 4 * l, 4});
    }
}

/* The other side of the contract: what the compute step (mvs_warp::run) reads of a stage for
 * lane l's unit of a row whose part of the stage starts at ru, as (offset in the stage, bytes).
 * A stage holds its round's bytes as they lie in the row's planes, quants at [0, QB) with
 * 16-byte piece P at slot swz(P) (swz is its own inverse), scales from QB on; so each byte read
 * has one source, whatever lane copied it. Checked apart from round_copies, which restates the
 * cursor lane by lane: a copy predicate wrong in both would still starve a read here. */
template <int T> static void unit_reads(int l, uint32_t ru, std::vector<std::pair<uint32_t, int>> &out) {
    using TR = mvs_tr<T>;
    for (int q = 0; q < TR::NV; q++) out.push_back({ru + 16u * swz<TR::NV>(l * TR::NV + q), 16});
    if (T == RL_Q6_K) {
        out.push_back({ru + 512u + 8u * l, 8});
        out.push_back({ru + TR::QB + 2u * l, 2});
        out.push_back({ru + TR::QB + 64u + 2u * (l >> 3), 2});
    } else if (T == RL_Q4_K || T == RL_Q5_K) {
        if (T == RL_Q5_K) out.push_back({ru + 512u + 4u * l, 4});
        out.push_back({ru + TR::QB + 16u * (l >> 3), 16});
    } else if (TR::S) {
        out.push_back({ru + TR::QB + (uint32_t)TR::SB * l, TR::SB});
    }
}

/* One stage of a warp, all its lanes' copies together (lanes[l]: lane l's), against the reads
 * of round j of rows q, s (item_rows): every byte a valid unit's lane reads was written once
 * this stage, from the byte of the row's planes that the stage layout puts there; no byte is
 * written twice; every copy reads inside its own row's planes. Returns the failures. */
template <int T>
static int check_stage(const std::vector<copy_rec> *lanes, int j, int nu, int rounds, const uint8_t *const q[2],
                       const uint8_t *const s[2]) {
    using TR = mvs_tr<T>;
    std::vector<const uint8_t *> src(TR::STAGE, nullptr);
    std::vector<int> cnt(TR::STAGE, 0);
    int fails = 0;
    for (int l = 0; l < 32; l++)
        for (const copy_rec &c : lanes[l]) {
            const int i = (int)(c.off / TR::ROW);
            const bool in_q = c.src >= q[i] && c.src + c.bytes <= q[i] + (size_t)rounds * TR::QB;
            const bool in_s = s[i] && c.src >= s[i] && c.src + c.bytes <= s[i] + (size_t)rounds * TR::SS;
            if (c.off + c.bytes > (uint32_t)TR::STAGE || (c.off + c.bytes - 1) / TR::ROW != (uint32_t)i || !(in_q || in_s)) {
                fails++;
                continue;
            }
            for (int b = 0; b < c.bytes; b++) {
                cnt[c.off + b]++;
                src[c.off + b] = c.src + b;
            }
        }
    for (int x = 0; x < TR::STAGE; x++) fails += cnt[x] > 1;
    std::vector<std::pair<uint32_t, int>> reads;
    for (int i = 0; i < 2; i++) {
        const uint32_t ru = (uint32_t)(i * TR::ROW);
        const uint8_t *gq = q[i] + (size_t)j * TR::QB, *gs = s[i] ? s[i] + (size_t)j * TR::SS : nullptr;
        for (int l = 0; l < 32 && 32 * j + l < nu; l++) {
            reads.clear();
            unit_reads<T>(l, ru, reads);
            for (const auto &r : reads)
                for (int b = 0; b < r.second; b++) {
                    const uint32_t x = r.first + b - ru; /* within the row's part of the stage */
                    const uint8_t *want = x < (uint32_t)TR::QB ? gq + 16 * swz<TR::NV>((int)(x / 16)) + x % 16
                                                               : gs ? gs + (x - TR::QB) : nullptr;
                    fails += cnt[r.first + b] != 1 || !want || src[r.first + b] != want;
                }
        }
    }
    return fails;
}

/* One launch shape: every warp of G (some of them) and lane, cursor against the derivation. */
template <int T, bool GLU>
static void check_shape(int n, const std::vector<int> &rows, int G, const char *what) {
    using TR = mvs_tr<T>;
    const int nu = n / mv_tr<T>::CW, rounds = (nu + 31) / 32;
    /* planes: row strides with some slack, so that rows are not contiguous by accident, and
     * each segment's its own, so that a step taken with another segment's stride shows */
    const size_t q_row = (size_t)rounds * TR::QB + 48, s_row = TR::S ? (size_t)rounds * TR::SS + 24 : 0;
    size_t bytes = 64;
    for (size_t i = 0; i < rows.size(); i++) bytes += (size_t)rows[i] * (q_row + 16 * i + (TR::S ? s_row + 8 * i : 0));
    std::vector<uint8_t> buf(bytes);
    rl_mv_args a;
    memset(&a, 0, sizeof a);
    if (rows.size() > sizeof a.seg / sizeof a.seg[0]) {
        CHECK(0, "%s: %zu segments, more than rl_mv_args holds", what, rows.size());
        return;
    }
    a.nseg = (int)rows.size();
    a.mode = GLU ? RL_MV_GLU : RL_MV_STORE;
    a.n = n;
    size_t at = 0;
    for (int i = 0; i < a.nseg; i++) {
        rl_dmat &m = a.seg[i].w;
        m.type = T;
        m.rows = rows[i];
        m.cols = n;
        m.q_row = q_row + 16 * (size_t)i;
        m.s_row = TR::S ? s_row + 8 * (size_t)i : 0;
        m.q = buf.data() + at;
        at += (size_t)rows[i] * m.q_row;
        m.s = TR::S ? buf.data() + at : nullptr;
        at += (size_t)rows[i] * m.s_row;
    }
    const int items = mv_items(a, GLU), J = rounds;
    int bad = 0, checked = 0, stage_bad = 0, stages = 0;
    std::vector<int> ws; /* the first two warps, a middle one, the last: each once */
    for (int w : {0, 1, G / 2, G - 1})
        if (w < G && std::find(ws.begin(), ws.end(), w) == ws.end()) ws.push_back(w);
    for (int w : ws) {
        std::vector<std::vector<copy_rec>> got[32];
        for (int l = 0; l < 32; l++) {
            /* the derivation */
            std::vector<std::vector<copy_rec>> want;
            for (int p = w; p < items; p += G) {
                const uint8_t *q[2], *s[2];
                item_rows(a, GLU, p, q, s);
                for (int j = 0; j < J; j++) {
                    want.emplace_back();
                    for (int i = 0; i < 2; i++)
                        round_copies<T>(l, j, nu, (uint32_t)(i * TR::ROW), q[i], s[i], want.back());
                }
            }
            /* the cursor */
            mvs_cursor<T, GLU> c;
            c.init(&a, w, G, l);
            for (; c.k_issue < c.total; c.k_issue++) {
                got[l].emplace_back();
                c.copies([&](uint32_t off, const uint8_t *src, int bytes) { got[l].back().push_back({off, src, bytes}); });
                c.step();
            }
            checked++;
            if (got[l] != want) {
                if (bad++ < 3) {
                    size_t k = 0;
                    while (k < got[l].size() && k < want.size() && got[l][k] == want[k]) k++;
                    fprintf(stderr, "%s: warp %d of %d, lane %d: %zu stages (want %zu), first difference at stage %zu\n",
                            what, w, G, l, got[l].size(), want.size(), k);
                }
            }
        }
        /* the stages, all lanes together, against the compute's reads (every lane walks the
         * same stages: a lane with a different count has failed above) */
        size_t k = 0;
        for (int p = w; p < items; p += G) {
            const uint8_t *q[2], *s[2];
            item_rows(a, GLU, p, q, s);
            for (int j = 0; j < J; j++, k++) {
                std::vector<copy_rec> lanes[32];
                for (int l = 0; l < 32; l++)
                    if (k < got[l].size()) lanes[l] = got[l][k];
                const int f = check_stage<T>(lanes, j, nu, J, q, s);
                stages++;
                if (f && stage_bad++ < 3)
                    fprintf(stderr, "%s: warp %d of %d, item %d, round %d: %d bytes or copies wrong against the reads\n",
                            what, w, G, p, j, f);
            }
        }
    }
    CHECK(stage_bad == 0, "%s: %d of %d stages wrong against the compute's reads", what, stage_bad, stages);
    CHECK(bad == 0, "%s: %d of %d lanes' copies differ", what, bad, checked);
}

template <int T> static void check_type(const char *name) {
    const bool kq = T == RL_Q4_K || T == RL_Q5_K || T == RL_Q6_K;
    /* n: one round or less, a partial last round, several rounds (n % 256 for the K-quants) */
    const std::vector<int> ns = kq ? std::vector<int>{256, 2304, 5632} : std::vector<int>{256, 2112, 4096, 5632};
    char what[128];
    for (int n : ns)
        for (int G : {1, 3, 16, 40}) {
            snprintf(what, sizeof what, "%s n=%d G=%d GLU", name, n, G);
            check_shape<T, true>(n, {37, 37}, G, what);
            snprintf(what, sizeof what, "%s n=%d G=%d QKV-like", name, n, G);
            check_shape<T, false>(n, {7, 40, 33}, G, what);
            snprintf(what, sizeof what, "%s n=%d G=%d short segments", name, n, G);
            check_shape<T, false>(n, {2, 1, 5}, G, what);
            snprintf(what, sizeof what, "%s n=%d G=%d one segment", name, n, G);
            check_shape<T, false>(n, {64}, G, what);
            snprintf(what, sizeof what, "%s n=%d G=%d one row", name, n, G);
            check_shape<T, false>(n, {1}, G, what);
        }
}

int main(void) {
    check_type<RL_Q4_0>("Q4_0");
    check_type<RL_Q8_0>("Q8_0");
    check_type<RL_FP8>("FP8");
    check_type<RL_RQ2>("RQ2");
    check_type<RL_RQ4>("RQ4");
    check_type<RL_Q4_K>("Q4_K");
    check_type<RL_Q5_K>("Q5_K");
    check_type<RL_Q6_K>("Q6_K");
    check_type<RL_F16>("F16");
    check_type<RL_BF16>("BF16");
    return check_report("test_cursor");
}
