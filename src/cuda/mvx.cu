/* Exact chunks on tensor cores: the ns-column matvec (an exact prefill chunk of 4, 8 or 16
 * tokens) for Q4_0 and Q8_0 with 8-bit activations, whose every output has the bits of the
 * one-token kernels (mv_kernel / mvs_kernel), from int8 MMAs instead of dp4a.
 *
 * Why it can be exact: the one-token kernels' term for a row and 32-value chunk c is
 * (d_w * d_x) * (float)dot with dot an integer (Q4_0: sum(q * x) - 8 * sum(x), the nibbles q
 * unsigned), and an integer sum is the same whatever adds it. mma.m16n8k32.s8 gives exactly
 * those dots for 16 rows x 8 columns of one chunk at once. What must then match is the order
 * the float terms are summed in: lane l of the one-token kernel adds the terms of chunks l,
 * l + 32, l + 64, ... in that order, and the 32 lane sums meet in mv_finish's butterfly. Here
 * warp w of a block takes four residues c mod 32 of the chunks c, in increasing order, and
 * keeps one sum per residue, so each residue's sum is lane (c mod 32)'s, op for op; the 32
 * residue sums of a (row, column) then meet as in mv_tree32, lane 0's butterfly written out,
 * and the epilogue is mv_finish's (mv_epilogue). Which four residues is the layout, a template
 * flag RES chosen by shape (knob RL_CUDA_MVX_RES), the same bits either way:
 *  - blocked (RES false): 4w .. 4w + 3. A warp's chunks of a row are 64 or 128 contiguous
 *    bytes, its scales one 8-byte copy; the tree is mv_tree32 over 32 values in shared memory.
 *  - residue (RES true): w, w + 8, w + 16, w + 24. The butterfly's first two steps
 *    (v[l] + v[l + 16], then + v[l + 8]) meet only one warp's four sums, so the warp adds them
 *    in registers and the block takes the last three steps over 8 values (shared memory for
 *    the sums 35.9 -> 9.8 KB at 16 columns). Its codes come in 16- or 32-byte pieces and its
 *    scales as 4-byte pairs (chunks c & ~1, c | 1: cp.async copies no less than 4 bytes), which
 *    warps w and w ^ 1 share. Measured against blocked at S = 16 (docs/PERF.md v2.33, an H100):
 *    +10% on TinyLlama Q4_0 and +8% on its Q8_0 (n_embd 2048: two rounds a tile, where the
 *    tree weighs most), -2% 7B Q4_0, -4% 8B Q4_0, -3.6% 7B Q8_0.
 *
 * Work: a tile of 16 rows (GLU: gate rows r..r+7 and up rows r..r+7, so that a lane holds the
 * gate and up sums of the same row after the tree) x the ns columns; blocks of 8 warps
 * grid-stride over tiles, a tile in rounds of 32 chunks. Fragments (PTX ISA, mma.m16n8k32 with
 * .s8; g = lane / 4, t = lane % 4): A a0/a2 = row g, k 4t..4t+3 / 16+4t..16+4t+3, a1/a3 the same
 * for row g + 8; B b0/b1 = column g, k as a0/a2; D d0,d1 = row g, columns 2t, 2t + 1, d2,d3 row
 * g + 8. In Q4_0's plane a chunk's byte j holds values j (low nibble) and j + 16 (high), so a
 * lane's A word per row is word t, masked (a0) and shifted (a2); Q8_0's are words t and 4 + t.
 *
 * Memory: what limited the first versions (ncu, 7B Q4_0: 360 GB/s at 0.7 instructions per SM
 * cycle) was the number of cache lines per load instruction: a lane's 4-byte A word per row
 * puts 8 rows, 8 lines, in every warp load, and the B words and scales of 8 columns as many.
 * So each warp copies its own weights of a round (16 rows x its 4 chunks, each row's 64 or 128
 * bytes contiguous) with 16-byte cp.async into its own ring of MVX_DEPTH shared-memory stages
 * (rows padded by 16 bytes: the warp's A words then hit 32 distinct banks), each lane's share by
 * a copy cursor (mvx_cursor), the first stages before the PDL wait. A warp waits for its own
 * stage only: no block barrier until the tile's sums meet (a ring shared by the block, with a
 * barrier a round, was 1-2% slower on TinyLlama and 7B at S = 16, docs/PERF.md v2.31). And the
 * activations come in the fragment order the chunk's staging kernel (mvx_stage_kernel) writes
 * them in: three 16-byte loads per lane and chunk, all within a line or four. */
#include <type_traits>

#include "mv.cuh"

#define MVX_WARPS 8 /* 16 (two residue sums a warp, 88-92 registers) was 1-15% slower, PERF v2.31 */
#define MVX_SLOTS (32 / MVX_WARPS) /* residue sums per warp */
#define MVX_DEPTH 4                /* ring stages: rounds in flight while one is used */

/* Type T's stage in layout RES (the file's header). Warp w's slot k is chunk
 * 32 round + base(w) + STEP k of a round. */
template <int T, bool RES> struct mvx_tr {
    static constexpr int QB = T == RL_Q4_0 ? 16 : 32; /* code bytes per 32-value chunk */
    static constexpr int WROW = MVX_SLOTS * QB + 16;  /* a warp stage's row of codes, padded */
    static constexpr int STEP = RES ? MVX_WARPS : 1;
    /* scale copies: RES, a row's 4 pairs (4 bytes each, 2 lanes' worth of copies); blocked, one
     * 8-byte copy a row (lanes 0..15) */
    static constexpr int SC_BYTES = RES ? 4 : 8, SC_PER_ROW = RES ? MVX_SLOTS : 1, SC_COPIES = 16 * SC_PER_ROW;
    static constexpr int SC_ROW = SC_BYTES * SC_PER_ROW / 2; /* fp16 scales a row holds */
    /* a warp's stage: its codes, then 16 rows of scales */
    static constexpr int STAGE = 16 * WROW + SC_BYTES * SC_COPIES;
    static constexpr int PART = RES ? MVX_WARPS : 32; /* sums a (row, column) leaves for the block's tree */
    __device__ static int base(int warp) { return RES ? warp : MVX_SLOTS * warp; }
    /* the first chunk of scale copy p's row (RES: the pair of slot p % 4, chunks c & ~1, c | 1) */
    __device__ static int sc_first(int warp, int p) {
        return RES ? (warp & ~1) + MVX_WARPS * (p % SC_PER_ROW) : MVX_SLOTS * warp;
    }
    /* where slot k's fp16 scale sits in its row of the stage's scales */
    __device__ static int sc_slot(int warp, int k) { return RES ? 2 * k + (warp & 1) : k; }
};
static_assert(MVX_SLOTS == 4, "a warp's round: 4 chunks a row; RES: its residues meet in two butterfly steps");

/* d = a b + c over int32, c the accumulator's fragment: the terms c0, c1 of columns 2t, 2t + 1
 * for rows g and g + 8 alike. The integer sum is exact whoever adds it, so each column's term
 * rides in the accumulator instead of an add per output (a register quad built by moves: a
 * plane holding each term twice, loaded as the quad, saved the moves but spilled Q8_0's
 * 16-column kernels, 19 reloads a round) */
__device__ __forceinline__ void mma_s8(int *d, const uint32_t *a, uint32_t b0, uint32_t b1, int c0, int c1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%10,%11};"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c0), "r"(c1));
#endif
}

/* (float)v for an integer |v| < 2^22 without the quarter-rate I2F: the float with bits
 * 0x4B400000 + v is 1.5 * 2^23 + v exactly (its unit in the last place is 1 there), and the
 * subtraction is exact. The one-token kernels' (float)dot is exact too: the same value. */
__device__ __forceinline__ float mvx_i2f(int biased) { return __int_as_float(biased) - 12582912.0f; }

/* Tiles of a launch: 16 rows of a segment (the last one of a segment partial), or with GLU 8
 * rows of gate and up. */
__host__ __device__ inline int mvx_tiles(const rl_mv_args &a, bool glu) {
    return glu ? (a.seg[0].w.rows + 7) / 8 : mv_units(a, 16);
}

/* Tile `tile`'s segment and first row (GLU: gate and up rows r0 .. r0 + 7). */
template <bool GLU> __device__ __forceinline__ void mvx_tile(const rl_mv_args &a, int tile, int *si, int *r0) {
    if constexpr (GLU) {
        *si = 0;
        *r0 = 8 * tile;
    } else {
        *si = mv_unit(a, tile, 16, r0);
    }
}

/* The matrix and row behind tile row i (0..15); a row past the end reads row 0 (dropped). */
template <bool GLU>
__device__ __forceinline__ const rl_dmat &mvx_row(const rl_mv_args &a, int si, int r0, int i, int *r) {
    const rl_dmat &m = GLU ? a.seg[i >> 3].w : a.seg[si].w;
    *r = GLU ? r0 + (i & 7) : r0 + i;
    if (*r >= m.rows) *r = 0;
    return m;
}

/* The chunk's staging for the tensor-core kernel: column blockIdx.x of the input, RMS-normalised
 * and rounded to int8 exactly as the one-token kernel's prologue does it (mv_stage, i8_quarter),
 * written straight into the fragment plane. The norm's sum of squares is mv_norm_scale's over
 * the whole column in blocks of the one-token kernel's size, so r has its bits; after that
 * every 32-value chunk is on its own, so the chunks are split over gridDim.y blocks per column,
 * a quarter chunk per thread: 8 values, their staged floats w * (x * r) (mv_stage's), rounded
 * by i8_quarter. Each chunk's integer term is stored ready for mvx_i2f: MVX_MAGIC less, for
 * Q4_0, 8 times the sum (the -8 of its unsigned nibbles). */
__global__ void mvx_stage_kernel(const rl_mv_args a) {
    __shared__ double red[32];
    rl_pdl_trigger();
    const int col = blockIdx.x, n = a.n, nch = n / 32, ns = a.ns;
    const int c = blockIdx.y * (blockDim.x / 4) + threadIdx.x / 4, k = threadIdx.x % 4; /* the launch covers nch */
    const bool on = c < nch;
    const float *w = a.norm_w;
    /* the norm weights are weights: loaded before waiting for the kernel that wrote x */
    float g[8];
#pragma unroll
    for (int j = 0; j < 8; j++) g[j] = w && on ? w[32 * c + 8 * k + j] : 0.0f;
    rl_pdl_wait();
    const float *x = a.x + (size_t)col * n;
    const float r = w ? mv_norm_scale<8, false>(a, x, red) : 1.0f;
    float e[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (on) {
        const float4 *xv = (const float4 *)(x + 32 * c + 8 * k);
        const float4 v0 = xv[0], v1 = xv[1];
        const float v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
        for (int j = 0; j < 8; j++) e[j] = w ? __fmul_rn(g[j], __fmul_rn(v[j], r)) : v[j];
    }
    uint32_t w2[2];
    int sum;
    const float d = i8_quarter(e, w2, &sum); /* every lane of the warp */
    if (!on) return;
    mvx_put(mvx_plane(a), c, col, ns, k, w2, d, sum, mvx_k8(a));
}

/* The copy cursor of one lane: the cp.async copies of its warp's stages, one round (16 rows x
 * the warp's 4 chunks, codes and scales) per stage, tile after tile. Lane l copies the code
 * pieces l, l + 32, ... of its warp's round (piece p: row p / PPR, the 16 bytes 16 (p % PPR) ..
 * of the row's 4 chunks as the stage holds them) and the scale copies l, l + 32 below
 * SC_COPIES (copy p: row p / SC_PER_ROW). Its source pointers are set once per tile (seek) and
 * advanced by additions per round (working them out per round had been ~140 of the loop's ~590
 * warp-instructions, sm_90a SASS). */
template <int T, bool GLU, bool RES> struct mvx_cursor {
    using TR = mvx_tr<T, RES>;
    static constexpr int QB = TR::QB, PPR = MVX_SLOTS * QB / 16, PPL = 16 * PPR / 32, PPC = QB / 16;
    static constexpr int SPL = (TR::SC_COPIES + 31) / 32; /* scale copies a lane (some lanes none) */
    const uint8_t *q[PPL], *s[SPL]; /* this lane's next source bytes */
    int lt, round;                  /* local tile (the block's lt-th) and round of the next stage */

    __device__ __forceinline__ void seek(const rl_mv_args &a, int warp, int lane) {
        int si, r0, r;
        mvx_tile<GLU>(a, blockIdx.x + lt * gridDim.x, &si, &r0);
#pragma unroll
        for (int j = 0; j < PPL; j++) {
            const int p = lane + 32 * j, k = p % PPR; /* slot k / PPC, its piece k % PPC */
            const rl_dmat &m = mvx_row<GLU>(a, si, r0, p / PPR, &r);
            q[j] = qrow(m, r) + (TR::base(warp) + TR::STEP * (k / PPC)) * QB + 16 * (k % PPC);
        }
#pragma unroll
        for (int j = 0; j < SPL; j++) {
            const int p = (lane + 32 * j) % TR::SC_COPIES; /* lanes past the copies: any row */
            const rl_dmat &m = mvx_row<GLU>(a, si, r0, p / TR::SC_PER_ROW, &r);
            s[j] = srow(m, r) + 2 * TR::sc_first(warp, p);
        }
    }

    __device__ __forceinline__ void init(const rl_mv_args &a, int warp, int lane) {
        lt = round = 0;
        seek(a, warp, lane);
    }

    /* the warp's next stage into st, if the block has one left (my_tiles tiles of R rounds) */
    __device__ __forceinline__ void issue(const rl_mv_args &a, uint32_t st, int my_tiles, int R, int nch, int warp,
                                          int lane) {
        if (lt >= my_tiles) return;
        const int c0 = 32 * round + TR::base(warp); /* the warp's first chunk of the round */
#pragma unroll
        for (int j = 0; j < PPL; j++) {
            const int p = lane + 32 * j, k = p % PPR;
            if (c0 + TR::STEP * (k / PPC) < nch) cp16(st + (p / PPR) * TR::WROW + 16 * k, q[j]);
            q[j] += 32 * QB;
        }
#pragma unroll
        for (int j = 0; j < SPL; j++) { /* scales past the row's end are zero-filled */
            const int p = lane + 32 * j;
            if (p >= TR::SC_COPIES) break;
            const int c = 32 * round + TR::sc_first(warp, p), left = c < nch ? 2 * (nch - c) : 0;
            const uint8_t *row = s[j] - 2 * c; /* copies nothing: any address in the row */
            cp_z<TR::SC_BYTES>(st + 16 * TR::WROW + TR::SC_BYTES * p, left ? s[j] : row,
                               left < TR::SC_BYTES ? left : TR::SC_BYTES);
            s[j] += 64;
        }
        if (++round == R) {
            round = 0;
            if (++lt < my_tiles) seek(a, warp, lane);
        }
    }
};

template <int T, bool GLU, int NS, bool RES>
__global__ void __launch_bounds__(MVX_WARPS * 32, 16 / MVX_WARPS) mvx_kernel(const rl_mv_args a) {
    using TR = mvx_tr<T, RES>;
    constexpr int NT = (NS + 7) / 8; /* 8-column MMA tiles */
    constexpr int QB = TR::QB, WROW = TR::WROW, STEP = TR::STEP;
    extern __shared__ __align__(16) uint8_t ring[]; /* per warp, MVX_DEPTH stages */
    __shared__ float part[TR::PART][16][NS + 1];    /* [residue, RES: warp][tile row][column] */
    __shared__ float fin[16][NS + 1];
    rl_pdl_trigger();
    const int n = a.n, nch = n / 32, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const uint8_t *frag = mvx_plane(a);
    const int tiles = mvx_tiles(a, GLU), R = (nch + 31) / 32;
    /* this block's tiles; their rounds are one sequence of stages */
    const int my_tiles = blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    const uint32_t ring0 = (uint32_t)__cvta_generic_to_shared(ring) + warp * MVX_DEPTH * TR::STAGE;
    uint8_t *wring = ring + warp * MVX_DEPTH * TR::STAGE;
    mvx_cursor<T, GLU, RES> cur;
    cur.init(a, warp, lane);
    /* the first stages are weights only: in flight before waiting for the staging kernel */
    for (int s = 0; s < MVX_DEPTH - 1; s++) {
        cur.issue(a, ring0 + s * TR::STAGE, my_tiles, R, nch, warp, lane);
        cp_commit();
    }
    rl_pdl_wait();
    const int pos = a.io ? a.io->pos : 0;
    float acc[MVX_SLOTS][NT][4];
    /* stage s of the warp's ring is round `round` of the block's lt-th tile: s = lt R + round */
    static_assert((MVX_DEPTH & (MVX_DEPTH - 1)) == 0, "the stage index is s % MVX_DEPTH on an unsigned s");
    unsigned s = 0;
    for (int lt = 0; lt < my_tiles; lt++) {
        const int tile = blockIdx.x + lt * gridDim.x;
#pragma unroll
        for (int k = 0; k < MVX_SLOTS; k++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[k][nt][e] = 0.0f;
        /* a round's chunks c = 32 round + base(warp) + STEP k: this warp's fragments advance 32 chunks a round */
        const uint8_t *fr = frag + (size_t)TR::base(warp) * MVX_FRAG;
        for (int round = 0; round < R; round++, s++, fr += 32 * MVX_FRAG) {
            const int c0 = 32 * round + TR::base(warp);
            /* the round's activation fragments (in L2) do not depend on the ring: their loads
             * go out before the stage wait, which then covers their latency */
            /* (written with <=: the same test with < left Q4_0's 16-column GLU kernel an 8-byte spill, ptxas 13) */
            const bool full = c0 + STEP * (MVX_SLOTS - 1) + 1 <= nch;
            uint4 bw[MVX_SLOTS];
            float4 dx4[MVX_SLOTS];
            int4 kb4[MVX_SLOTS]; /* MVX_MAGIC less Q4_0's 8 sum(x) */
            /* FULL: every chunk of the warp's round is below nch: no chunk's address is clamped,
             * so the slots' loads are constant offsets of one base */
            auto load = [&](auto fullc) {
                constexpr bool FULL = decltype(fullc)::value;
#pragma unroll
                for (int k = 0; k < MVX_SLOTS; k++) {
                    const uint8_t *f = FULL || c0 + STEP * k < nch ? fr + STEP * k * MVX_FRAG : frag;
                    bw[k] = *(const uint4 *)(f + 16 * lane);
                    dx4[k] = *(const float4 *)(f + 512 + 32 * t);
                    kb4[k] = *(const int4 *)(f + 512 + 32 * t + 16);
                }
            };
            if (full) load(std::true_type{});
            else load(std::false_type{});
            cp_wait<MVX_DEPTH - 2>();
            __syncwarp(); /* the warp's stage s is in; its lanes are done with stage s - 1, refilled next */
            cur.issue(a, ring0 + ((s + MVX_DEPTH - 1) % MVX_DEPTH) * TR::STAGE, my_tiles, R, nch, warp, lane);
            cp_commit();
            const uint8_t *stg = wring + (s % MVX_DEPTH) * TR::STAGE;
            /* FULL as in load: no term is dropped */
            auto body = [&](auto fullc) {
                constexpr bool FULL = decltype(fullc)::value;
#pragma unroll
                for (int k = 0; k < MVX_SLOTS; k++) {
                    const bool on = FULL || c0 + STEP * k < nch;
                    const float dx[4] = {dx4[k].x, dx4[k].y, dx4[k].z, dx4[k].w};
                    const uint32_t *qa = (const uint32_t *)(stg + g * WROW + k * QB),
                                   *qb = (const uint32_t *)(stg + (g + 8) * WROW + k * QB);
                    uint32_t aw[4];
                    if constexpr (T == RL_Q4_0) {
                        const uint32_t wa = qa[t], wb = qb[t];
                        aw[0] = wa & 0x0F0F0F0Fu;
                        aw[1] = wb & 0x0F0F0F0Fu;
                        aw[2] = (wa >> 4) & 0x0F0F0F0Fu;
                        aw[3] = (wb >> 4) & 0x0F0F0F0Fu;
                    } else {
                        aw[0] = qa[t];
                        aw[1] = qb[t];
                        aw[2] = qa[4 + t];
                        aw[3] = qb[4 + t];
                    }
                    const uint16_t *sc = (const uint16_t *)(stg + 16 * WROW) + TR::sc_slot(warp, k);
                    const float dw[2] = {h2f(sc[g * TR::SC_ROW]), h2f(sc[(g + 8) * TR::SC_ROW])};
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        int d[4]; /* the dot plus the column's term kb, ready for mvx_i2f */
                        mma_s8(d, aw, nt ? bw[k].z : bw[k].x, nt ? bw[k].w : bw[k].y, nt ? kb4[k].z : kb4[k].x,
                               nt ? kb4[k].w : kb4[k].y);
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            /* dot_q8's term, both products rounded; a chunk past the end adds
                             * nothing (not even +0, which would turn a -0 sum into +0) */
                            const int j = (e & 1) + 2 * nt; /* D column 2t + (e & 1) + 8 nt */
                            const float term = __fmul_rn(__fmul_rn(dw[e >> 1], dx[j]), mvx_i2f(d[e]));
                            if (on) acc[k][nt][e] = acc[k][nt][e] + term;
                        }
                    }
                }
            };
            if (full) body(std::true_type{});
            else body(std::false_type{});
        }
        /* the tile's residue sums -> the butterfly's tree -> the epilogue (RES: the tree's first
         * two steps in the warp's registers, the header). The first barrier of the next tile's
         * tree keeps fin from being rewritten while read, and this tile's second keeps part
         * from being rewritten before the tree has read it. */
#pragma unroll
        for (int k = 0; k < (RES ? 1 : MVX_SLOTS); k++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int col = 2 * t + (e & 1) + 8 * nt, row = g + 8 * (e >> 1);
                    if (col >= NS) continue;
                    if constexpr (RES) part[warp][row][col] = (acc[0][nt][e] + acc[2][nt][e]) + (acc[1][nt][e] + acc[3][nt][e]);
                    else part[MVX_SLOTS * warp + k][row][col] = acc[k][nt][e];
                }
        __syncthreads();
        for (int i = threadIdx.x; i < 16 * NS; i += blockDim.x) {
            const int row = i / NS, col = i % NS;
            float v[TR::PART];
#pragma unroll
            for (int r = 0; r < TR::PART; r++) v[r] = part[r][row][col];
            if constexpr (RES) {
                mv_tree_step<4>(v);
                mv_tree_step<2>(v);
                mv_tree_step<1>(v);
                fin[row][col] = v[0];
            } else {
                fin[row][col] = mv_tree32(v);
            }
        }
        __syncthreads();
        int si, r0;
        mvx_tile<GLU>(a, tile, &si, &r0);
        const rl_dmat &ma = a.seg[si].w;
        for (int i = threadIdx.x; i < 8 * NS; i += blockDim.x) { /* mv_finish's epilogue per pair and column */
            const int pr = i / NS, col = i % NS;
            if (GLU) {
                if (r0 + pr < ma.rows) mv_epilogue<true>(a, mv_task{}, r0 + pr, fin[pr][col], fin[pr + 8][col], pos, col);
                continue;
            }
            mv_task tk;
            tk.seg = si;
            tk.ra = r0 + 2 * pr;
            tk.rb = tk.ra + 1 < ma.rows ? tk.ra + 1 : -1;
            if (tk.ra < ma.rows) mv_epilogue<false>(a, tk, 0, fin[2 * pr][col], fin[2 * pr + 1][col], pos, col);
        }
    }
    cp_wait<0>(); /* no copy outlives the block */
}

typedef void (*mvx_fn)(const rl_mv_args);

template <int T, bool RES> static mvx_fn mvx_pick_ns(bool glu, int ns) {
    switch (ns) {
    case 4: return glu ? mvx_kernel<T, true, 4, RES> : mvx_kernel<T, false, 4, RES>;
    case 8: return glu ? mvx_kernel<T, true, 8, RES> : mvx_kernel<T, false, 8, RES>;
    default: return glu ? mvx_kernel<T, true, 16, RES> : mvx_kernel<T, false, 16, RES>;
    }
}

static mvx_fn mvx_pick(uint32_t type, bool res, bool glu, int ns) {
    if (type == RL_Q4_0) return res ? mvx_pick_ns<RL_Q4_0, true>(glu, ns) : mvx_pick_ns<RL_Q4_0, false>(glu, ns);
    return res ? mvx_pick_ns<RL_Q8_0, true>(glu, ns) : mvx_pick_ns<RL_Q8_0, false>(glu, ns);
}

static size_t mvx_smem(uint32_t type, bool res) {
    const int stage = type == RL_Q4_0 ? (res ? mvx_tr<RL_Q4_0, true>::STAGE : mvx_tr<RL_Q4_0, false>::STAGE)
                                      : (res ? mvx_tr<RL_Q8_0, true>::STAGE : mvx_tr<RL_Q8_0, false>::STAGE);
    return (size_t)MVX_WARPS * MVX_DEPTH * stage;
}

int rl_mvx_prepare(void) {
    for (uint32_t type : {RL_Q4_0, RL_Q8_0})
        for (int res = 0; res < 2; res++)
            for (int glu = 0; glu < 2; glu++)
                for (int ns : {4, 8, 16}) {
                    const int smem = (int)mvx_smem(type, res);
                    cudaError_t err = cudaFuncSetAttribute(mvx_pick(type, res, glu, ns),
                                                           cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
                    if (err != cudaSuccess) return (int)err;
                }
    return 0;
}

bool rl_mvx_applies(const rl_mv_args *a, const rl_cuda_knobs *k) {
    const uint32_t type = a->seg[0].w.type;
    if (!k->mvx || a->ns <= 1 || !a->fast || (type != RL_Q4_0 && type != RL_Q8_0) || a->n % 32) return false;
    return rl_mv_planes_aligned(a, 16, true);
}

uint8_t *rl_mvx_plane(const rl_mv_args *a, int *k8) {
    *k8 = mvx_k8(*a);
    return mvx_plane(*a);
}

int rl_mvx_stage_launch(const rl_mv_args *a, const rl_cuda_knobs *k, int stage_warps, cudaStream_t st) {
    /* without a norm no sum depends on the block's size (each chunk is rounded on its own), so
     * the knob may take 8-warp blocks, which launch with PDL under knob 2; the same bytes. (The
     * normed inputs in 8-warp blocks summing the squares in the 16-warp order were 6-8% slower,
     * docs/PERF.md v2.31.) */
    if (!a->norm_w && k->mvx_stage8 && stage_warps > 8) stage_warps = 8;
    const int per = stage_warps * 8, slices = (a->n / 32 + per - 1) / per; /* a quarter chunk per thread */
    /* PDL on the staging launch (knob 1; with 2, the default, for blocks of at most 8 warps):
     * measured +4.5% / +7.5% at S=16 on TinyLlama Q4_0 / Q8_0 (8-warp staging blocks) but -1.2
     * to -1.7% on 7B / 8B (16-warp blocks) (docs/PERF.md v2.12) */
    const bool spdl = k->pdl == 1 || (k->pdl == 2 && stage_warps <= 8);
    return rl_launch(mvx_stage_kernel, dim3(a->ns, slices), dim3(stage_warps * 32), 0, st, spdl, *a) ? -1 : 0;
}

int rl_mvx_launch(const rl_mv_args *a, const rl_cuda_knobs *k, int n_sm, int stage_warps, cudaStream_t st) {
    const bool glu = a->mode == RL_MV_GLU;
    const uint32_t type = a->seg[0].w.type;
    if (a->ns != 4 && a->ns != 8 && a->ns != 16) return -1;
    if (!a->staged && rl_mvx_stage_launch(a, k, stage_warps, st)) return -1;
    const bool res = k->mvx_res == 1;
    mvx_fn f = mvx_pick(type, res, glu, a->ns);
    const size_t smem = mvx_smem(type, res);
    int occ = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, f, MVX_WARPS * 32, smem) != cudaSuccess || occ < 1) occ = 1;
    const int tiles = mvx_tiles(*a, glu), cap = occ * n_sm, blocks = tiles < cap ? tiles : cap;
    /* PDL (knob 1 or 2): the first rounds' weights are copied while the staging runs */
    return rl_launch(f, dim3(blocks), dim3(MVX_WARPS * 32), smem, st, k->pdl != 0, *a) ? -1 : a->staged ? 1 : 2;
}
