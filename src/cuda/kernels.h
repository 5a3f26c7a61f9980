/* Launchers of the CUDA kernels (C++ side only; included by the .cu files of src/cuda). One launcher per
 * step of the forward pass; every launcher takes a stream so the whole token can be captured
 * into one CUDA graph. Inputs that change per token (token id, position) are read from device
 * memory (io), never passed by value, so the captured graph stays valid for every token. */
#ifndef RL_CUDA_KERNELS_H
#define RL_CUDA_KERNELS_H

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

/* Programmatic dependent launch (Hopper): a kernel launched with the attribute may start while
 * the previous kernel of the stream is still running. Every kernel here calls rl_pdl_wait()
 * before it touches memory another kernel writes (only weights and the per-token io may be read
 * before it), and rl_pdl_trigger() at its start so that the next kernel's blocks can become
 * resident and prefetch their weights early. Both are no-ops without the attribute and below
 * sm_90. */
__device__ __forceinline__ void rl_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void rl_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* A load of something another SM may have written earlier in the same launch. CG (the
 * persistent kernel, persist.cu): from L2 (__ldcg), as an SM's L1 is not coherent with the
 * other SMs' stores. Otherwise a plain load: after a kernel boundary L1 is safe, and it helps
 * (mv_stage's second pass over x hits it; __ldcg there cost the launch graph ~3%, and flash
 * decode's GQA heads on one SM share K/V lines: docs/PERF.md v2.5). */
template <bool CG, typename U> __device__ __forceinline__ U rl_ld_cg(const U *p) {
    if constexpr (CG) return __ldcg(p);
    else return *p;
}

/* Launches kernel f with the programmatic-serialization attribute when pdl is set, and in
 * thread-block clusters of cl_y blocks along y when cl_y > 0 (grid.y a multiple); cudaError_t. */
template <typename... P, typename... A>
static inline int rl_launch_cl(void (*f)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, bool pdl,
                               int cl_y, A... args) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[2];
    unsigned n = 0;
    if (pdl) {
        at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cl_y > 0) {
        at[n].id = cudaLaunchAttributeClusterDimension;
        at[n].val.clusterDim.x = 1;
        at[n].val.clusterDim.y = (unsigned)cl_y;
        at[n++].val.clusterDim.z = 1;
    }
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = at;
    cfg.numAttrs = n;
    return (int)cudaLaunchKernelEx(&cfg, f, args...);
}

/* f's dynamic shared memory limit raised to at least smem, never lowered: the kernels are the
 * process's, and a context opened later with less must not take room from an earlier one's */
template <typename F> static inline cudaError_t rl_smem_at_least(F f, size_t smem) {
    cudaFuncAttributes fa;
    const cudaError_t err = cudaFuncGetAttributes(&fa, f);
    if (err != cudaSuccess || (size_t)fa.maxDynamicSharedSizeBytes >= smem) return err;
    return cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
}

template <typename... P, typename... A>
static inline int rl_launch(void (*f)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, bool pdl,
                            A... args) {
    return rl_launch_cl(f, grid, block, smem, st, pdl, 0, args...);
}

/* Tokens per launch of the exact chunked prefill: 1 (decoding), 4, 8 or 16. */
#define RL_CHUNK_MAX 16

/* Per-launch inputs in device memory, written by one small copy before each graph launch: S
 * tokens (1 when decoding) at positions pos .. pos + S - 1, ids toks[0 .. S). */
struct rl_cuda_io {
    int32_t pos;
    int32_t toks[RL_CHUNK_MAX];
};

/* ---- weights ----------------------------------------------------------------------------- */

/* A weight matrix in the device arena. Q4_0 and Q8_0 are repacked at upload into a quant plane
 * (rows x n/2 or n bytes, every 32-element block's quants 16-byte aligned) and a scale plane
 * (rows x n/32 fp16); Q6_K into a plane of 208-byte blocks (ql, qh, sub-scales: 16-byte
 * aligned) and a plane of its fp16 d (rows x n/256); RQ2 into a code plane (rows x n/4 bytes:
 * every 64-element block's 16 code bytes, as in the file, 16-byte aligned) and a plane of its
 * (d, m) fp16 pairs (rows x n/64 x 4 bytes, d first); RQ4 the same with 32 code bytes per
 * block (rows x n/2 bytes); every other type keeps its GGUF
 * row-major block layout (scale unused). Same total bytes as the file. */
struct rl_dmat {
    uint32_t type;
    const uint8_t *q;   /* quants / raw rows, row r at q + r * q_row */
    const uint8_t *s;   /* fp16 scales (Q4_0, Q8_0, Q6_K; RQ2 / RQ4 (d, m)), row r at s + r * s_row; else NULL */
    size_t q_row, s_row;
    int rows, cols;
};

/* Bytes the device form needs (quant plane, scale plane); equal in total to the GGUF bytes. */
void rl_dmat_sizes(uint32_t type, size_t rows, size_t cols, size_t row_bytes, size_t *q_bytes,
                   size_t *s_bytes);
/* Converts rows of the GGUF layout (src, row_bytes apart) into the two planes on the host. */
void rl_dmat_repack(uint32_t type, const uint8_t *src, size_t rows, size_t cols, size_t row_bytes,
                    uint8_t *q, uint8_t *s);
bool rl_dmat_repacked(uint32_t type);

/* ---- matvec ------------------------------------------------------------------------------ */

enum rl_mv_mode {
    RL_MV_STORE = 0, /* y[r] = W[r]·x (+ bias) for every segment */
    RL_MV_ADD = 1,   /* y[r] += W[r]·x: residual add in the epilogue */
    RL_MV_GLU = 2,   /* y[r] = silu(W0[r]·x) * (W1[r]·x): gate + up + SwiGLU in one pass */
    RL_MV_GLU_MUL = 3, /* y[r] = silu(y[r]) * (W[r]·x): the up half when gate and up differ in type */
};

/* Up to three matrices over the same input in one launch (Q/K/V; gate/up). */
struct rl_mv_seg {
    rl_dmat w;
    const float *bias; /* [rows] or NULL */
    float *y;          /* [rows] fp32 output; unused when y16 is set */
    uint16_t *y16;     /* or: f16 row io->pos of a [n_ctx][rows] cache (the K/V write) */
    bool rope;         /* rotate row pairs (2i, 2i+1) of every hd-row head (llama RoPE) first */
};

struct rl_mv_args {
    rl_mv_seg seg[3];
    int nseg;
    int mode;
    const float *x;      /* [n] input */
    const float *norm_w; /* [n]: x is RMS-normalised with these weights in the prologue, or NULL */
    float eps;
    int n;
    /* RoPE in the epilogue (segments with rope set): */
    const float *inv_freq; /* [rope_dim / 2] */
    const rl_cuda_io *io;  /* the position (also for y16) */
    int hd, rope_dim;
    bool fast;             /* 8-bit activations for the types that have them (rl_mv_q8) */
    /* an exact chunk of ns tokens (1 = decoding): column s reads x + s * n and writes segment
     * rows at y + s * ys (and y16 row io->pos + s); every column's sums are the one-column
     * kernel's, op for op. ns > 1 needs scratch (rl_mv_scratch_bytes). */
    int ns;
    int ys;
    void *scratch;
    /* a tensor-core chunk whose fragment plane its input's producer wrote (the flash decode
     * for Wo, rl_att_args frag): rl_mvx_launch runs no staging launch */
    bool staged;
};

/* Tile knobs (rl_cuda_knobs, read once from the environment). */
struct rl_cuda_knobs {
    int mv_warps;        /* warps per matvec block (RL_CUDA_MV_WARPS; unset: 16 at n_embd >= 4096,
                            else 8; chunks use at most 8) */
    int mv_blocks_per_sm;/* matvec grid cap per SM (RL_CUDA_MV_BLOCKS, default 8; also capped
                            by the kernel's occupancy, so the grid is one wave) */
    int att_split;       /* positions per attention split (RL_CUDA_ATT_SPLIT, default 128) */
    int att_max_split;   /* most splits per head (RL_CUDA_ATT_MAXSPLIT; unset: 16 where decoding's
                            attention runs in clusters, else 20): wider splits past att_split *
                            att_max_split positions */
    int pdl;             /* programmatic dependent launch (RL_CUDA_PDL; sm_90 only): 0 off, 1 every
                            launch, 2 (default) only the launches that copy weights before they
                            wait (the streamed matvec, the tensor-core chunk) */
    int rope_fold;       /* RoPE + KV write in the QKV epilogue (RL_CUDA_ROPE_FOLD, default 1) */
    int rq2_lut;         /* RQ2 matvec code decoder (RL_CUDA_RQ2_LUT): 0 shifts (default), 1 the
                            256-entry byte -> 4 codes table in shared memory */
    int persist;         /* decoding runs every layer in one persistent kernel where it applies
                            (RL_CUDA_PERSIST: 0 off, the default: slower than the
                            launch graph on every model measured, docs/PERF.md v2.5; 1 on) */
    int mvs;             /* decoding's matvec streams weights through a shared-memory ring
                            (RL_CUDA_MVS): 0 never (mv_kernel), 1 Q4_0/Q8_0/FP8/RQ2/RQ4/F16/BF16,
                            2 Q4_0/Q8_0/FP8/RQ2/RQ4 (RQ2: the shift decoder only);
                            unset: by shape (cuda_backend.cu mvs_for) */
    int mvs2;            /* a QKV whose V has another type than Q and K (Q4_K_M, Q5_K_M: Q6_K in
                            half the layers) streamed in one launch, not two (RL_CUDA_MVS2: 1
                            default, 0 two launches); the same bits */
    int mvb;             /* the streamed matvec's weights arrive by bulk copies (RL_CUDA_MVB: 0
                            cp.async per lane, the default; 1 pages of whole items moved by a
                            producer warp with cp.async.bulk, mvs.cuh mvb_block, on sm_90 for
                            Q4_0/Q8_0/FP8/RQ2/RQ4); the same bits */
    int mvb_page;        /* its page size aimed for, in KB (RL_CUDA_MVB_PAGE; whole items) */
    int mvb_slots;       /* its most slots per block (RL_CUDA_MVB_SLOTS; fewer where they do not fit) */
    int mvx;             /* exact chunks of Q4_0 / Q8_0 with 8-bit activations on int8 tensor
                            cores (mvx.cu; RL_CUDA_MVX: 1 default, 0 the dp4a chunk kernel);
                            the same bits either way */
    int att_gqa;         /* an exact chunk's flash decode in a block per KV group (not per
                            head) where the heads are grouped and a token's attention splits
                            times the group's heads exceed this (RL_CUDA_ATT_GQA, default 16;
                            0 never); the same bits */
    int att_mma;         /* the flash decode on tensor cores, a KV group a block (RL_CUDA_ATT_MMA:
                            default 33; bit 1 decoding and exact chunks of grouped heads, f16
                            cache, 2-8 heads a group, hd 64 or 128; 2 the next tile's loads
                            ahead; 4 twice the warps; 8 launched with PDL; 16 plain heads too;
                            32 decoding's split blocks as one cluster (2-16 splits, sm_90 with
                            cluster launch, else cleared at open), merging through distributed
                            shared memory: the same bytes as without it; 64 a chunk's too).
                            The tensor-core kernel's are not the block per head's bits; its
                            chunks = one token */
    int att_bands;       /* decoding's graph by the position's attention splits (at most 1, 2,
                            4, 8, 16, or all), so the grid holds only splits that run
                            (RL_CUDA_ATT_BANDS: 1 default, 0 one graph); the same bits */
    int att_pdl_band;    /* the attention launched with PDL in decoding's graphs whose grid holds
                            at most this many splits (RL_CUDA_ATT_PDL_BAND; 0: as
                            RL_CUDA_ATT_MMA bit 8 says); the same bits */
    int att_stage;       /* in such a chunk the flash decode writes Wo's int8 input itself, one
                            launch a layer fewer (RL_CUDA_ATT_STAGE: 1 default, 0 Wo's own
                            staging launch); the same bits */
    int mvx_stage8;      /* such a chunk's staging of an input without a norm (down's; Wo's
                            where the attention does not stage it) in blocks of at most 8 warps,
                            so with PDL under RL_CUDA_PDL=2 (RL_CUDA_MVX_STAGE8: 1 default; 0 the
                            one-token kernel's block size); the same bits, S=16 +1-3% on 7B / 8B
                            (docs/PERF.md v2.30) */
    int mvx_res;         /* the tensor-core chunk's layout (mvx.cu's header; RL_CUDA_MVX_RES): 0
                            blocked (warp w: residues 4w..4w+3), 1 residue (w, w+8, w+16, w+24;
                            the tree's first two steps in registers); unset: 1 at n_embd <= 2048
                            (cuda_backend.cu mvx_res_for); the same bits either way */
    int pf_mma;          /* the fast prefill's attention on fp16 tensor cores where it applies
                            (RL_CUDA_PF_MMA: 1 default, 0 the fp32 CUDA-core kernel) */
    int pf_rope_tab;     /* the fast prefill's RoPE angles from a per-chunk table
                            (RL_CUDA_PF_ROPE_TAB: 1 default, 0 computed per pair); same bits */
};

/* Of the kernels one rl_mv_launch enqueued, how many streamed (mvs.cu) and of those how many
 * by bulk copies: per launch, since a mixed-type QKV or GLU is two launches of one step. */
typedef struct rl_mv_count {
    size_t streamed, bulked;
} rl_mv_count;

/* Launches one matvec (or one per segment when their types differ, or gate then up when the
 * GLU's two types differ). Returns the number of kernels launched, or -1 on a launch error;
 * adds its streamed launches to *n where n is not NULL. */
int rl_mv_launch(const rl_mv_args *a, const rl_cuda_knobs *k, int n_sm, cudaStream_t st, rl_mv_count *n);
/* Whether every matrix of a (gate and up with GLU, else each segment) has a's first type, its
 * quant plane 16-byte aligned row by row and its scale plane s_to-byte aligned row by row
 * (absent: allowed unless s_needed). The streamed and tensor-core kernels copy the planes in
 * pieces of those sizes. */
bool rl_mv_planes_aligned(const rl_mv_args *a, size_t s_to, bool s_needed);
/* The streamed matvec (mvs.cu): launches it when it applies (one token, a plane type, aligned
 * planes, n a multiple of 64, the knob on): 1, or 0 when it does not apply, -1 on a launch
 * error; a launch is added to *n (streamed, and bulked when by bulk copies) where n is not
 * NULL. rl_mvs_prepare raises its kernels' shared-memory limit to the device's (at open). */
int rl_mvs_launch(const rl_mv_args *a, const rl_cuda_knobs *k, int n_sm, cudaStream_t st, rl_mv_count *n);
bool rl_mvs_applies(const rl_mv_args *a, const rl_cuda_knobs *k);
/* Two streamed matvecs of different types on the same input (not GLU) in one launch (knob
 * RL_CUDA_MVS2; the pairs mvs.cu takes: Q4_K or Q5_K, then Q6_K): 1, or 0 when it does not
 * apply (the caller launches them apart), -1 on a launch error; counted in *n as one
 * streamed launch where n is not NULL. */
int rl_mvs_launch2(const rl_mv_args *a1, const rl_mv_args *a2, const rl_cuda_knobs *k, int n_sm, cudaStream_t st,
                   rl_mv_count *n);
/* Warps per block the streamed launch of a uses (0: it would not stream). A chunk stages its
 * columns with the decode kernel's block size, streamed or not: the norm's sum depends on it. */
int rl_mvs_warps(const rl_mv_args *a, const rl_cuda_knobs *k);
int rl_mvs_prepare(void);
/* The dynamic shared memory a launch of kernel f in blocks of nw warps asks for when it needs
 * `need` bytes: raised (up to lim) where that would let more than 16 warps' blocks share an SM
 * (the streamed launches' residency, mvs.cu; the kernel lab uses it too). */
size_t rl_mvs_pad(const void *f, int nw, size_t need, size_t lim);
/* Whether the streamed launch of a would copy its weights in bulk (knob RL_CUDA_MVB). */
bool rl_mvb_applies(const rl_mv_args *a, const rl_cuda_knobs *k);
/* The tensor-core exact chunk (mvx.cu): whether it applies to a (ns > 1, Q4_0 / Q8_0, 8-bit
 * activations, the knob on), and its launches: the columns' staging, for stage_warps warps (the
 * one-token kernel's block size, so the norm's sums are the same; RL_CUDA_MVX_STAGE8 may launch
 * 8-warp blocks for an input without a norm), then the matvec.
 * Returns the number of launches (1 where a->staged), -1 on error. */
bool rl_mvx_applies(const rl_mv_args *a, const rl_cuda_knobs *k);
/* The fragment plane of a's chunk (in a->scratch after the staged columns) and its k8 (*k8). */
uint8_t *rl_mvx_plane(const rl_mv_args *a, int *k8);
/* The staging launch alone (rl_mvx_launch's first; the test hooks): 0, or -1 on a launch error. */
int rl_mvx_stage_launch(const rl_mv_args *a, const rl_cuda_knobs *k, int stage_warps, cudaStream_t st);
int rl_mvx_launch(const rl_mv_args *a, const rl_cuda_knobs *k, int n_sm, int stage_warps, cudaStream_t st);
/* Raises its kernels' dynamic shared-memory limit (at open); cudaError_t. */
int rl_mvx_prepare(void);
/* Dynamic shared memory one matvec block needs for an input of n values (q8: with the 8-bit
 * activation planes). */
size_t rl_mv_smem(int n, bool q8);
/* Whether this backend has kernels for the weight type at all. */
bool rl_mv_type_ok(uint32_t type);
/* Whether the type's matvec has the 8-bit-activation path (the CPU's fast path). */
bool rl_mv_q8(uint32_t type);
/* Scratch an ns-column launch over n inputs needs (the normalised and 8-bit inputs). */
size_t rl_mv_scratch_bytes(int n, int ns);
/* Raises the matvec kernel's dynamic shared-memory limit to cover n values; cudaError_t. */
int rl_mv_prepare(int max_n);

/* ---- attention --------------------------------------------------------------------------- */

struct rl_att_args {
    float *q;              /* [n_head * hd] fp32, roped in place */
    const float *k, *v;    /* [n_head_kv * hd] fp32 new key / value (biases already added) */
    uint16_t *kc, *vc;     /* this layer's cache, [n_ctx][kv_dim] f16, or int8 when kd is set */
    float *kd, *vd;        /* --kv-type q8: the fp32 scale of every 32 cached values,
                              [n_ctx][kv_dim / 32]; NULL: an f16 cache */
    const float *q_norm, *k_norm; /* [hd] or NULL */
    const float *inv_freq; /* [rope_dim / 2] */
    float *part;           /* [n_head][n_split][hd + 2] flash-decode partials */
    float *out;            /* [n_head * hd] */
    int *count;            /* [n_head] finished splits (zero between launches) */
    const rl_cuda_io *io;
    int n_head, n_head_kv, hd, rope_dim, n_ctx;
    int n_split;   /* grid: splits of `split` positions covering n_ctx */
    int split;     /* positions per split (knob); widened at depth to keep <= max_split splits */
    int split_max; /* the widest split any position uses (shared-memory size) */
    int max_split; /* splits active at most (knob): the split widens past max_split * split */
    bool neox;
    float eps;
    /* several tokens (the fast prefill; decoding: n_tok 1, io set): */
    int n_tok;             /* tokens: grid y of rope_kv, queries of the prefill attention */
    int tok_stride;        /* floats from one token's q (k, v) to the next's */
    int pos0;              /* position of the first token when io is NULL */
    const float *bq, *bk, *bv; /* biases rope_kv adds first (prefill), or NULL */
    /* an exact chunk (n_tok tokens) whose Wo matvec runs on tensor cores: its fragment plane
     * (rl_mvx_plane), which the flash decode fills from its outputs (Wo's rl_mv_args staged),
     * and that plane's k8 (8 Q4_0, 0 Q8_0); NULL: the outputs only */
    uint8_t *frag;
    int frag_k8;
    /* an exact chunk of grouped heads in a block per KV group, split and token where it
     * applies (rl_att_gqa; the host sets it by the chunk's splits, knob RL_CUDA_ATT_GQA) */
    bool gqa;
    /* the flash decode on tensor cores, a KV group a block, decoding and exact chunks alike, where the
     * shape allows (RL_CUDA_ATT_MMA's bits, attention.cu flash_mma_kernel; 0 off) */
    int mma;
    /* an exact chunk's most active splits per token (its graph's band; 0: n_split): the
     * grid's splits, so that a chunk at short positions launches no blocks that return at once */
    int split_cap;
};

/* Positions per flash-decode split over n_pos positions: the knob `split` while that makes at
 * most max_split splits; past that, widened so the merge stays short at depth, in steps of 128,
 * the block's thread count: the score pass gives each thread one key per 128 positions, so a
 * split of 288 would cost every thread a third dependent key load for 32 keys' worth of work
 * (docs/PERF.md v2.10). A function of the position only, and never narrower at a later one,
 * so every block, the persistent kernel's scheduler and the host's shared-memory size (the
 * split at n_ctx) agree. */
__host__ __device__ inline int rl_att_split_len(int split, int max_split, int n_pos) {
    if ((n_pos + split - 1) / split <= max_split) return split;
    return ((n_pos + max_split - 1) / max_split + 127) / 128 * 128;
}

/* q/k norm, RoPE, and the f16 write of k and v at io->pos (one launch). */
void rl_rope_kv_launch(const rl_att_args *a, bool pdl, cudaStream_t st);
/* The same for the fast prefill's a->n_tok tokens at pos0..: one thread per pair where no q/k
 * norm and no q8 cache asks for rope_kv's block per head and token (rl_rope_kv_prefill_flat),
 * the angles' (cos, sin) read from tab (NULL: computed per pair), which rl_rope_table_launch fills for a->n_tok tokens
 * at a->pos0 and a->inv_freq ([n_tok][rope_dim / 2]; the same for every layer that shares
 * inv_freq). Check cudaGetLastError. */
bool rl_rope_kv_prefill_flat(const rl_att_args *a);
void rl_rope_table_launch(const rl_att_args *a, float2 *tab, cudaStream_t st);
void rl_rope_kv_prefill_launch(const rl_att_args *a, const float2 *tab, cudaStream_t st);
/* Split-K flash decode over positions [0, pos]; the last split of each head to finish merges
 * the partials in split order (one launch). With n_tok > 1 (an exact chunk), token z attends
 * over [0, pos + z] with its own q (tok_stride apart), output (q_dim apart), partials and
 * tickets: each token's arithmetic is exactly the one-token launch's. */
int rl_attention_launch(const rl_att_args *a, bool pdl, cudaStream_t st);
/* Whether that chunk runs as one block per KV group, split and token (attention.cu,
 * flash_chunk_gqa_kernel: the same bits, each row read once for the group's heads). */
bool rl_att_gqa(const rl_att_args *a);
/* whether a launch runs the group's heads on tensor cores (a.mma set, its shapes) */
bool rl_att_mma(const rl_att_args *a);
/* Whether a's launch runs its splits as clusters (the tensor-core kernel, bit 32). */
bool rl_att_cluster(const rl_att_args *a);
/* an RL_CUDA_ATT_MMA value as this device runs it: the cluster bits (32, 64) cleared
 * where the device has no cluster launch or the loaded kernel is not sm_90 code */
int rl_att_mma_knob(int mma);
/* the most blocks a cluster of splits may hold on this device: 16, or fewer where
 * rl_attention_prepare found no room for that many (splits beyond it run without clusters) */
int rl_att_cluster_max(void);
/* Dynamic shared memory of one flash-decode block (a.hd, split_max), and the limit of the
 * kernels for that head size (f16 and q8 cache; the block per KV group's too, which also needs
 * n_split) raised to it (at open: never inside a capture); cudaError_t. */
size_t rl_attention_smem(const rl_att_args *a);
int rl_attention_prepare(const rl_att_args *a);

/* Causal attention of a.n_tok queries at positions a.pos0.. (roped q at a.tok_stride apart)
 * over the cache; out: [n_tok][n_head * hd] fp16, the next GEMM's input. mma: on the tensor
 * cores where rl_attention_prefill_mma says it applies (an f16 cache, hd 64, 80, 96 or 128),
 * else (and with mma false) fp32 on the CUDA cores, hd <= 256 (else cudaErrorInvalidValue);
 * returns cudaError_t. */
bool rl_attention_prefill_mma(const rl_att_args *a);
int rl_attention_prefill_launch(const rl_att_args *a, __half *out, bool mma, cudaStream_t st);

/* ---- the persistent decode kernel (persist.cu) ------------------------------------------------
 * Every layer of one decoding token in one launch: per layer the phases QKV matvec (RoPE and the
 * f16 K/V write folded in), flash decode, Wo (+ residual), gate + up + SiLU, down (+ residual),
 * separated by grid barriers, each computed with the code of its one-launch kernel (mvs.cuh,
 * attention.cuh) at the same block size, so the logits are the launch-per-step graph's, bit for
 * bit. A warp issues its first weight stages of the next matvec before the barrier that ends
 * the current phase. */
struct rl_pk_layer {
    rl_mv_args qkv, wo, glu, down; /* ns 1 */
    rl_att_args att;
};

struct rl_pk_plan {
    uint32_t type; /* of every matrix of every layer */
    bool q8;       /* 8-bit activations */
    int warps;     /* per block: the streamed launches' (rl_mvs_warps), so the same sums */
    int blocks;    /* resident at once (a cooperative launch) */
    int hj;        /* flash decode's dimension pairs per lane: 1, 2 or 4 */
    size_t xs_bytes, att_smem, smem; /* staging area (also the attention groups'), one group's
                                        attention memory, dynamic shared memory in all */
};

/* Whether the persistent kernel runs these n_layer layers (host copies of the arguments): 0 and
 * the plan, or -1 with the reason in why. Also raises the kernel's shared-memory limit. */
int rl_persist_plan(const rl_pk_layer *lay, int n_layer, const rl_cuda_knobs *k, int n_sm, rl_pk_plan *plan,
                    char *why, size_t why_cap);
/* Grid barriers of one launch over n_layer layers (5 per layer, none after the last). */
__host__ __device__ inline int rl_persist_barriers(int n_layer) { return 5 * n_layer - 1; }
/* Words of the kernel's trace (rl_persist_launch). */
inline size_t rl_persist_trace_words(int n_layer, int blocks) {
    return (size_t)(2 * rl_persist_barriers(n_layer) + 2) * (size_t)blocks;
}
/* One token: lay is the device copy of the layers' arguments, bar the kernel's 64-bit barrier
 * counter (zero when allocated; only this backend's launches may touch it), trace NULL or
 * [2 * rl_persist_barriers + 2][plan->blocks] timestamps (ns): each block's start, arrival at
 * and release from every barrier, end. cudaError_t. */
int rl_persist_launch(const rl_pk_plan *plan, const rl_pk_layer *lay, int n_layer, unsigned long long *bar,
                      unsigned long long *trace, cudaStream_t st);

/* ---- fast prefill (prefill.cu, gemm.cu) ------------------------------------------------------ */

/* Rows of m dequantised: out row i = row (ids ? ids[i] : r0 + i), n rows, fp16 (f16 set) or
 * fp32, m.cols values each. cudaError_t. */
int rl_deq_rows_launch(const rl_dmat *m, const int32_t *ids, int r0, int n, void *out, bool f16,
                       cudaStream_t st);
/* out[t] = fp16(w * (x[t] * r_t)) for n_tok rows of n values (x rows n apart, out rows ldo
 * apart): decoding's RMSNorm operations, its reduction order only at the default 8 warps. */
int rl_rmsnorm_f16_launch(const float *x, int n, int n_tok, const float *w, float eps, __half *out,
                          int ldo, cudaStream_t st);
/* out[t][i] = fp16(silu(gu[t][i]) * gu[t][F + i]) for n_tok rows. */
int rl_silu_mul_f16_launch(const float *gu, int F, int n_tok, __half *out, cudaStream_t st);

/* cuBLAS, loaded at run time (gemm.cu). rl_gemm_open: 0, or -1 with the reason in why. */
struct rl_gemm;
int rl_gemm_open(rl_gemm **g, cudaStream_t st, char *why, size_t why_cap);
void rl_gemm_close(rl_gemm *g);
/* Row-major C[t][r] = beta * C[t][r] + sum_k A[t][k] * W[r][k], t < n_tok, r < rows; fp16
 * inputs, fp32 accumulation and output. 0, or the cuBLAS status. */
int rl_gemm_f16(rl_gemm *g, const __half *W, int rows, int k, const __half *A, int lda, int n_tok,
                float *C, int ldc, float beta);

/* ---- small kernels ----------------------------------------------------------------------- */

/* *out = index of the largest of n values (first one on ties). */
void rl_argmax_launch(const float *v, int n, int32_t *out, bool pdl, cudaStream_t st);
/* One pass of 16-byte streaming loads over n16 * 16 bytes; writes one word per block to sink. */
void rl_read_stream_launch(const void *buf, size_t n16, uint32_t *sink, int blocks,
                           cudaStream_t st);

#endif
