/* membw.h - measured memory read bandwidth: every core streams its own slice of a large buffer
 * with the selected ISA's vector loads, then helps slower cores with theirs (2 MiB chunks); the
 * sum of the data proves every byte was read. This is the roofline every bandwidth-bound
 * benchmark compares against. */
#ifndef HM_CPU_MEMBW_H
#define HM_CPU_MEMBW_H

#include <stdbool.h>
#include <stddef.h>

#include "core/pool.h"
#include "cpu/ops.h"

typedef struct hm_membw_params {
    size_t bytes;          /* buffer size; 0 = max(1 GiB, 16 x L3) */
    int passes;            /* timed passes after one warm-up; 0 = 10 */
    hm_pool *pool;         /* NULL = a sync pool over every physical core, made for this call */
    const hm_cpu_ops *ops; /* NULL = hm_cpu_ops_get() */
    bool huge_pages;       /* ask for transparent huge pages (default true) */
} hm_membw_params;

typedef struct hm_membw_result {
    size_t bytes;
    int threads, passes;
    const char *kernel; /* ISA variant used */
    double best_gbs;    /* 1e9 bytes / s of the fastest pass */
    double median_gbs;
    double worst_gbs;
    double touch_s; /* first-touch fill time */
} hm_membw_result;

hm_membw_params hm_membw_default_params(void);
/* Fails with HM_ERR_INTERNAL if any pass's checksum is wrong. */
hm_status hm_membw_read(const hm_membw_params *params, hm_membw_result *out);

/* The whole 64-byte lines inside [p, p + bytes) read by ops' streaming-read kernel (the passes'
 * loads): the benchmarks' read of the very bytes a kernel pass reads, between its passes. Returns
 * the lines' wrapping sum (so the reads happen); *read = the bytes read. */
uint64_t hm_membw_read_range(const hm_cpu_ops *ops, const void *p, size_t bytes, size_t *read);

/* A cache sweep: one read, by a pool's threads, of a buffer of its own (written once when
 * created, so it has pages of its own): bytes 0 = 4 x the last-level cache, at least 256 MiB
 * (1 GiB where the cache size is unknown). The benchmarks run one before each timed side of a
 * paired measurement: what one side read stays partly in the last-level cache (hundreds of MiB
 * on server parts), and the other side's read of the same bytes can run faster from it (14% on
 * the development machine, a 2-layer bench moe).
 * The sweep leaves the caches full of its own lines, which no pass reads. */
typedef struct hm_membw_sweep hm_membw_sweep;
hm_status hm_membw_sweep_create(hm_pool *pool, const hm_cpu_ops *ops, size_t bytes,
                                hm_membw_sweep **out);
/* One read of the buffer (on the pool given to create); fails with HM_ERR_INTERNAL if its sum
 * is wrong */
hm_status hm_membw_sweep_run(hm_membw_sweep *s);
size_t hm_membw_sweep_bytes(const hm_membw_sweep *s);
void hm_membw_sweep_free(hm_membw_sweep *s);

#endif
