/* rt.h - the host GPU: the part of the CUDA runtime and cuBLAS that hmoe's CUDA backend uses,
 * played by the CPU, so that the backend's executor (cuda.c, backend.c: placement, the host
 * hand-off to the expert engine, deferral, dynamic swaps, layerwise streaming, graph capture and
 * replay) and test_cuda run in CI on machines without a GPU.
 *
 * "Device" memory is host memory from a budget (HMOE_HOSTGPU_MEM bytes, default 2 GiB), so a
 * model that does not fit is refused as on a real card. Every stream is a FIFO of work run in
 * order by its own thread, as a GPU runs a stream: kernels (the launchers of kernels.h, written
 * in plain C in host/kernels_*.c over the same twins as the CPU backend), copies, memsets, host
 * functions, event records and waits. A copy from pinned memory (cudaMallocHost) reads its
 * source when the stream reaches it, as a DMA does, so a buffer reused too early shows as wrong
 * numbers here too; a copy from pageable memory is staged when it is enqueued, as CUDA stages
 * it. A stream being captured records its work into a graph instead of running it; launching the
 * graph enqueues the recorded work again. Synchronous calls on a capturing stream fail as they
 * do in CUDA.
 *
 * The declarations keep CUDA's names and signatures (only what hmoe uses); the numbers are this
 * file's own. Compiled with HM_CUDA_HOST, cuda.c, backend.c and kernels.h include this header in
 * place of <cuda_runtime.h> and <cublas_v2.h>. */
#ifndef HM_CUDA_HOST_RT_H
#define HM_CUDA_HOST_RT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorLaunchFailure = 719,
} cudaError_t;

typedef struct hm_hstream *cudaStream_t;
typedef struct hm_hevent *cudaEvent_t;
typedef struct hm_hgraph *cudaGraph_t;
typedef struct hm_hgraph_exec *cudaGraphExec_t;
#define CUDART_CB
typedef void (*cudaHostFn_t)(void *user);

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
};

#define cudaStreamDefault      0x0
#define cudaStreamNonBlocking  0x1
#define cudaEventDefault       0x0
#define cudaEventBlockingSync  0x1
#define cudaEventDisableTiming 0x2

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor;
    int multiProcessorCount;
    int memoryBusWidth;
    int pciBusID, pciDeviceID;
    int l2CacheSize; /* bytes */
};

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaRuntimeGetVersion(int *v);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
#define cudaHostRegisterDefault  0x0
#define cudaHostRegisterReadOnly 0x8
cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned flags);
cudaError_t cudaHostUnregister(void *p);

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t s);
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t height, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t s);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s);
cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int value, size_t width, size_t height,
                              cudaStream_t s);

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *user);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);

cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *ex, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t ex, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t ex);
cudaError_t cudaGraphDestroy(cudaGraph_t g);

/* A kernel: fn(args) run when the stream reaches it; the size bytes at args are copied at
 * launch (as a kernel's parameters are), so args may point at the caller's stack. */
cudaError_t hm_host_launch(cudaStream_t s, void (*fn)(const void *args), const void *args,
                           size_t size);

/* cuBLAS: single-precision and BF16-input GEMMs in column-major order, on the handle's stream */
typedef enum cublasStatus {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_INVALID_VALUE = 7
} cublasStatus_t;
typedef enum cublasOperation { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum cublasMath { CUBLAS_DEFAULT_MATH = 0 } cublasMath_t;
typedef enum cudaDataType { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;
typedef enum cublasComputeType { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum cublasGemmAlgo { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef struct hm_hblas *cublasHandle_t;

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode);
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *a, int lda,
                           const float *b, int ldb, const float *beta, float *c, int ldc);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *a, cudaDataType at,
                            int lda, const void *b, cudaDataType bt, int ldb, const void *beta,
                            void *c, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo);

#ifdef __cplusplus
}
#endif
#endif
