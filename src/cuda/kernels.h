/* kernels.h - launchers of the *.cu kernels, callable from C (cuda.c). */
#ifndef HM_CUDA_KERNELS_H
#define HM_CUDA_KERNELS_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y[i] = a * x[i] + b for i < n, on stream. */
cudaError_t hm_cuda_launch_axpb(const float *x, float *y, float a, float b, int n,
                                cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
