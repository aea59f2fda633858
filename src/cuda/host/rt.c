/* rt.c - the host GPU's runtime (rt.h): memory from a budget, streams as worker threads, events,
 * host functions, stream capture into graphs and their replay, and the two cuBLAS GEMMs the
 * backend uses. Each stream's thread runs its tasks in order; a task is a kernel (a C function
 * and its copied arguments), a copy, a memset, a host function, an event record or an event
 * wait. */

#include "cuda/host/rt.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant/fp16.h"

enum { T_KERNEL, T_COPY, T_SET, T_HOST, T_RECORD, T_WAIT };

typedef struct task {
    int kind;
    void (*fn)(const void *);
    void *args; /* kernel arguments (owned unless borrowed) */
    size_t args_size;
    cudaHostFn_t hfn;
    void *user;
    /* copies and memsets: height rows of width bytes, pitches apart */
    void *dst;
    const void *src;
    void *staged; /* a pageable source copied at enqueue (owned unless borrowed) */
    size_t dpitch, spitch, width, height;
    int value;
    cudaEvent_t ev;
    uint64_t gen;  /* T_RECORD: the record's number; T_WAIT: the record waited for */
    bool borrowed; /* a graph's task: its buffers belong to the graph */
    struct task *next;
} task;

struct hm_hstream {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    task *head, *tail;
    uint64_t queued, done; /* tasks enqueued and finished */
    bool quit;
    /* capture */
    bool capturing, invalid;
    pthread_t capture_thread;
    task *cap_head, *cap_tail;
    struct hm_hstream *next_stream;
};

struct hm_hevent {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t recorded, done; /* records issued, the last one finished */
    double t;                /* when the last record finished (seconds) */
    bool timing;
    cudaStream_t capture; /* recorded on this capturing stream */
};

struct hm_hgraph {
    task *head;
};

struct hm_hgraph_exec {
    task *head;
};

struct hm_hblas {
    cudaStream_t s;
};

/* ---- registry: device and pinned allocations, streams, the last error ------------------------ */

typedef struct region {
    uint8_t *p;
    size_t n;
} region;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static region *g_dev, *g_pin, *g_reg;
static size_t g_ndev, g_npin, g_nreg, g_cap_dev, g_cap_pin, g_cap_reg;
static size_t g_used, g_budget;
static struct hm_hstream *g_streams;
static struct hm_hstream *g_default;
static _Thread_local cudaError_t t_last = cudaSuccess;

static cudaError_t fail(cudaError_t e) {
    if (e != cudaSuccess) t_last = e;
    return e;
}

static size_t budget(void) {
    if (g_budget) return g_budget;
    g_budget = (size_t)2 << 30;
    const char *s = getenv("HMOE_HOSTGPU_MEM");
    if (s && *s) {
        char *end = NULL;
        const double v = strtod(s, &end);
        double mul = 1;
        if (end && (*end == 'k' || *end == 'K')) mul = 1024.0;
        if (end && (*end == 'm' || *end == 'M')) mul = 1024.0 * 1024;
        if (end && (*end == 'g' || *end == 'G')) mul = 1024.0 * 1024 * 1024;
        if (v > 0) g_budget = (size_t)(v * mul);
    }
    return g_budget;
}

static bool reg_add(region **r, size_t *n, size_t *cap, void *p, size_t bytes) {
    if (*n == *cap) {
        const size_t nc = *cap ? *cap * 2 : 64;
        region *nr = realloc(*r, nc * sizeof *nr);
        if (!nr) return false;
        *r = nr, *cap = nc;
    }
    (*r)[(*n)++] = (region){p, bytes};
    return true;
}

/* the region holding p (under g_mu), or -1 */
static long reg_find(const region *r, size_t n, const void *p) {
    const uint8_t *q = p;
    for (size_t i = 0; i < n; i++)
        if (q >= r[i].p && q < r[i].p + (r[i].n ? r[i].n : 1)) return (long)i;
    return -1;
}

static bool is_in(region *r, size_t n, const void *p) {
    pthread_mutex_lock(&g_mu);
    const bool in = reg_find(r, n, p) >= 0;
    pthread_mutex_unlock(&g_mu);
    return in;
}

static bool is_dev(const void *p) {
    return is_in(g_dev, g_ndev, p);
}

static bool is_pinned(const void *p) {
    return is_in(g_pin, g_npin, p) || is_in(g_reg, g_nreg, p);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- devices --------------------------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
    *v = 12080;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = 12080;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev) {
    if (dev != 0) return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "hmoe host GPU (the CPU playing a GPU)");
    p->totalGlobalMem = budget();
    p->major = 9, p->minor = 0;
    p->multiProcessorCount = 1;
    p->memoryBusWidth = 64;
    p->l2CacheSize = 1 << 20;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev) {
    return dev == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
    pthread_mutex_lock(&g_mu);
    const size_t b = budget();
    *total_b = b;
    *free_b = g_used < b ? b - g_used : 0;
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    const cudaError_t e = t_last;
    t_last = cudaSuccess;
    return e;
}

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess:
        return "cudaSuccess";
    case cudaErrorInvalidValue:
        return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
        return "cudaErrorMemoryAllocation";
    case cudaErrorInsufficientDriver:
        return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice:
        return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
        return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
        return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
        return "cudaErrorNotReady";
    case cudaErrorStreamCaptureUnsupported:
        return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
        return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorLaunchFailure:
        return "cudaErrorLaunchFailure";
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInsufficientDriver:
        return "driver too old";
    case cudaErrorNoDevice:
        return "no CUDA-capable device";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
        return "invalid resource handle";
    case cudaErrorNotReady:
        return "device not ready";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    case cudaErrorLaunchFailure:
        return "unspecified launch failure";
    }
    return "unknown error";
}

/* ---- memory ---------------------------------------------------------------------------------- */

cudaError_t cudaMalloc(void **p, size_t bytes) {
    *p = NULL;
    const size_t n = (bytes + 255) & ~(size_t)255;
    pthread_mutex_lock(&g_mu);
    const bool room = g_used + n <= budget() && n >= bytes;
    pthread_mutex_unlock(&g_mu);
    if (!room) return fail(cudaErrorMemoryAllocation);
    void *q = aligned_alloc(256, n ? n : 256);
    if (!q) return fail(cudaErrorMemoryAllocation);
    memset(q, 0xff, n); /* NaNs: what is read before it is written shows in the results */
    pthread_mutex_lock(&g_mu);
    const bool ok = reg_add(&g_dev, &g_ndev, &g_cap_dev, q, n);
    if (ok) g_used += n;
    pthread_mutex_unlock(&g_mu);
    if (!ok) {
        free(q);
        return fail(cudaErrorMemoryAllocation);
    }
    *p = q;
    return cudaSuccess;
}

static cudaError_t reg_free(region *r, size_t *n, void *p, bool dev) {
    if (!p) return cudaSuccess;
    pthread_mutex_lock(&g_mu);
    const long i = reg_find(r, *n, p);
    const bool ok = i >= 0 && r[i].p == p;
    if (ok) {
        if (dev) g_used -= r[i].n;
        r[i] = r[--*n];
    }
    pthread_mutex_unlock(&g_mu);
    if (!ok) return fail(cudaErrorInvalidValue);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    cudaDeviceSynchronize(); /* as cudaFree does */
    return reg_free(g_dev, &g_ndev, p, true);
}

cudaError_t cudaMallocHost(void **p, size_t bytes) {
    *p = NULL;
    const size_t n = (bytes + 63) & ~(size_t)63;
    void *q = aligned_alloc(64, n ? n : 64);
    if (!q) return fail(cudaErrorMemoryAllocation);
    memset(q, 0xff, n);
    pthread_mutex_lock(&g_mu);
    const bool ok = reg_add(&g_pin, &g_npin, &g_cap_pin, q, bytes);
    pthread_mutex_unlock(&g_mu);
    if (!ok) {
        free(q);
        return fail(cudaErrorMemoryAllocation);
    }
    *p = q;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p) {
    cudaDeviceSynchronize();
    return reg_free(g_pin, &g_npin, p, false);
}

/* Registered host memory is pinned memory the caller owns: copies from it run when the stream
 * reaches them. Overlapping an earlier registration is refused, as CUDA refuses it. */
cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned flags) {
    if (!p || !bytes || (flags & ~(unsigned)cudaHostRegisterReadOnly))
        return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&g_mu);
    bool overlap = false;
    for (size_t i = 0; i < g_nreg; i++)
        overlap |= (uint8_t *)p < g_reg[i].p + g_reg[i].n && g_reg[i].p < (uint8_t *)p + bytes;
    const bool ok = !overlap && reg_add(&g_reg, &g_nreg, &g_cap_reg, p, bytes);
    pthread_mutex_unlock(&g_mu);
    return ok ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaHostUnregister(void *p) {
    cudaDeviceSynchronize(); /* copies in flight still read it */
    pthread_mutex_lock(&g_mu);
    const long i = reg_find(g_reg, g_nreg, p);
    const bool ok = i >= 0 && g_reg[i].p == p;
    if (ok) g_reg[i] = g_reg[--g_nreg];
    pthread_mutex_unlock(&g_mu);
    return ok ? cudaSuccess : fail(cudaErrorInvalidValue);
}

/* ---- streams --------------------------------------------------------------------------------- */

static void run_task(task *t) {
    switch (t->kind) {
    case T_KERNEL:
        t->fn(t->args);
        break;
    case T_COPY: {
        const uint8_t *src = t->staged ? t->staged : t->src;
        const size_t sp = t->staged ? t->width : t->spitch;
        for (size_t r = 0; r < t->height; r++)
            memmove((uint8_t *)t->dst + r * t->dpitch, src + r * sp, t->width);
        break;
    }
    case T_SET:
        for (size_t r = 0; r < t->height; r++)
            memset((uint8_t *)t->dst + r * t->dpitch, t->value, t->width);
        break;
    case T_HOST:
        t->hfn(t->user);
        break;
    case T_RECORD: {
        cudaEvent_t e = t->ev;
        pthread_mutex_lock(&e->mu);
        if (t->gen > e->done) e->done = t->gen;
        e->t = now_s();
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        break;
    }
    case T_WAIT: {
        cudaEvent_t e = t->ev;
        pthread_mutex_lock(&e->mu);
        while (e->done < t->gen) pthread_cond_wait(&e->cv, &e->mu);
        pthread_mutex_unlock(&e->mu);
        break;
    }
    }
}

static void task_free(task *t) {
    if (!t->borrowed) {
        free(t->args);
        free(t->staged);
    }
    free(t);
}

static void *stream_main(void *arg) {
    cudaStream_t s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->quit) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head) break;
        task *t = s->head;
        pthread_mutex_unlock(&s->mu);
        run_task(t);
        pthread_mutex_lock(&s->mu);
        s->head = t->next;
        if (!s->head) s->tail = NULL;
        task_free(t);
        s->done++;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static cudaError_t stream_new(cudaStream_t *out) {
    *out = NULL;
    cudaStream_t s = calloc(1, sizeof *s);
    if (!s) return fail(cudaErrorMemoryAllocation);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        free(s);
        return fail(cudaErrorMemoryAllocation);
    }
    pthread_mutex_lock(&g_mu);
    s->next_stream = g_streams;
    g_streams = s;
    pthread_mutex_unlock(&g_mu);
    *out = s;
    return cudaSuccess;
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void default_init(void) {
    stream_new(&g_default);
}

static cudaStream_t resolve(cudaStream_t s) {
    if (s) return s;
    pthread_once(&g_once, default_init);
    return g_default;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) {
    return stream_new(s);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    (void)flags;
    return stream_new(s);
}

/* every task enqueued on s so far has run */
static void drain(cudaStream_t s) {
    pthread_mutex_lock(&s->mu);
    const uint64_t target = s->queued;
    while (s->done < target) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* a synchronous call while the calling thread captures: refused, and the capture is spoiled */
static bool capturing_here(void) {
    bool any = false;
    pthread_mutex_lock(&g_mu);
    for (cudaStream_t s = g_streams; s; s = s->next_stream)
        if (s->capturing && pthread_equal(s->capture_thread, pthread_self())) {
            s->invalid = true;
            any = true;
        }
    pthread_mutex_unlock(&g_mu);
    return any;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    drain(s);
    pthread_mutex_lock(&g_mu);
    for (cudaStream_t *p = &g_streams; *p; p = &(*p)->next_stream)
        if (*p == s) {
            *p = s->next_stream;
            break;
        }
    pthread_mutex_unlock(&g_mu);
    pthread_mutex_lock(&s->mu);
    s->quit = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    for (task *t = s->cap_head, *n; t; t = n) n = t->next, task_free(t);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    s = resolve(s);
    if (s->capturing) {
        s->invalid = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    drain(s);
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s) {
    s = resolve(s);
    if (s->capturing) {
        s->invalid = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    pthread_mutex_lock(&s->mu);
    const bool done = s->done >= s->queued;
    pthread_mutex_unlock(&s->mu);
    return done ? cudaSuccess : cudaErrorNotReady; /* not ready is no error: not sticky */
}

cudaError_t cudaDeviceSynchronize(void) {
    if (capturing_here()) return fail(cudaErrorStreamCaptureUnsupported);
    resolve(NULL);
    /* each stream drained in turn; g_mu is held throughout so none is destroyed meanwhile (a
     * stream's thread never takes g_mu while a task runs: host functions may not call CUDA) */
    pthread_mutex_lock(&g_mu);
    for (cudaStream_t s = g_streams; s; s = s->next_stream) drain(s);
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}

/* t onto s: recorded into the graph while s captures, else queued for its thread */
static cudaError_t put(cudaStream_t s, task *t) {
    s = resolve(s);
    pthread_mutex_lock(&s->mu);
    t->next = NULL;
    if (s->capturing) {
        if (s->cap_tail)
            s->cap_tail->next = t;
        else
            s->cap_head = t;
        s->cap_tail = t;
    } else {
        if (s->tail)
            s->tail->next = t;
        else
            s->head = t;
        s->tail = t;
        s->queued++;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return cudaSuccess;
}

static task *task_new(int kind) {
    task *t = calloc(1, sizeof *t);
    if (t) t->kind = kind, t->height = 1;
    return t;
}

cudaError_t hm_host_launch(cudaStream_t s, void (*fn)(const void *args), const void *args,
                           size_t size) {
    task *t = task_new(T_KERNEL);
    if (!t) return fail(cudaErrorMemoryAllocation);
    t->fn = fn;
    t->args = malloc(size ? size : 1);
    if (!t->args) {
        free(t);
        return fail(cudaErrorMemoryAllocation);
    }
    if (size) memcpy(t->args, args, size);
    t->args_size = size;
    return put(s, t);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *user) {
    if (!fn) return fail(cudaErrorInvalidValue);
    task *t = task_new(T_HOST);
    if (!t) return fail(cudaErrorMemoryAllocation);
    t->hfn = fn, t->user = user;
    return put(s, t);
}

/* ---- copies ---------------------------------------------------------------------------------- */

/* A copy of height rows of width bytes. The kind is checked against where the pointers live. A
 * pageable source is staged now, as CUDA stages it (refused while capturing); a copy into
 * pageable memory returns once done, as in CUDA (refused while capturing). */
static cudaError_t copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                          size_t height, enum cudaMemcpyKind kind, cudaStream_t s, bool sync) {
    if (!width || !height) return cudaSuccess;
    if (!dst || !src || dpitch < width || spitch < width) return fail(cudaErrorInvalidValue);
    const bool ddev = is_dev(dst), sdev = is_dev(src);
    switch (kind) {
    case cudaMemcpyHostToDevice:
        if (!ddev || sdev) return fail(cudaErrorInvalidValue);
        break;
    case cudaMemcpyDeviceToHost:
        if (ddev || !sdev) return fail(cudaErrorInvalidValue);
        break;
    case cudaMemcpyDeviceToDevice:
        if (!ddev || !sdev) return fail(cudaErrorInvalidValue);
        break;
    case cudaMemcpyHostToHost:
        if (ddev || sdev) return fail(cudaErrorInvalidValue);
        break;
    case cudaMemcpyDefault:
        break;
    default:
        return fail(cudaErrorInvalidValue);
    }
    s = resolve(s);
    if (sync && capturing_here()) return fail(cudaErrorStreamCaptureUnsupported);
    const bool src_pageable = !sdev && !is_pinned(src);
    const bool dst_pageable = !ddev && !is_pinned(dst);
    if ((src_pageable || dst_pageable) && s->capturing) {
        s->invalid = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    task *t = task_new(T_COPY);
    if (!t) return fail(cudaErrorMemoryAllocation);
    t->dst = dst, t->src = src, t->dpitch = dpitch, t->spitch = spitch;
    t->width = width, t->height = height;
    if (src_pageable) {
        t->staged = malloc(width * height);
        if (!t->staged) {
            free(t);
            return fail(cudaErrorMemoryAllocation);
        }
        for (size_t r = 0; r < height; r++)
            memcpy((uint8_t *)t->staged + r * width, (const uint8_t *)src + r * spitch, width);
    }
    put(s, t);
    if (sync) return cudaDeviceSynchronize();
    if (dst_pageable) drain(s);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
    return copy2d(dst, bytes, src, bytes, bytes, 1, kind, NULL, true);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t s) {
    return copy2d(dst, bytes, src, bytes, bytes, 1, kind, s, false);
}

cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t height, enum cudaMemcpyKind kind) {
    return copy2d(dst, dpitch, src, spitch, width, height, kind, NULL, true);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t s) {
    return copy2d(dst, dpitch, src, spitch, width, height, kind, s, false);
}

static cudaError_t set2d(void *p, size_t pitch, int value, size_t width, size_t height,
                         cudaStream_t s, bool sync) {
    if (!width || !height) return cudaSuccess;
    if (!p || pitch < width || !is_dev(p)) return fail(cudaErrorInvalidValue);
    if (sync && capturing_here()) return fail(cudaErrorStreamCaptureUnsupported);
    task *t = task_new(T_SET);
    if (!t) return fail(cudaErrorMemoryAllocation);
    t->dst = p, t->dpitch = pitch, t->width = width, t->height = height, t->value = value;
    put(s, t);
    return sync ? cudaDeviceSynchronize() : cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t bytes) {
    return set2d(p, bytes, value, bytes, 1, NULL, true);
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s) {
    return set2d(p, bytes, value, bytes, 1, s, false);
}

cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int value, size_t width, size_t height,
                              cudaStream_t s) {
    return set2d(p, pitch, value, width, height, s, false);
}

/* ---- events ---------------------------------------------------------------------------------- */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned flags) {
    *out = NULL;
    cudaEvent_t e = calloc(1, sizeof *e);
    if (!e) return fail(cudaErrorMemoryAllocation);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->timing = !(flags & cudaEventDisableTiming);
    *out = e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) {
    return cudaEventCreateWithFlags(e, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    /* pending records and waits still reference it: let them finish */
    cudaDeviceSynchronize();
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    s = resolve(s);
    task *t = task_new(T_RECORD);
    if (!t) return fail(cudaErrorMemoryAllocation);
    t->ev = e;
    pthread_mutex_lock(&s->mu);
    const bool cap = s->capturing;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&e->mu);
    if (cap) {
        e->capture = s;
        t->gen = 0; /* numbered when the graph is launched */
    } else {
        e->capture = NULL;
        t->gen = ++e->recorded;
    }
    pthread_mutex_unlock(&e->mu);
    return put(s, t);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    (void)flags;
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    s = resolve(s);
    pthread_mutex_lock(&e->mu);
    const uint64_t gen = e->recorded;
    const cudaStream_t cap = e->capture;
    pthread_mutex_unlock(&e->mu);
    if (s->capturing) {
        /* within one capturing stream a wait on its own record is already in order; a wait on
         * outside work would need a cross-stream capture, which hmoe does not use */
        if (cap == s) return cudaSuccess;
        s->invalid = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    if (gen == 0) return cudaSuccess; /* never recorded: nothing to wait for */
    task *t = task_new(T_WAIT);
    if (!t) return fail(cudaErrorMemoryAllocation);
    t->ev = e, t->gen = gen;
    return put(s, t);
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&e->mu);
    const uint64_t gen = e->recorded;
    while (e->done < gen) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&e->mu);
    const bool done = e->done >= e->recorded;
    pthread_mutex_unlock(&e->mu);
    return done ? cudaSuccess : cudaErrorNotReady; /* not ready is no error: not sticky */
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if (!a || !b) return fail(cudaErrorInvalidResourceHandle);
    if (!a->timing || !b->timing) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&a->mu);
    const bool ra = a->recorded > 0 && a->done >= a->recorded;
    const double ta = a->t;
    pthread_mutex_unlock(&a->mu);
    pthread_mutex_lock(&b->mu);
    const bool rb = b->recorded > 0 && b->done >= b->recorded;
    const double tb = b->t;
    pthread_mutex_unlock(&b->mu);
    if (!ra || !rb) return fail(cudaErrorNotReady);
    *ms = (float)((tb - ta) * 1e3);
    return cudaSuccess;
}

/* ---- capture and graphs ---------------------------------------------------------------------- */

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
    (void)mode;
    if (!s) return fail(cudaErrorInvalidResourceHandle); /* the legacy stream cannot capture */
    pthread_mutex_lock(&s->mu);
    const bool already = s->capturing;
    if (!already) {
        s->capturing = true, s->invalid = false;
        s->capture_thread = pthread_self();
        s->cap_head = s->cap_tail = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    return already ? fail(cudaErrorInvalidValue) : cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    *g = NULL;
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&s->mu);
    const bool was = s->capturing, invalid = s->invalid;
    task *head = s->cap_head;
    s->capturing = false, s->invalid = false;
    s->cap_head = s->cap_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    if (!was) return fail(cudaErrorInvalidValue);
    if (invalid) {
        for (task *t = head, *n; t; t = n) n = t->next, task_free(t);
        return fail(cudaErrorStreamCaptureInvalidated);
    }
    cudaGraph_t gr = calloc(1, sizeof *gr);
    if (!gr) {
        for (task *t = head, *n; t; t = n) n = t->next, task_free(t);
        return fail(cudaErrorMemoryAllocation);
    }
    gr->head = head;
    *g = gr;
    return cudaSuccess;
}

static void list_free(task *t) {
    for (task *n; t; t = n) n = t->next, task_free(t);
}

cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    if (!g) return fail(cudaErrorInvalidResourceHandle);
    list_free(g->head);
    free(g);
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *ex, cudaGraph_t g, unsigned long long flags) {
    (void)flags;
    *ex = NULL;
    if (!g) return fail(cudaErrorInvalidResourceHandle);
    cudaGraphExec_t x = calloc(1, sizeof *x);
    if (!x) return fail(cudaErrorMemoryAllocation);
    task **tail = &x->head;
    for (const task *t = g->head; t; t = t->next) { /* a deep copy: the graph may go first */
        task *c = malloc(sizeof *c);
        if (!c) goto oom;
        *c = *t;
        c->next = NULL, c->borrowed = false, c->args = NULL, c->staged = NULL;
        *tail = c, tail = &c->next;
        if (t->kind == T_KERNEL) {
            if (!(c->args = malloc(t->args_size ? t->args_size : 1))) goto oom;
            memcpy(c->args, t->args, t->args_size);
        }
    }
    *ex = x;
    return cudaSuccess;
oom:
    list_free(x->head);
    free(x);
    return fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t ex, cudaStream_t s) {
    if (!ex) return fail(cudaErrorInvalidResourceHandle);
    for (const task *t = ex->head; t; t = t->next) {
        task *c = malloc(sizeof *c);
        if (!c) return fail(cudaErrorMemoryAllocation);
        *c = *t;
        c->borrowed = true;
        if (c->kind == T_RECORD) {
            pthread_mutex_lock(&c->ev->mu);
            c->gen = ++c->ev->recorded;
            c->ev->capture = NULL;
            pthread_mutex_unlock(&c->ev->mu);
        }
        put(s, c);
    }
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t ex) {
    if (!ex) return fail(cudaErrorInvalidResourceHandle);
    cudaDeviceSynchronize(); /* launches in flight borrow its tasks */
    list_free(ex->head);
    free(ex);
    return cudaSuccess;
}

/* ---- cuBLAS ---------------------------------------------------------------------------------- */

cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = calloc(1, sizeof **h);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasDestroy(cublasHandle_t h) {
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    h->s = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    (void)mode;
    return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

typedef struct gemm_args {
    int ta, tb, m, n, k;
    float alpha, beta;
    const void *a, *b;
    int at, bt; /* CUDA_R_32F, CUDA_R_16F or CUDA_R_16BF */
    int lda, ldb, ldc;
    float *c;
} gemm_args;

static float gemm_ld(const void *p, int type, int64_t i) {
    if (type == CUDA_R_16BF) return hm_bf16_to_f32(((const uint16_t *)p)[i]);
    if (type == CUDA_R_16F) return hm_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* column-major C[i + j ldc] = alpha op(A)[i][l] op(B)[l][j] + beta C, sums in float */
static void gemm_k(const void *p) {
    const gemm_args *g = p;
    for (int j = 0; j < g->n; j++)
        for (int i = 0; i < g->m; i++) {
            float acc = 0;
            for (int l = 0; l < g->k; l++) {
                const int64_t ai =
                    g->ta == CUBLAS_OP_N ? i + (int64_t)l * g->lda : l + (int64_t)i * g->lda;
                const int64_t bi =
                    g->tb == CUBLAS_OP_N ? l + (int64_t)j * g->ldb : j + (int64_t)l * g->ldb;
                acc += gemm_ld(g->a, g->at, ai) * gemm_ld(g->b, g->bt, bi);
            }
            float *c = g->c + i + (int64_t)j * g->ldc;
            *c = g->alpha * acc + (g->beta != 0 ? g->beta * *c : 0.0f);
        }
}

static cublasStatus_t gemm(cublasHandle_t h, const gemm_args *g) {
    if (!h || g->m < 0 || g->n < 0 || g->k < 0 || g->ldc < g->m ||
        g->lda < (g->ta == CUBLAS_OP_N ? g->m : g->k) ||
        g->ldb < (g->tb == CUBLAS_OP_N ? g->k : g->n))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!g->m || !g->n) return CUBLAS_STATUS_SUCCESS;
    return hm_host_launch(h->s, gemm_k, g, sizeof *g) == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                                                     : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *a, int lda,
                           const float *b, int ldb, const float *beta, float *c, int ldc) {
    const gemm_args g = {ta, tb,         m,          n,   k,   *alpha, *beta, a,
                         b,  CUDA_R_32F, CUDA_R_32F, lda, ldb, ldc,    c};
    return gemm(h, &g);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *a, cudaDataType at,
                            int lda, const void *b, cudaDataType bt, int ldb, const void *beta,
                            void *c, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
    (void)algo;
    if (ct != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F ||
        (at != CUDA_R_32F && at != CUDA_R_16BF && at != CUDA_R_16F) ||
        (bt != CUDA_R_32F && bt != CUDA_R_16BF && bt != CUDA_R_16F) ||
        (at == CUDA_R_32F) != (bt == CUDA_R_32F))
        return CUBLAS_STATUS_INVALID_VALUE;
    const gemm_args g = {
        ta, tb,  m,   n,   k, *(const float *)alpha, *(const float *)beta, a, b, at,
        bt, lda, ldb, ldc, c};
    return gemm(h, &g);
}
