/* hd.h - how the twin headers (dq.h, twins.h) declare a function both the CUDA kernels and the
 * CPU call: __host__ __device__ under nvcc, static inline C11 otherwise. */
#ifndef HM_CUDA_HD_H
#define HM_CUDA_HD_H

#ifdef __CUDACC__
#define HM_HD __host__ __device__ __forceinline__
#else
#define HM_HD static inline
#endif
/* the host compiler (gcc) would warn about #pragma unroll: device passes only */
#ifdef __CUDA_ARCH__
#define HM_HD_UNROLL _Pragma("unroll")
#else
#define HM_HD_UNROLL
#endif

/* the most experts the GPU's routers take (twins.h, kernels.h) */
#define HM_HD_ROUTER_MAX 512

#endif
