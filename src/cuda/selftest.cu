// selftest.cu - the smallest kernel that proves the GPU, the driver and our fatbin agree.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

__global__ static void axpb_kernel(const float *__restrict__ x, float *__restrict__ y, float a,
                                   float b, int n) {
    hm_pdl_start();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaf(a, x[i], b);
}

extern "C" cudaError_t hm_cuda_launch_axpb(const float *x, float *y, float a, float b, int n,
                                           cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    int threads = 256;
    int blocks = (n + threads - 1) / threads;
    hm_launch(axpb_kernel, blocks, threads, 0, stream, x, y, a, b, n);
    return cudaGetLastError();
}
