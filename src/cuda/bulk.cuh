/* The copy engine's side of shared memory (sm_90): cp.async.bulk moves a contiguous run of
 * global memory into shared memory without lane instructions per 16 bytes, and counts the
 * bytes that have landed on an mbarrier (its transaction count); a thread waits for the
 * barrier's phase to flip. Used by the bulk-page matvec (mvs.cuh mvb_block) and the kernel lab
 * (bench/lab_bulk.cu). Device code only; every function here is a no-op below sm_90, where
 * nothing calls it (the callers check the architecture on the host). */
#ifndef RL_CUDA_BULK_CUH
#define RL_CUDA_BULK_CUH

#include <stdint.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define RL_BULK 1
#else
#define RL_BULK 0
#endif

__device__ __forceinline__ uint32_t rl_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* A barrier that completes a phase after `count` arrivals (and its expected bytes). */
__device__ __forceinline__ void mb_init(uint32_t bar, int count) {
#if RL_BULK
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
#endif
}
/* After initialising barriers, before the copy engine or another thread uses them. */
__device__ __forceinline__ void mb_init_fence() {
#if RL_BULK
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
/* One arrival that also expects tx more bytes before the phase completes. */
__device__ __forceinline__ void mb_expect(uint32_t bar, uint32_t tx) {
#if RL_BULK
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(tx) : "memory");
#endif
}
/* Expects tx more bytes in the current phase, without arriving. */
__device__ __forceinline__ void mb_expect_only(uint32_t bar, uint32_t tx) {
#if RL_BULK
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(tx) : "memory");
#endif
}
__device__ __forceinline__ void mb_arrive(uint32_t bar) {
#if RL_BULK
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
#endif
}
/* Whether the phase of the given parity (0 for the barrier's first phase, then alternating)
 * has completed; the hardware may suspend the thread a while before answering no. */
__device__ __forceinline__ bool mb_try(uint32_t bar, uint32_t parity) {
    uint32_t ok = 1;
#if RL_BULK
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
#endif
    return ok != 0;
}
/* Orders this thread's earlier generic-proxy accesses to shared memory before its later
 * copy-engine writes (a slot read by the lanes, then refilled by a bulk copy). */
__device__ __forceinline__ void bulk_fence() {
#if RL_BULK
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
/* bytes (a multiple of 16; both addresses 16-byte aligned) from src to shared address dst,
 * counted on bar's transaction count. */
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
#if RL_BULK
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
#endif
}

#endif
