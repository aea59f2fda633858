/* test_hostgpu.c - the host GPU's runtime (src/cuda/host/rt.h) keeps the CUDA semantics the
 * executor's correctness rests on, so that test_cuda over it can fail where a GPU would: a stream
 * runs its work in order and apart from the caller; a copy from pinned (or registered) memory
 * reads its source when the stream reaches it, one from pageable memory when it is enqueued; an
 * event orders two streams; synchronous calls on a capturing stream fail; a graph replays what
 * was captured, kernels with the arguments they had at capture; device memory is a budget. */
#include <pthread.h>
#include <string.h>

#include "cuda/host/rt.h"
#include "test.h"

/* a host function that holds its stream until released */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open;

static void gate_fn(void *user) {
    (void)user;
    pthread_mutex_lock(&gate_mu);
    while (!gate_open) pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
}

static void gate(int open) {
    pthread_mutex_lock(&gate_mu);
    gate_open = open;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

typedef struct add_args {
    int *p;
    int v;
} add_args;

static void add_k(const void *a) {
    const add_args *g = a;
    *g->p += g->v;
}

int main(void) {
    cudaStream_t s, s2;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    CHECK(cudaStreamCreate(&s2) == cudaSuccess);
    int *dev = NULL, *pin = NULL, page[4] = {1, 2, 3, 4}, out[4] = {0};
    CHECK(cudaMalloc((void **)&dev, sizeof(int) * 4) == cudaSuccess);
    CHECK(cudaMallocHost((void **)&pin, sizeof(int) * 4) == cudaSuccess);

    /* pinned: read when the stream reaches the copy; pageable: staged at the call */
    for (int i = 0; i < 4; i++) pin[i] = 10 + i;
    gate(0);
    CHECK(cudaLaunchHostFunc(s, gate_fn, NULL) == cudaSuccess);
    CHECK(cudaMemcpyAsync(dev, pin, sizeof(int) * 2, cudaMemcpyHostToDevice, s) == cudaSuccess);
    CHECK(cudaMemcpyAsync(dev + 2, page + 2, sizeof(int) * 2, cudaMemcpyHostToDevice, s) ==
          cudaSuccess);
    pin[0] = 99, page[2] = 77; /* after the calls, before the stream runs them */
    gate(1);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(cudaMemcpy(out, dev, sizeof out, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(out[0] == 99 && out[1] == 11); /* the pinned source as the copy ran */
    CHECK(out[2] == 3 && out[3] == 4);   /* the pageable source as it was at the call */

    /* registered memory is pinned memory: overlapping registrations are refused */
    static int reg[1024];
    CHECK(cudaHostRegister(reg, sizeof reg, cudaHostRegisterReadOnly) == cudaSuccess);
    CHECK(cudaHostRegister(reg + 8, 64, cudaHostRegisterDefault) == cudaErrorInvalidValue);
    cudaGetLastError();
    gate(0);
    reg[0] = 5;
    CHECK(cudaLaunchHostFunc(s, gate_fn, NULL) == cudaSuccess);
    CHECK(cudaMemcpyAsync(dev, reg, sizeof(int), cudaMemcpyHostToDevice, s) == cudaSuccess);
    reg[0] = 6;
    gate(1);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess); /* s does not block the legacy stream */
    CHECK(cudaMemcpy(out, dev, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(out[0] == 6);
    CHECK(cudaHostUnregister(reg) == cudaSuccess);

    /* the copy kind must match where the pointers live */
    CHECK(cudaMemcpy(page, out, sizeof(int), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    CHECK(cudaGetLastError() == cudaSuccess);

    /* an event orders s2 after s */
    cudaEvent_t ev;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess);
    int *cnt = NULL;
    CHECK(cudaMalloc((void **)&cnt, sizeof(int)) == cudaSuccess);
    CHECK(cudaMemset(cnt, 0, sizeof(int)) == cudaSuccess);
    gate(0);
    CHECK(cudaLaunchHostFunc(s, gate_fn, NULL) == cudaSuccess);
    const add_args a1 = {cnt, 1}, a2 = {cnt, 10};
    CHECK(hm_host_launch(s, add_k, &a1, sizeof a1) == cudaSuccess);
    CHECK(cudaEventRecord(ev, s) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(s2, ev, 0) == cudaSuccess);
    CHECK(hm_host_launch(s2, add_k, &a2, sizeof a2) == cudaSuccess);
    CHECK(cudaEventQuery(ev) == cudaErrorNotReady);
    gate(1);
    CHECK(cudaStreamSynchronize(s2) == cudaSuccess);
    CHECK(cudaEventQuery(ev) == cudaSuccess);
    CHECK(cudaMemcpy(out, cnt, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(out[0] == 11);

    /* capture: nothing runs; synchronous calls fail and spoil it */
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    add_args a3 = {cnt, 100};
    CHECK(hm_host_launch(s, add_k, &a3, sizeof a3) == cudaSuccess);
    a3.v = 1000; /* the captured kernel keeps the arguments it had */
    CHECK(cudaMemcpy(out, cnt, sizeof(int), cudaMemcpyDeviceToHost) ==
          cudaErrorStreamCaptureUnsupported);
    cudaGraph_t g = NULL;
    CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated && !g);
    cudaGetLastError();
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    a3.v = 100;
    CHECK(hm_host_launch(s, add_k, &a3, sizeof a3) == cudaSuccess);
    a3.v = 1000;
    CHECK(cudaMemcpyAsync(dev, page, sizeof(int), cudaMemcpyHostToDevice, s) ==
          cudaErrorStreamCaptureUnsupported); /* a pageable source cannot be captured */
    cudaGetLastError();
    CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    a3.v = 100;
    CHECK(hm_host_launch(s, add_k, &a3, sizeof a3) == cudaSuccess);
    a3.v = 1000;
    CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess && g);
    CHECK(cudaMemcpy(out, cnt, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(out[0] == 11); /* captured, not run */
    cudaGraphExec_t ex = NULL;
    CHECK(cudaGraphInstantiate(&ex, g, 0) == cudaSuccess);
    CHECK(cudaGraphDestroy(g) == cudaSuccess); /* the instance keeps its own copy */
    for (int r = 0; r < 3; r++) CHECK(cudaGraphLaunch(ex, s) == cudaSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(cudaMemcpy(out, cnt, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(out[0] == 311);
    CHECK(cudaGraphExecDestroy(ex) == cudaSuccess);

    /* the budget: a request past it fails, and the memory info says what is left */
    size_t fr = 0, tot = 0;
    CHECK(cudaMemGetInfo(&fr, &tot) == cudaSuccess && fr < tot);
    void *big = NULL;
    CHECK(cudaMalloc(&big, tot + 1) == cudaErrorMemoryAllocation && !big);
    cudaGetLastError();

    CHECK(cudaFree(cnt) == cudaSuccess);
    CHECK(cudaFree(dev) == cudaSuccess);
    CHECK(cudaFree(dev) == cudaErrorInvalidValue); /* not twice */
    cudaGetLastError();
    CHECK(cudaFreeHost(pin) == cudaSuccess);
    CHECK(cudaEventDestroy(ev) == cudaSuccess);
    CHECK(cudaStreamDestroy(s) == cudaSuccess);
    CHECK(cudaStreamDestroy(s2) == cudaSuccess);
    return test_done("hostgpu");
}
