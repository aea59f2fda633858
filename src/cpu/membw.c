/* membw.c - multi-threaded streaming-read bandwidth measurement. */
#include "cpu/membw.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/timer.h"

hm_status hm_measure_read_bandwidth(int passes, double *median_gbs, double *best_gbs) {
    hm_membw_params p = hm_membw_default_params();
    p.passes = passes;
    hm_membw_result r;
    hm_status st = hm_membw_read(&p, &r);
    if (median_gbs) *median_gbs = st ? 0 : r.median_gbs;
    if (best_gbs) *best_gbs = st ? 0 : r.best_gbs;
    return st;
}

hm_membw_params hm_membw_default_params(void) {
    hm_membw_params p;
    memset(&p, 0, sizeof p);
    p.huge_pages = true;
    return p;
}

typedef struct {
    _Alignas(64) uint64_t sum;
} padded_sum;

typedef struct {
    uint64_t *data;
    size_t n; /* elements */
    const hm_cpu_ops *ops;
    padded_sum *sums;   /* [nth] */
    hm_work_slot *work; /* [nth]: the read passes' chunks */
} membw_job;

/* Chunks of the read passes: 2 MiB, claimed through hm_work_next (each thread streams its own
 * contiguous range, then takes chunks from the back of slower threads' ranges, as the kernels'
 * drivers do): a pass measures the machine's bandwidth, not its slowest thread's. */
#define CHUNK ((size_t)(2u << 20) / sizeof(uint64_t))

/* Slice of ith: whole 4 KiB pages so no two threads share a page (first touch = local node). */
static void slice(size_t n, int ith, int nth, size_t *lo, size_t *hi) {
    const size_t page = 4096 / sizeof(uint64_t);
    size_t pages = (n + page - 1) / page;
    *lo = pages * (size_t)ith / (size_t)nth * page;
    *hi = pages * (size_t)(ith + 1) / (size_t)nth * page;
    if (*lo > n) *lo = n;
    if (*hi > n) *hi = n;
}

static void touch_task(int ith, int nth, void *arg) {
    membw_job *j = arg;
    size_t lo, hi;
    slice(j->n, ith, nth, &lo, &hi);
    for (size_t i = lo; i < hi; i++) j->data[i] = i;
}

static void read_task(int ith, int nth, void *arg) {
    membw_job *j = arg;
    uint64_t sum = 0;
    for (int64_t c; (c = hm_work_next(j->work, nth, ith)) >= 0;) {
        const size_t lo = (size_t)c * CHUNK, hi = lo + CHUNK < j->n ? lo + CHUNK : j->n;
        sum += j->ops->sum_u64(j->data + lo, hi - lo);
    }
    j->sums[ith].sum = sum;
}

uint64_t hm_membw_read_range(const hm_cpu_ops *ops, const void *p, size_t bytes, size_t *read) {
    const uintptr_t a = ((uintptr_t)p + 63) & ~(uintptr_t)63,
                    e = ((uintptr_t)p + bytes) & ~(uintptr_t)63;
    *read = e > a ? (size_t)(e - a) : 0;
    return *read ? ops->sum_u64((const uint64_t *)a, *read / sizeof(uint64_t)) : 0;
}

/* wrapping sum of 0 .. n - 1 (what a read of the written buffer sums) */
static uint64_t index_sum(size_t n) {
    return (n % 2 == 0) ? (uint64_t)(n / 2) * (uint64_t)(n - 1)
                        : (uint64_t)n * (uint64_t)((n - 1) / 2);
}

struct hm_membw_sweep {
    hm_pool *pool;
    hm_large buf;
    membw_job job;
};

hm_status hm_membw_sweep_create(hm_pool *pool, const hm_cpu_ops *ops, size_t bytes,
                                hm_membw_sweep **out) {
    *out = NULL;
    if (!pool || !ops) return hm_errorf(HM_ERR_INVALID_ARG, "membw sweep: no pool or kernels");
    if (bytes == 0) {
        hm_mem_info mi;
        const size_t l3 = hm_mem_info_get(&mi) == HM_OK ? mi.l3_bytes : 0;
        bytes = l3 ? 4 * l3 : (size_t)1 << 30;
        if (bytes < ((size_t)256 << 20)) bytes = (size_t)256 << 20;
    }
    const size_t n = bytes / sizeof(uint64_t);
    if (n < CHUNK)
        return hm_errorf(HM_ERR_INVALID_ARG, "membw sweep: %zu bytes is too small (2 MiB at least)",
                         bytes);
    const int nth = hm_pool_size(pool);
    hm_membw_sweep *s = hm_calloc_aligned(1, sizeof *s, 64, "membw sweep");
    if (!s) return hm_errorf(HM_ERR_NO_MEMORY, "membw sweep: out of memory");
    s->pool = pool;
    hm_status st = hm_large_alloc(n * sizeof(uint64_t), true, "membw sweep buffer", &s->buf);
    s->job.sums =
        st == HM_OK ? hm_calloc_aligned((size_t)nth, sizeof(padded_sum), 64, "membw") : NULL;
    s->job.work =
        st == HM_OK ? hm_calloc_aligned((size_t)nth, sizeof(hm_work_slot), 64, "membw") : NULL;
    if (st != HM_OK || !s->job.sums || !s->job.work) {
        if (st == HM_OK) st = hm_errorf(HM_ERR_NO_MEMORY, "membw sweep: out of memory");
        hm_membw_sweep_free(s);
        return st;
    }
    s->job.data = s->buf.ptr, s->job.n = n, s->job.ops = ops;
    hm_pool_run(pool, touch_task, &s->job);
    *out = s;
    return HM_OK;
}

hm_status hm_membw_sweep_run(hm_membw_sweep *s) {
    const int nth = hm_pool_size(s->pool);
    hm_work_init(s->job.work, nth, (int64_t)((s->job.n + CHUNK - 1) / CHUNK));
    hm_pool_run(s->pool, read_task, &s->job);
    uint64_t total = 0;
    for (int i = 0; i < nth; i++) total += s->job.sums[i].sum;
    if (total != index_sum(s->job.n))
        return hm_errorf(HM_ERR_INTERNAL, "membw sweep: %s kernel checksum %llu != expected %llu",
                         s->job.ops->name, (unsigned long long)total,
                         (unsigned long long)index_sum(s->job.n));
    return HM_OK;
}

size_t hm_membw_sweep_bytes(const hm_membw_sweep *s) {
    return s->job.n * sizeof(uint64_t);
}

void hm_membw_sweep_free(hm_membw_sweep *s) {
    if (!s) return;
    hm_free(s->job.work);
    hm_free(s->job.sums);
    hm_large_free(&s->buf);
    hm_free(s);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

hm_status hm_membw_read(const hm_membw_params *params, hm_membw_result *out) {
    memset(out, 0, sizeof *out);
    hm_membw_params p = params ? *params : hm_membw_default_params();
    if (!p.ops) {
        hm_status st = hm_cpu_ops_get(&p.ops);
        if (st != HM_OK) return st;
    }
    if (p.bytes == 0) {
        hm_mem_info mi;
        size_t l3 = hm_mem_info_get(&mi) == HM_OK ? mi.l3_bytes : 0;
        p.bytes = (size_t)1 << 30;
        if (l3 * 16 > p.bytes) p.bytes = l3 * 16;
    }
    if (p.passes <= 0) p.passes = 10;
    if (p.passes > 1000) return hm_errorf(HM_ERR_INVALID_ARG, "membw: passes %d > 1000", p.passes);
    size_t n = p.bytes / sizeof(uint64_t);
    if (n == 0)
        return hm_errorf(HM_ERR_INVALID_ARG, "membw: buffer of %zu bytes is too small", p.bytes);

    hm_pool *pool = p.pool, *own = NULL;
    if (!pool) {
        hm_pool_params pp = hm_pool_default_params();
        pp.pin_caller = false;
        hm_status st = hm_pool_create(&pp, &own);
        if (st != HM_OK) return st;
        pool = own;
    }
    int nth = hm_pool_size(pool);
    hm_large buf;
    hm_status st = hm_large_alloc(n * sizeof(uint64_t), p.huge_pages, "membw buffer", &buf);
    padded_sum *sums =
        st == HM_OK ? hm_calloc_aligned((size_t)nth, sizeof(padded_sum), 64, "membw") : NULL;
    hm_work_slot *work =
        st == HM_OK ? hm_calloc_aligned((size_t)nth, sizeof(hm_work_slot), 64, "membw") : NULL;
    double *gbs = calloc((size_t)p.passes, sizeof(double));
    if (st != HM_OK || !sums || !work || !gbs) {
        if (st == HM_OK) st = hm_errorf(HM_ERR_NO_MEMORY, "membw: out of memory");
        goto done;
    }
    membw_job job = {buf.ptr, n, p.ops, sums, work};
    uint64_t t0 = hm_time_ns();
    hm_pool_run(pool, touch_task, &job);
    out->touch_s = (double)(hm_time_ns() - t0) * 1e-9;

    const uint64_t expect = index_sum(n);
    for (int pass = -1; pass < p.passes; pass++) { /* pass -1 warms up */
        hm_work_init(work, nth, (int64_t)((n + CHUNK - 1) / CHUNK));
        t0 = hm_time_ns();
        hm_pool_run(pool, read_task, &job);
        uint64_t dt = hm_time_ns() - t0;
        uint64_t total = 0;
        for (int i = 0; i < nth; i++) total += sums[i].sum;
        if (total != expect) {
            st = hm_errorf(
                HM_ERR_INTERNAL, "membw: %s kernel checksum %llu != expected %llu on pass %d",
                p.ops->name, (unsigned long long)total, (unsigned long long)expect, pass);
            goto done;
        }
        if (pass >= 0) gbs[pass] = (double)(n * sizeof(uint64_t)) / (double)(dt ? dt : 1);
    }
    qsort(gbs, (size_t)p.passes, sizeof(double), cmp_double);
    out->bytes = n * sizeof(uint64_t);
    out->threads = nth;
    out->passes = p.passes;
    out->kernel = p.ops->name;
    out->worst_gbs = gbs[0];
    out->best_gbs = gbs[p.passes - 1];
    out->median_gbs = gbs[p.passes / 2];
    st = HM_OK;
done:
    free(gbs);
    hm_free(work);
    hm_free(sums);
    hm_large_free(&buf);
    hm_pool_free(own);
    return st;
}
