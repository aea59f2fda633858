/* cuda.c - the C-facing GPU backend entry: device queries, bandwidth, self-test. */
#include "cuda/cuda.h"

#ifdef HM_CUDA_HOST
#include "cuda/host/rt.h" /* the host GPU: the CPU plays the GPU (tests) */
#else
#include <cuda_runtime.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kernels.h"

#define CK(call, what)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            st = hm_errorf(HM_ERR_DEVICE, "cuda: %s: %s (%s)", what, cudaGetErrorString(e_),       \
                           cudaGetErrorName(e_));                                                  \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

bool hm_cuda_compiled(void) {
    return true;
}

hm_status hm_cuda_device_count(int *n) {
    *n = 0;
    cudaError_t e = cudaGetDeviceCount(n);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
        cudaGetLastError(); /* clear */
        *n = 0;
        return HM_OK;
    }
    if (e != cudaSuccess) {
        *n = 0;
        cudaGetLastError();
        return hm_errorf(HM_ERR_DEVICE, "cuda: cannot count devices: %s (%s)",
                         cudaGetErrorString(e), cudaGetErrorName(e));
    }
    return HM_OK;
}

hm_status hm_cuda_versions(int *driver, int *runtime) {
    *driver = *runtime = 0;
    cudaDriverGetVersion(driver);
    cudaError_t e = cudaRuntimeGetVersion(runtime);
    if (e != cudaSuccess)
        return hm_errorf(HM_ERR_DEVICE, "cuda: runtime version: %s", cudaGetErrorString(e));
    return HM_OK;
}

static hm_status check_dev(int dev) {
    int n = 0;
    hm_status st = hm_cuda_device_count(&n);
    if (st != HM_OK) return st;
    if (dev < 0 || dev >= n)
        return hm_errorf(HM_ERR_NOT_FOUND, "cuda: device %d does not exist (%d present)", dev, n);
    return HM_OK;
}

hm_status hm_cuda_device_info(int dev, hm_gpu_info *out) {
    memset(out, 0, sizeof *out);
    hm_status st = check_dev(dev);
    if (st != HM_OK) return st;
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    out->index = dev;
    snprintf(out->name, sizeof out->name, "%s", prop.name);
    out->mem_total = prop.totalGlobalMem;
    out->cc_major = prop.major;
    out->cc_minor = prop.minor;
    out->sm_count = prop.multiProcessorCount;
    out->mem_bus_width_bits = prop.memoryBusWidth;
    out->pci_bus = prop.pciBusID;
    out->pci_device = prop.pciDeviceID;
    CK(cudaSetDevice(dev), "cudaSetDevice");
    size_t free_b = 0, total_b = 0;
    CK(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    out->mem_free = free_b;
    st = HM_OK;
done:
    return st;
}

/* best of reps copies of `bytes` from a pinned host buffer (d2d false) or a device buffer to a
 * device buffer, in 1e9 bytes/s of the bytes copied */
static hm_status copy_bandwidth(int dev, size_t bytes, int reps, bool d2d, double *gbs) {
    *gbs = 0;
    hm_status st = check_dev(dev);
    if (st != HM_OK) return st;
    if (bytes == 0 || reps <= 0)
        return hm_errorf(HM_ERR_INVALID_ARG, "cuda: bandwidth test needs bytes > 0 and reps > 0");
    void *src = NULL, *dst = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaStream_t s = NULL;
    const enum cudaMemcpyKind kind = d2d ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
    CK(cudaSetDevice(dev), "cudaSetDevice");
    if (d2d) {
        CK(cudaMalloc(&src, bytes), "cudaMalloc");
        CK(cudaMemset(src, 1, bytes), "cudaMemset");
    } else {
        CK(cudaMallocHost(&src, bytes), "cudaMallocHost (pinned host buffer)");
        memset(src, 1, bytes);
    }
    CK(cudaMalloc(&dst, bytes), "cudaMalloc");
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    CK(cudaEventCreate(&e0), "cudaEventCreate");
    CK(cudaEventCreate(&e1), "cudaEventCreate");
    CK(cudaMemcpyAsync(dst, src, bytes, kind, s), "warm-up copy");
    float best_ms = 0;
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(e0, s), "cudaEventRecord");
        CK(cudaMemcpyAsync(dst, src, bytes, kind, s), "cudaMemcpyAsync");
        CK(cudaEventRecord(e1, s), "cudaEventRecord");
        CK(cudaEventSynchronize(e1), "cudaEventSynchronize");
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
        if (r == 0 || ms < best_ms) best_ms = ms;
    }
    *gbs = (double)bytes / ((double)best_ms * 1e-3) * 1e-9;
    st = HM_OK;
done:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (s) cudaStreamDestroy(s);
    if (dst) cudaFree(dst);
    if (src) d2d ? cudaFree(src) : cudaFreeHost(src);
    return st;
}

hm_status hm_cuda_h2d_bandwidth(int dev, size_t bytes, int reps, double *gbs) {
    return copy_bandwidth(dev, bytes, reps, false, gbs);
}

hm_status hm_cuda_mem_bandwidth(int dev, size_t bytes, int reps, double *gbs) {
    const hm_status st = copy_bandwidth(dev, bytes, reps, true, gbs);
    *gbs *= 2.0; /* each byte copied is read once and written once */
    return st;
}

hm_status hm_cuda_selftest(int dev) {
    hm_status st = check_dev(dev);
    if (st != HM_OK) return st;
    enum { N = 100003 }; /* not a multiple of the block size */
    float *hx = malloc(sizeof(float) * N), *hy = malloc(sizeof(float) * N);
    float *dx = NULL, *dy = NULL;
    if (!hx || !hy) {
        st = hm_errorf(HM_ERR_NO_MEMORY, "cuda self-test: out of memory");
        goto done;
    }
    for (int i = 0; i < N; i++) hx[i] = (float)(i % 1000) * 0.25f - 100.0f;
    CK(cudaSetDevice(dev), "cudaSetDevice");
    CK(cudaMalloc((void **)&dx, sizeof(float) * N), "cudaMalloc");
    CK(cudaMalloc((void **)&dy, sizeof(float) * N), "cudaMalloc");
    CK(cudaMemcpy(dx, hx, sizeof(float) * N, cudaMemcpyHostToDevice), "copy to device");
    CK(hm_cuda_launch_axpb(dx, dy, 1.5f, -2.0f, N, 0), "launch axpb (no kernel image for this "
                                                       "GPU's architecture?)");
    CK(cudaDeviceSynchronize(), "kernel execution");
    CK(cudaMemcpy(hy, dy, sizeof(float) * N, cudaMemcpyDeviceToHost), "copy to host");
    for (int i = 0; i < N; i++) {
        float ref = fmaf(1.5f, hx[i], -2.0f);
        if (hy[i] != ref) {
            st = hm_errorf(HM_ERR_DEVICE, "cuda self-test: y[%d] = %g, expected %g", i, hy[i], ref);
            goto done;
        }
    }
    st = HM_OK;
done:
    if (dx) cudaFree(dx);
    if (dy) cudaFree(dy);
    free(hx);
    free(hy);
    return st;
}

hm_status hm_measure_gpu_bandwidth(int gpu, double *gbs) {
    return hm_cuda_mem_bandwidth(gpu, (size_t)1 << 30, 5, gbs);
}
