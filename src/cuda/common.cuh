// common.cuh - reductions and launch helpers shared by the .cu files.
#ifndef HM_CUDA_COMMON_CUH
#define HM_CUDA_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include <utility>

#include "cuda/kernels.h"
#include "quant/types.h"

// Programmatic dependent launch (sm_90 and later): a kernel launched by hm_launch while
// hm_cu_pdl() holds may be scheduled before the kernel ahead of it in the stream has finished,
// which hides a launch's latency behind the previous kernel's tail. Every kernel therefore opens
// with hm_pdl_start: it waits until the previous grid has completed and its writes are visible
// (a no-op for a kernel launched without the attribute), then lets the next grid be scheduled.
__device__ __forceinline__ void hm_pdl_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// [p, p + bytes) into L2 by the block's threads, a 128-byte line each: what a kernel reads that
// the kernel before it does not write (weights, the cache's older positions), asked for before
// hm_pdl_start so that the reads overlap the previous kernel's end
__device__ __forceinline__ void hm_prefetch_l2(const void *p, size_t bytes) {
    const char *e = (const char *)p + bytes;
    for (const char *q = (const char *)((uintptr_t)p & ~(uintptr_t)127) + 128 * threadIdx.x; q < e;
         q += 128 * (size_t)blockDim.x)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(q));
}

// on a device of compute capability 9.0 or later, unless HMOE_CUDA_PDL=0 (read once), where
// this thread's hm_cu_pdl_allow last allowed it (ops.cu)
bool hm_cu_pdl();

// kernel<<<g, b, sm, s>>>(a...), with the programmatic-serialization attribute when
// hm_cu_pdl(); the launch's error is left for cudaGetLastError
template <typename... P, typename... A>
static inline void hm_launch(void (*k)(P...), dim3 g, dim3 b, size_t sm, cudaStream_t s, A &&...a) {
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = g, cfg.blockDim = b, cfg.dynamicSmemBytes = sm, cfg.stream = s;
    cfg.attrs = at, cfg.numAttrs = hm_cu_pdl() ? 1 : 0;
    (void)cudaLaunchKernelEx(&cfg, k, std::forward<A>(a)...);
}

// max that keeps a NaN (fmaxf would drop it): a NaN score must reach the output
__device__ __forceinline__ float hm_max_nan(float a, float b) {
    return (a != a || b != b) ? NAN : (a > b ? a : b);
}

struct hm_op_sum {
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct hm_op_max {
    __device__ __forceinline__ float operator()(float a, float b) const { return hm_max_nan(a, b); }
};

// op over the 32 lanes of a warp; every lane gets the result
template <typename T, typename Op> __device__ __forceinline__ T hm_warp_reduce(T v, Op op) {
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// op over a block (blockDim.x a multiple of 32, <= 1024; id the op's identity); every thread
// gets the result. `sh` holds 32 values; the block must reach the call together.
template <typename T, typename Op>
__device__ __forceinline__ T hm_block_reduce(T v, T id, Op op, T *sh) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = hm_warp_reduce(v, op);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    return hm_warp_reduce(lane < nw ? sh[lane] : id, op);
}

__device__ __forceinline__ float hm_warp_sum(float v) {
    return hm_warp_reduce(v, hm_op_sum());
}
__device__ __forceinline__ double hm_warp_sum_d(double v) {
    return hm_warp_reduce(v, hm_op_sum());
}
__device__ __forceinline__ double hm_block_sum_d(double v, double *sh) {
    return hm_block_reduce(v, 0.0, hm_op_sum(), sh);
}
__device__ __forceinline__ float hm_block_sum(float v, float *sh) {
    return hm_block_reduce(v, 0.0f, hm_op_sum(), sh);
}
__device__ __forceinline__ float hm_block_max(float v, float *sh) {
    return hm_block_reduce(v, -INFINITY, hm_op_max(), sh);
}

// the KV cache (kernels.h hm_cu_kv): element e of a cache head starting at element `off`
template <bool F16> __device__ __forceinline__ float kv_get(const void *c, size_t off) {
    if (F16) return __half2float(((const __half *)c)[off]);
    return ((const float *)c)[off];
}
// four consecutive values of a cache row (off a multiple of 4) as IEEE half bits, each rounded
// to nearest as __float2half_rn rounds one (an f16 cache's are already half: copied)
template <bool F16> __device__ __forceinline__ uint2 kv_get4h(const void *c, size_t off) {
    if (F16) return *(const uint2 *)((const __half *)c + off);
    const float4 f = *(const float4 *)((const float *)c + off);
    const __half2 a = __floats2half2_rn(f.x, f.y), b = __floats2half2_rn(f.z, f.w);
    return make_uint2(*(const uint32_t *)&a, *(const uint32_t *)&b);
}
template <bool F16> __device__ __forceinline__ void kv_put(void *c, size_t off, float v) {
    if (F16)
        ((__half *)c)[off] = __float2half_rn(v);
    else
        ((float *)c)[off] = v;
}

// offset (elements) of position 0 of (layer il, sequence s, kv head h)
__device__ __forceinline__ size_t kv_head(const hm_cu_kv &kv, int il, int s, int h) {
    return (((size_t)il * (size_t)kv.n_seq + (size_t)s) * (size_t)kv.n_kv_heads + (size_t)h) *
           (size_t)kv.kv_ctx * (size_t)kv.head_dim;
}

// true in the last of `total` blocks to call it with the same counter (device memory, 0 before
// the first), which is reset for the next launch; that block's threads then see what every
// block wrote before its call. Every thread of each block calls it, after hm_pdl_start (a
// kernel launched early must not count before its predecessor, which may use the same
// counter, is done).
__device__ __forceinline__ bool hm_last_block(unsigned *counter, unsigned total) {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(counter, 1u) == total - 1;
        if (last) atomicExch(counter, 0u);
    }
    __syncthreads();
    if (last) __threadfence();
    return last;
}

#endif
