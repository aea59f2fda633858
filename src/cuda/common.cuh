// common.cuh - reductions and launch helpers shared by the .cu files.
#ifndef HM_CUDA_COMMON_CUH
#define HM_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <math.h>

#include "quant/types.h"

// the quantized types of the tensor-core tiles (mmq.cu); the float ones, FP8_B128 among them as
// on the CPU, stay on the exact FP32 path: half would round an FP8 value times its block scale
#define HM_MMQ_TYPES(X)                                                                            \
    X(HM_TYPE_Q4_0)                                                                                \
    X(HM_TYPE_Q4_1)                                                                                \
    X(HM_TYPE_Q5_0)                                                                                \
    X(HM_TYPE_Q5_1)                                                                                \
    X(HM_TYPE_Q8_0)                                                                                \
    X(HM_TYPE_Q2_K)                                                                                \
    X(HM_TYPE_Q3_K)                                                                                \
    X(HM_TYPE_Q4_K)                                                                                \
    X(HM_TYPE_Q5_K)                                                                                \
    X(HM_TYPE_Q6_K)                                                                                \
    X(HM_TYPE_IQ4_NL)                                                                              \
    X(HM_TYPE_IQ4_XS)                                                                              \
    X(HM_TYPE_MXFP4)

// every type the matvec, dequantize and embedding kernels take (matvec.cu)
#define HM_CU_TYPES(X)                                                                             \
    X(HM_TYPE_F32)                                                                                 \
    X(HM_TYPE_F16)                                                                                 \
    X(HM_TYPE_BF16)                                                                                \
    X(HM_TYPE_FP8_B128)                                                                            \
    HM_MMQ_TYPES(X)

__device__ __forceinline__ float hm_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double hm_warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// max that keeps a NaN (fmaxf would drop it): a NaN score must reach the output
__device__ __forceinline__ float hm_max_nan(float a, float b) {
    return (a != a || b != b) ? NAN : (a > b ? a : b);
}

__device__ __forceinline__ float hm_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = hm_max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide sum / max for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
// `sh` holds 32 values; the block must reach the call together.
__device__ __forceinline__ double hm_block_sum_d(double v, double *sh) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = hm_warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    return hm_warp_sum_d(v);
}

__device__ __forceinline__ float hm_block_sum(float v, float *sh) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = hm_warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return hm_warp_sum(v);
}

__device__ __forceinline__ float hm_block_max(float v, float *sh) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = hm_warp_max(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return hm_warp_max(v);
}

#endif
