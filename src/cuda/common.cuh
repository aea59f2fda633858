// common.cuh - reductions and launch helpers shared by the .cu files.
#ifndef HM_CUDA_COMMON_CUH
#define HM_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <math.h>

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
