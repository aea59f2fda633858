/* bench.c - `hmoe bench pool|membw`: measured, validated, with the configuration and the target. */
#include <sched.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model/model.h"
#include "core/cpu.h"
#include "core/pool.h"
#include "core/timer.h"
#include "quant/ref.h"
#include "core/alloc.h"
#include "cpu/matvec.h"
#include "cpu/membw.h"
#include "cpu/ops.h"
#include "quant/synth.h"

#define POOL_TARGET_US 5.0

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

typedef struct {
    atomic_int calls;
    hm_pool *pool;
} count_job;

static void empty_task(int ith, int nth, void *arg) {
    (void)ith, (void)nth;
    atomic_fetch_add_explicit(&((count_job *)arg)->calls, 1, memory_order_relaxed);
}

static void barrier_task(int ith, int nth, void *arg) {
    (void)ith, (void)nth;
    count_job *j = arg;
    hm_pool_barrier(j->pool);
    atomic_fetch_add_explicit(&j->calls, 1, memory_order_relaxed);
}

typedef struct {
    double min, median, p90, p99, mean;
} lat_stats;

static lat_stats stats(uint64_t *ns, int n) {
    lat_stats s;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (double)ns[i];
    qsort(ns, (size_t)n, sizeof *ns, cmp_u64);
    s.min = (double)ns[0] * 1e-3;
    s.median = (double)ns[n / 2] * 1e-3;
    s.p90 = (double)ns[(int)(n * 0.90)] * 1e-3;
    s.p99 = (double)ns[(int)(n * 0.99)] * 1e-3;
    s.mean = sum / n * 1e-3;
    return s;
}

/* Times `iters` round trips of fn on pool (after a warm-up); false if a job lost a call. */
static bool time_pool(hm_pool *pool, hm_task_fn fn, bool async, int iters, uint64_t *ns) {
    count_job job = {0, pool};
    int nth = hm_pool_size(pool);
    for (int i = -iters / 10 - 100; i < iters; i++) {
        uint64_t t0 = hm_time_ns();
        if (async) {
            hm_pool_submit(pool, fn, &job);
            hm_pool_wait(pool);
        } else {
            hm_pool_run(pool, fn, &job);
        }
        uint64_t dt = hm_time_ns() - t0;
        if (i >= 0) ns[i] = dt;
    }
    return atomic_load(&job.calls) == (iters + iters / 10 + 100) * nth;
}

static void print_row(const char *what, int nth, lat_stats s, bool target) {
    printf("%-28s %7d %8.2f %8.2f %8.2f %8.2f %8.2f", what, nth, s.min, s.median, s.p90, s.p99,
           s.mean);
    if (target)
        printf("   %s (target <= %.1f us median)", s.median <= POOL_TARGET_US ? "PASS" : "MISS",
               POOL_TARGET_US);
    printf("\n");
}

static int bench_pool(int argc, char **argv) {
    long threads = 0, iters = 20000, spin = -1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--threads")) {
            if (!cli_parse_int(v, 1, 4096, &threads))
                return cli_bad_value("bench pool", a, v, "a thread count 1..4096");
            i++;
        } else if (!strcmp(a, "--iters")) {
            if (!cli_parse_int(v, 100, 10000000, &iters))
                return cli_bad_value("bench pool", a, v, "an iteration count 100..10000000");
            i++;
        } else if (!strcmp(a, "--spin-us")) {
            if (!cli_parse_int(v, 0, 10000000, &spin))
                return cli_bad_value("bench pool", a, v, "microseconds 0..10000000");
            i++;
        } else
            return cli_usage_error(
                "bench pool: unknown option '%s' (--threads N, --iters N >= 100, --spin-us N)", a);
    }
    const hm_topology *t = hm_topology_get();
    if (threads == 0) threads = t->n_cores;
    uint64_t *ns = malloc(sizeof(uint64_t) * (size_t)iters);
    if (!ns) return cli_usage_error("bench pool: out of memory");

    printf("bench pool: %ld threads (machine: %d physical cores, %d logical CPUs, %d NUMA nodes), "
           "%ld iterations, pinned\n",
           threads, t->n_cores, t->n_cpus, t->n_nodes, iters);
    printf("roofline: none (latency); target: median dispatch+join of an empty job <= %.1f us\n",
           POOL_TARGET_US);
    printf("%-28s %7s %8s %8s %8s %8s %8s\n", "case (us per round trip)", "threads", "min",
           "median", "p90", "p99", "mean");
    int rc = 0;
    cpu_set_t orig_mask;
    sched_getaffinity(0, sizeof orig_mask, &orig_mask);
    struct {
        const char *name;
        bool async;
        hm_task_fn fn;
        bool target;
    } cases[] = {{"sync run, empty job", false, empty_task, true},
                 {"async submit+wait, empty", true, empty_task, false},
                 {"sync run, one barrier", false, barrier_task, false}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        hm_pool_params pp = hm_pool_default_params();
        /* Async: the caller is a thread of its own that spins while it waits; it gets a core of
         * its own (the next one after the workers'), or it would steal a worker's time slice. */
        sched_setaffinity(0, sizeof orig_mask, &orig_mask);
        pp.n_threads = (int)threads;
        if (cases[c].async && t->n_cores > 1) {
            if (pp.n_threads > t->n_cores - 1) pp.n_threads = t->n_cores - 1;
            hm_thread_pin(t->core_cpus[pp.n_threads]);
        }
        pp.async = cases[c].async;
        pp.pin_caller = !cases[c].async;
        pp.spin_us = (int)spin;
        hm_pool *pool;
        if (hm_pool_create(&pp, &pool) != HM_OK) {
            fprintf(stderr, "hmoe bench pool: %s\n", hm_last_error());
            free(ns);
            return 1;
        }
        if (c == 0) printf("spin window: %d us\n", hm_pool_spin_us(pool));
        if (!time_pool(pool, cases[c].fn, cases[c].async, (int)iters, ns)) {
            fprintf(stderr, "hmoe bench pool: %s lost calls: pool is broken\n", cases[c].name);
            rc = 1;
        }
        print_row(cases[c].name, hm_pool_size(pool), stats(ns, (int)iters), cases[c].target);
        hm_pool_free(pool);
    }
    /* NUMA sub-pools, emulated as two halves when the machine has one node */
    if (t->n_cores >= 2) {
        sched_setaffinity(0, sizeof orig_mask, &orig_mask);
        hm_poolset_params sp = hm_poolset_default_params();
        sp.emulate_nodes = t->n_nodes > 1 ? 0 : 2;
        sp.pin_caller = true;
        sp.spin_us = (int)spin;
        hm_poolset *set;
        if (hm_poolset_create(&sp, &set) == HM_OK) {
            int n = hm_poolset_count(set);
            count_job jobs[64];
            void *args[64];
            for (int i = 0; i < n && i < 64; i++) {
                atomic_init(&jobs[i].calls, 0);
                jobs[i].pool = hm_poolset_pool(set, i);
                args[i] = &jobs[i];
            }
            int total = 0;
            for (int i = 0; i < n; i++) total += hm_pool_size(hm_poolset_pool(set, i));
            for (int i = -1000; i < iters; i++) {
                uint64_t t0 = hm_time_ns();
                hm_poolset_run(set, empty_task, args);
                if (i >= 0) ns[i] = hm_time_ns() - t0;
            }
            char name[64];
            snprintf(name, sizeof name, "poolset %d%s sub-pools", n,
                     sp.emulate_nodes ? " emulated" : "");
            print_row(name, total, stats(ns, (int)iters), false);
            hm_poolset_free(set);
        } else {
            fprintf(stderr, "hmoe bench pool: poolset: %s\n", hm_last_error());
            rc = 1;
        }
    }
    free(ns);
    return rc;
}

static int bench_membw(int argc, char **argv) {
    size_t bytes = 0;
    long passes = 10, threads = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--bytes")) {
            if (!cli_parse_size(v, &bytes) || bytes < 4096)
                return cli_bad_value("bench membw", a, v, "a size of at least 4K (4096, 64M, 2G)");
            i++;
        } else if (!strcmp(a, "--passes")) {
            if (!cli_parse_int(v, 1, 1000, &passes))
                return cli_bad_value("bench membw", a, v, "a pass count 1..1000");
            i++;
        } else if (!strcmp(a, "--threads")) {
            if (!cli_parse_int(v, 1, 4096, &threads))
                return cli_bad_value("bench membw", a, v, "a thread count 1..4096");
            i++;
        } else
            return cli_usage_error(
                "bench membw: unknown option '%s' (--bytes SIZE, --passes N, --threads N)", a);
    }
    const hm_cpu_features *f = hm_cpu_features_get();
    hm_pool_params pp = hm_pool_default_params();
    pp.n_threads = (int)threads;
    hm_pool *pool;
    if (hm_pool_create(&pp, &pool) != HM_OK) {
        fprintf(stderr, "hmoe bench membw: %s\n", hm_last_error());
        return 1;
    }
    printf("bench membw: streaming read, %d threads, %ld passes (+1 warm-up), buffer %s\n",
           hm_pool_size(pool), passes, bytes ? "as given" : "max(1 GiB, 16 x L3)");
    printf("this is the roofline of every bandwidth-bound benchmark; compare it with a tuned "
           "STREAM-like read (bench/stream_ref.sh)\n");
    printf("%-8s %10s %10s %10s %10s\n", "kernel", "GiB", "best GB/s", "median", "worst");
    int rc = 0, n_res = 0;
    hm_membw_result res[HM_ISA_COUNT];
    double best_of_all = 0;
    for (int isa = HM_ISA_COUNT - 1; isa >= 0; isa--) {
        if (!hm_isa_supported(f, (hm_isa)isa) || !hm_cpu_ops_for((hm_isa)isa)) continue;
        hm_membw_params p = hm_membw_default_params();
        p.bytes = bytes;
        p.passes = (int)passes;
        p.pool = pool;
        p.ops = hm_cpu_ops_for((hm_isa)isa);
        if (hm_membw_read(&p, &res[n_res]) != HM_OK) {
            fprintf(stderr, "hmoe bench membw: %s\n", hm_last_error());
            rc = 1;
            continue;
        }
        if (res[n_res].best_gbs > best_of_all) best_of_all = res[n_res].best_gbs;
        n_res++;
    }
    for (int i = 0; i < n_res; i++)
        printf("%-8s %10.2f %10.2f %10.2f %10.2f  (%.1f%% of the best variant)\n", res[i].kernel,
               (double)res[i].bytes / (1 << 30), res[i].best_gbs, res[i].median_gbs,
               res[i].worst_gbs, 100.0 * res[i].best_gbs / best_of_all);
    hm_pool_free(pool);
    return rc;
}

/* ---------------------------------------------------------------- kernels */

/* timed passes of the matvec rows (up to 4 tokens), each paired with a read pass */
#define KPAIRED 5

typedef struct kjob {
    hm_pool *pool;
    hm_vec_dot_fn dot;
    const hm_matrix *mats;
    int n_mats, n_tok;
    const void *xq;
    size_t xb;
    float *y;
    size_t y_mat; /* floats between two matrices' outputs (0: one y, one matrix per pass) */
    uint64_t seed;
    void **scratch; /* [nth] per-thread scratch of the AMX path, NULL when it is not used */
    void *packed;   /* activations packed once for the AMX path (shared by the threads) */
    const float *x; /* float activations [n_tok][cols] (the AMX path quantizes them itself) */
    uint8_t *wpack; /* --repack: every matrix repacked for AMX, wpack_bytes apart; else NULL */
    size_t wpack_bytes;
    bool rt; /* repacked for the swapped-operand kernel (activations as row tiles) */
    const hm_cpu_ops *ops;
    bool bf16;            /* BF16/F16 weights on AMX BF16 tiles instead of the int8 path */
    hm_vec_dot_n_fn dotn; /* the multi-token twin of dot (NULL: none) */
    hm_vec_dot_46_fn d46; /* 4 rows by 6 tokens (NULL: none; the float types) */
    hm_work_slot *work;   /* [nth]: the pass's claims (set up by krun) */
    bool read_only;       /* matvec claims only read their weight bytes (the paired read pass) */
    int job_mats; /* --job-bytes: up to 4 tokens, a pass as jobs of this many matrices (0: one) */
    cli_read_sink *sinks; /* [nth]: what the read passes read */
    int cu;               /* 32-row units per claim */
    int tbt;              /* tokens per block (hm_tile_token_block), each packed on its own */
    size_t blk;           /* packed bytes per token block */
} kjob;

#if defined(__x86_64__)
/* The tile paths' token blocks for n tokens, as hm_nn_matmul blocks them; returns their count
 * (j->tbt, j->blk set) */
static int kblocks(kjob *j, int n) {
    const int64_t cols = j->mats[0].cols;
    j->tbt = hm_tile_token_block(cols, n);
    const int cap = hm_tile_token_cap(cols, n); /* as hm_nn_matmul sizes the blocks */
    j->blk = ((j->bf16 ? hm_amx_bf16_act_bytes(cols, cap)
                       : hm_amx_act_bytes(j->mats[0].type, cols, cap)) +
              63) &
             ~(size_t)63;
    return (n + j->tbt - 1) / j->tbt;
}

/* the packed activations' bytes for the largest of the token counts */
static size_t kpacked_bytes(kjob *j, const long *tokens, int n_tokens) {
    size_t most = 64;
    for (int k = 0; k < n_tokens; k++) {
        const size_t b = (size_t)kblocks(j, (int)tokens[k]) * j->blk;
        most = b > most ? b : most;
    }
    return most;
}
#endif

static void kfill_task(int ith, int nth, void *arg) {
    kjob *j = arg;
    for (int m = ith; m < j->n_mats; m += nth)
        hm_synth_fill(j->mats[m].type, (void *)j->mats[m].data,
                      (uint64_t)(j->mats[m].rows * j->mats[m].cols), 0.0f, 0.02f,
                      j->seed + (uint64_t)m);
}

/* matrices per timed pass: all of them (distinct weights, no cache reuse) up to 4 tokens; above,
 * the pass is compute bound and a few matrices keep it short */
static int kmats(int n_mats, long n_tok) {
    const long m = n_tok <= 4 ? n_mats : (long)n_mats * 4 / n_tok + 1;
    return m < n_mats ? (int)m : n_mats;
}

static void kmatvec_task(int ith, int nth, void *arg) {
    kjob *j = arg;
#if defined(__x86_64__)
    if (j->scratch && j->n_tok > 4) {
        /* claims of cu 32-row units, never across matrices, shared as hm_nn_matmul shares
         * them: each thread its own range first, then the others' (per matrix, 768 rows = 24
         * units over 16 threads would leave half of them idle a third of the time, which a
         * layer's many experts do not) */
        const int64_t groups = (j->mats[0].rows + 31) / 32, cpm = (groups + j->cu - 1) / j->cu;
        for (int64_t c; (c = hm_work_next(j->work, nth, ith)) >= 0;) {
            /* claims block by block (a block's activations stay in L2 for its claims) */
            const int b = (int)(c / (cpm * j->n_mats)), t0 = b * j->tbt,
                      nt = j->n_tok - t0 < j->tbt ? j->n_tok - t0 : j->tbt;
            const void *pk = (const uint8_t *)j->packed + (size_t)b * j->blk;
            c %= cpm * j->n_mats;
            const int m = (int)(c / cpm);
            const hm_matrix *w = &j->mats[m];
            const int64_t r0 = (c % cpm) * j->cu * 32,
                          r1 = r0 + j->cu * 32 < w->rows ? r0 + j->cu * 32 : w->rows;
            float *y = j->y + (size_t)m * j->y_mat + (size_t)t0 * (size_t)w->rows;
            if (j->bf16)
                hm_amx_bf16_matmul(w->type, w->data, w->row_bytes, w->cols, r0, r1, pk, nt, y + r0,
                                   (size_t)w->rows, j->scratch[ith]);
            else if (j->rt)
                j->ops->i8_matmul_packed_rt(j->wpack + (size_t)m * j->wpack_bytes, w->rows, w->cols,
                                            r0, r1, pk, nt, y + r0, (size_t)w->rows,
                                            j->scratch[ith]);
            else if (j->wpack)
                j->ops->i8_matmul_packed(j->wpack + (size_t)m * j->wpack_bytes, w->rows, w->cols,
                                         r0, r1, pk, nt, y + r0, (size_t)w->rows, j->scratch[ith]);
            else
                j->ops->i8_matmul(w->type, w->data, w->row_bytes, w->cols, r0, r1, pk, nt, y + r0,
                                  (size_t)w->rows, j->scratch[ith]);
        }
        return;
    }
#endif
    /* claim c = part p of matrix m (rows p / nth .. (p + 1) / nth), c = p * n_mats + m: each
     * thread's own range is its part of every matrix in turn (all threads on one matrix at about
     * the same time, as in one matmul), and a thread done early takes parts from the back of the
     * others' ranges, as hm_nn_matmul's per-row path does (a slow vCPU would otherwise decide
     * the pass) */
    for (int64_t c; (c = hm_work_next(j->work, nth, ith)) >= 0;) {
        const int p = (int)(c / j->n_mats), m = (int)(c % j->n_mats);
        const hm_matrix *w = &j->mats[m];
        const int64_t r0 = w->rows * p / nth, r1 = w->rows * (p + 1) / nth;
        if (j->read_only) {
            size_t got;
            j->sinks[ith].sum +=
                hm_membw_read_range(j->ops, (const uint8_t *)w->data + (size_t)r0 * w->row_bytes,
                                    (size_t)(r1 - r0) * w->row_bytes, &got);
            j->sinks[ith].bytes += got;
            continue;
        }
        /* as hm_nn_matmul starts each unit */
        hm_prefetch_start((const uint8_t *)w->data + (size_t)r0 * w->row_bytes,
                          (size_t)(r1 - r0) * w->row_bytes);
        hm_matvec_rows(j->dot, j->dotn, j->d46, w, j->xq, j->xb, j->n_tok,
                       j->y + (size_t)m * j->y_mat, (size_t)w->rows, r0, r1);
    }
}

/* The ISA peak for the matmul rows (hm_cpu_ops.peak_ops on every thread at once) */
typedef struct {
    const hm_cpu_ops *ops;
    hm_peak_kind kind;
    int64_t iters;
    double *done; /* [nth] operations per thread */
} kpeak_job;

static void kpeak_task(int ith, int nth, void *arg) {
    (void)nth;
    kpeak_job *j = arg;
    j->done[ith] = j->ops->peak_ops(j->kind, j->iters);
}

/* TOPS of the peak loop on all the pool's threads together (each run ~20 ms; the best of 3),
 * 0 where the variant has none */
static double kpeak(hm_pool *pool, const hm_cpu_ops *ops, hm_peak_kind kind) {
    if (!ops->peak_ops) return 0;
    const int nth = hm_pool_size(pool);
    double *done = calloc((size_t)nth, sizeof *done);
    if (!done) return 0;
    kpeak_job j = {ops, kind, 256, done};
    for (;;) { /* iterations for ~20 ms on one thread */
        const uint64_t t0 = hm_time_ns();
        ops->peak_ops(kind, j.iters);
        const double s = (double)(hm_time_ns() - t0) * 1e-9;
        if (s >= 2e-3 || j.iters >= ((int64_t)1 << 40)) {
            j.iters = (int64_t)((double)j.iters * 0.02 / (s > 0 ? s : 1e-9)) + 1;
            break;
        }
        j.iters *= 4;
    }
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        const uint64_t t0 = hm_time_ns();
        hm_pool_run(pool, kpeak_task, &j);
        const double s = (double)(hm_time_ns() - t0) * 1e-9;
        double sum = 0;
        for (int t = 0; t < nth; t++) sum += done[t];
        if (s > 0 && sum / s * 1e-12 > best) best = sum / s * 1e-12;
    }
    free(done);
    return best;
}

/* one pass of kmatvec_task (its claims reset first) */
static void krun(hm_pool *pool, kjob *j) {
    const int nth = hm_pool_size(pool);
    if (j->scratch && j->n_tok > 4) {
#if defined(__x86_64__)
        const int nb = kblocks(j, j->n_tok);
#else
        const int nb = 1;
#endif
        const int64_t groups = (j->mats[0].rows + 31) / 32;
        j->cu = hm_tile_claim_units(groups * j->n_mats * nb, nth);
        hm_work_init(j->work, nth, (groups + j->cu - 1) / j->cu * j->n_mats * nb);
    } else if (j->job_mats > 0 && j->job_mats < j->n_mats && j->n_tok <= 4) {
        /* consecutive jobs of job_mats matrices each, as a model's layers are jobs of their own
         * (distinct bytes in every job: the pass still reads all n_mats matrices once) */
        const hm_matrix *all = j->mats;
        float *y = j->y;
        const int n = j->n_mats;
        for (int m0 = 0; m0 < n; m0 += j->job_mats) {
            j->mats = all + m0;
            j->n_mats = n - m0 < j->job_mats ? n - m0 : j->job_mats;
            j->y = y + (size_t)m0 * j->y_mat;
            hm_work_init(j->work, nth, (int64_t)nth * j->n_mats);
            hm_pool_run(pool, kmatvec_task, j);
        }
        j->mats = all, j->n_mats = n, j->y = y;
        return;
    } else {
        hm_work_init(j->work, nth, (int64_t)nth * j->n_mats);
    }
    hm_pool_run(pool, kmatvec_task, j);
}

static void kpack_task(int ith, int nth, void *arg) {
#if defined(__x86_64__)
    kjob *j = arg;
    /* each token block on its own (kblocks, set by the caller); blocks in turn, each split over
     * the threads */
    const int64_t cols = j->mats[0].cols;
    for (int t0 = 0; t0 < j->n_tok; t0 += j->tbt) {
        const int nt = j->n_tok - t0 < j->tbt ? j->n_tok - t0 : j->tbt, tg = (nt + 31) / 32 * 2;
        const float *x = j->x + (size_t)t0 * (size_t)cols;
        void *pk = (uint8_t *)j->packed + (size_t)(t0 / j->tbt) * j->blk;
        const int g0 = tg * ith / nth, g1 = tg * (ith + 1) / nth;
        if (j->bf16)
            hm_amx_bf16_pack_act(x, (size_t)cols, NULL, nt, cols, pk, g0, g1);
        else if (j->rt)
            hm_amx_pack_act_rt(x, (size_t)cols, NULL, nt, cols, pk, g0, g1);
        else
            hm_amx_pack_act(j->mats[0].type, x, (size_t)cols, NULL, nt, cols, pk, g0, g1);
    }
#else
    (void)ith, (void)nth, (void)arg;
#endif
}

static void kwpack_task(int ith, int nth, void *arg) {
#if defined(__x86_64__)
    kjob *j = arg;
    for (int m = ith; m < j->n_mats; m += nth) {
        const hm_matrix *w = &j->mats[m];
        (j->rt ? hm_amx_wpack_vnni : hm_amx_wpack)(
            w->type, w->data, w->row_bytes, w->rows, w->cols, 0, (w->rows + 31) / 32,
            j->wpack + (size_t)m * j->wpack_bytes, j->scratch[ith]);
    }
#else
    (void)ith, (void)nth, (void)arg;
#endif
}

void cli_bench_types(char *buf, size_t size) {
    const hm_cpu_ops *ops;
    size_t n = 0;
    if (size) buf[0] = 0;
    if (hm_cpu_ops_get(&ops) != HM_OK) return;
    for (uint32_t t = 0; t < HM_TYPE_COUNT && n < size; t++)
        if (hm_synth_supported(t) && hm_vec_dot_for(ops, t))
            n += (size_t)snprintf(buf + n, size - n, "%s%s", n ? ", " : "", hm_type_name(t));
}

/* the options of bench kernels */
typedef struct {
    const char *type_name;
    long rows, cols, threads, tokens[16];
    int n_tokens;
    bool repack, unswapped, sweep_on;
    size_t gib, job_bytes;
} kopts;

/* everything a run of bench kernels sets up, and frees at the end (kfree) */
typedef struct {
    kopts o;
    int type;
    const hm_cpu_ops *ops;
    hm_pool *pool;
    size_t mb; /* bytes per matrix */
    int n_mats;
    hm_membw_result bw;
    hm_large wbuf, wpbuf;
    hm_matrix *mats;
    long max_tok;
    size_t xb, xbr;
    uint8_t *xq, *xqr;
    float *x, *y, *yref;
    hm_work_slot *work;
    cli_read_sink *sinks;
    hm_membw_sweep *sweep;
    kjob job;
    void **scratch; /* [nth] per-thread scratch of the tile paths, NULL when none */
    bool float_w;
    double peak;
} kbench;

/* one token count's passes: the kernel's best, and the pairs with their reads */
typedef struct {
    int passes;
    bool paired;
    double best, ratio[KPAIRED], rsec[KPAIRED];
    size_t rbytes;
} krow;

/* the options into *o; -1 to go on, else the exit code */
static int kparse(int argc, char **argv, kopts *o) {
    *o = (kopts){.type_name = "q4_k",
                 .rows = 768,
                 .cols = 2048,
                 .tokens = {1, 4, 8, 64, 512},
                 .n_tokens = 5,
                 .sweep_on = true,
                 .gib = (size_t)1 << 30};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--type")) {
            if (!v) return cli_bad_value("bench kernels", a, v, "a weight type (q4_k, bf16, ...)");
            o->type_name = argv[++i];
        } else if (!strcmp(a, "--repack"))
            o->repack = true;
        else if (!strcmp(a, "--unswapped")) /* A/B: the repacked kernel of the dense path */
            o->unswapped = true;
        else if (!strcmp(a, "--no-sweep"))
            o->sweep_on = false;
        else if (!strcmp(a, "--rows") || !strcmp(a, "--cols")) {
            if (!cli_parse_int(v, 1, 1 << 20, a[2] == 'r' ? &o->rows : &o->cols))
                return cli_bad_value("bench kernels", a, v, "a count 1..1048576");
            i++;
        } else if (!strcmp(a, "--threads")) {
            if (!cli_parse_int(v, 1, 4096, &o->threads))
                return cli_bad_value("bench kernels", a, v, "a thread count 1..4096");
            i++;
        } else if (!strcmp(a, "--bytes")) {
            if (!cli_parse_size(v, &o->gib) || o->gib < (1 << 20))
                return cli_bad_value("bench kernels", a, v, "a size of at least 1M (64M, 2G)");
            i++;
        } else if (!strcmp(a, "--tokens")) {
            if ((o->n_tokens = cli_parse_list(v, o->tokens, 16)) < 1)
                return cli_bad_value("bench kernels", a, v,
                                     "1 to 16 token counts 1..65536, comma-separated (1,8,64)");
            i++;
        } else if (!strcmp(a, "--job-bytes")) {
            if (!cli_parse_size(v, &o->job_bytes) || o->job_bytes < 1)
                return cli_bad_value("bench kernels", a, v, "a size (21M: one decode layer)");
            i++;
        } else
            return cli_usage_error("bench kernels: unknown option '%s' (--type T --rows R --cols C "
                                   "--tokens 1,8,64 --threads N --bytes SIZE --job-bytes SIZE "
                                   "--repack --unswapped --no-sweep)",
                                   a);
    }
    return -1;
}

/* the type and shape checked, the pool, the memory checked, the configuration's line and the
 * bandwidth; -1 to go on, else the exit code (nothing left to free) */
static int kstart(kbench *b) {
    const kopts *o = &b->o;
    const long rows = o->rows, cols = o->cols;
    const int type = b->type = hm_type_from_name(o->type_name);
    if (hm_cpu_ops_get(&b->ops) != HM_OK)
        return cli_usage_error("bench kernels: %s", hm_last_error());
    const hm_cpu_ops *ops = b->ops;
    if (type < 0 || !hm_synth_supported((uint32_t)type) || !hm_vec_dot_for(ops, (uint32_t)type)) {
        char names[512];
        cli_bench_types(names, sizeof names);
        return cli_usage_error("bench kernels: no kernel for type '%s' (types: %s)", o->type_name,
                               names);
    }
    hm_matrix probe;
    if (hm_matrix_init(&probe, (uint32_t)type, NULL, rows, cols) != HM_OK)
        return cli_usage_error("bench kernels: %s", hm_last_error());
    hm_pool_params pp = hm_pool_default_params();
    pp.n_threads = (int)o->threads;
    pp.pin_caller = true;
    if (hm_pool_create(&pp, &b->pool) != HM_OK) {
        fprintf(stderr, "hmoe bench kernels: %s\n", hm_last_error());
        return 1;
    }
    const size_t mb = b->mb = probe.row_bytes * (size_t)rows;
    const int n_mats = b->n_mats = (int)((o->gib + mb - 1) / mb);
    uint64_t need = (uint64_t)mb * (uint64_t)n_mats; /* the weights, and with --repack their copy */
#if defined(__x86_64__)
    if (o->repack && hm_i8_matmul_ok(ops) && hm_dequantize_supported((uint32_t)type) &&
        type != HM_TYPE_F32 && type != HM_TYPE_F16 && type != HM_TYPE_BF16 &&
        type != HM_TYPE_FP8_B128) /* the int8 copy, as below */
        need += (uint64_t)hm_amx_wpack_bytes(rows, cols) * (uint64_t)n_mats;
#endif
    if (cli_check_memory("bench kernels", "the matrices (--bytes)", need, NULL)) {
        hm_pool_free(b->pool);
        return 1;
    }
    printf("bench kernels: %s %ld x %ld (%.2f MB per matrix), %d distinct matrices (%.2f GiB), "
           "kernel variant %s, %d threads\n",
           hm_type_name((uint32_t)type), rows, cols, (double)mb * 1e-6, n_mats,
           (double)mb * n_mats / (1 << 30), ops->name, hm_pool_size(b->pool));
    hm_membw_params bp = hm_membw_default_params();
    bp.pool = b->pool;
    bp.passes = 9;
    if (hm_membw_read(&bp, &b->bw) != HM_OK) {
        fprintf(stderr, "hmoe bench kernels: %s\n", hm_last_error());
        hm_pool_free(b->pool);
        return 1;
    }
    printf(
        "roofline: same-run streaming read %.1f GB/s (median of 9 passes; best %.1f, %s kernel); "
        "matvec (<= 4 tokens) is bandwidth bound, larger token counts report GOP/s\n",
        b->bw.median_gbs, b->bw.best_gbs, b->bw.kernel);
    return -1;
}

/* the weights, activations, outputs, claims and sweep, and the job over them; -1 to go on, else
 * the exit code */
static int kalloc(kbench *b) {
    const kopts *o = &b->o;
    const long rows = o->rows, cols = o->cols;
    const int type = b->type, n_mats = b->n_mats;
    const hm_cpu_ops *ops = b->ops;
    hm_pool *pool = b->pool;
    b->mats = calloc((size_t)n_mats, sizeof *b->mats);
    long max_tok = 1;
    for (int k = 0; k < o->n_tokens; k++) max_tok = o->tokens[k] > max_tok ? o->tokens[k] : max_tok;
    b->max_tok = max_tok;
    /* the activations for the variant benchmarked, and for the reference (the layouts may
     * differ: hm_act_type_for) */
    const size_t xb = b->xb = hm_act_bytes_for(ops, (uint32_t)type, cols),
                 xbr = b->xbr = hm_act_bytes_for(&hm_ops_ref, (uint32_t)type, cols);
    b->xq = malloc(xb * (size_t)max_tok), b->xqr = malloc(xbr * (size_t)max_tok);
    b->x = malloc(sizeof(float) * (size_t)(cols * max_tok));
    /* outputs: each matrix of a pass into its own rows, as a layer's matrices would (with one
     * shared y, threads on different matrices would write the same rows at once); above 4
     * tokens at most ~4 x the bytes of distinct weights' rows (see kmats), up to 4 tokens 4
     * bytes per row and token next to the row's weights (1-3% of the bytes at expert shapes) */
    size_t y_floats = 0;
    for (int k = 0; k < o->n_tokens; k++) {
        const size_t f = (size_t)rows * (size_t)o->tokens[k] * (size_t)kmats(n_mats, o->tokens[k]);
        y_floats = f > y_floats ? f : y_floats;
    }
    b->y = hm_malloc_aligned(sizeof(float) * y_floats, 64, "outputs"); /* as a model's */
    b->yref = malloc(sizeof(float) * (size_t)(rows * 4));
    b->work = hm_calloc_aligned((size_t)hm_pool_size(pool), sizeof(hm_work_slot), 64, "claims");
    b->sinks =
        hm_calloc_aligned((size_t)hm_pool_size(pool), sizeof(cli_read_sink), 64, "read sinks");
    if (!b->mats || !b->xq || !b->xqr || !b->x || !b->y || !b->yref || !b->work || !b->sinks ||
        hm_large_alloc(b->mb * (size_t)n_mats, true, "weights", &b->wbuf) != HM_OK) {
        fprintf(stderr, "hmoe bench kernels: out of memory\n");
        hm_pool_free(pool);
        return 1;
    }
    if (o->sweep_on && hm_membw_sweep_create(pool, ops, 0, &b->sweep) != HM_OK) {
        fprintf(stderr, "hmoe bench kernels: %s (--no-sweep runs without)\n", hm_last_error());
        hm_pool_free(pool);
        return 1;
    }
    for (int m = 0; m < n_mats; m++)
        hm_matrix_init(&b->mats[m], (uint32_t)type, (uint8_t *)b->wbuf.ptr + (size_t)m * b->mb,
                       rows, cols);
    uint64_t seed = 7;
    for (long t = 0; t < max_tok; t++) {
        float *xt = b->x + (size_t)t * (size_t)cols;
        for (long i = 0; i < cols; i++)
            xt[i] = (float)((int64_t)(hm_rng_next(&seed) % 2001) - 1000) / 1000.0f;
        hm_act_convert_for(ops, (uint32_t)type, xt, b->xq + (size_t)t * xb, cols);
        hm_act_convert_for(&hm_ops_ref, (uint32_t)type, xt, b->xqr + (size_t)t * xbr, cols);
    }
    b->job = (kjob){.pool = pool,
                    .dot = hm_vec_dot_for(ops, (uint32_t)type),
                    .dotn = hm_vec_dot_n_for(ops, (uint32_t)type),
                    .d46 = hm_vec_dot_46_for(ops, (uint32_t)type),
                    .mats = b->mats,
                    .n_mats = n_mats,
                    .n_tok = 1,
                    .xq = b->xq,
                    .xb = xb,
                    .y = b->y,
                    .seed = 11,
                    .x = b->x,
                    .ops = ops,
                    .work = b->work,
                    .sinks = b->sinks,
                    .job_mats = o->job_bytes ? (int)((o->job_bytes + b->mb - 1) / b->mb) : 0};
    b->float_w = type == HM_TYPE_F32 || type == HM_TYPE_F16 || type == HM_TYPE_BF16 ||
                 type == HM_TYPE_FP8_B128;
    return -1;
}

/* the matmul path for more than 4 tokens chosen (its scratch and packed activations made), and
 * its line */
static void kmatmul_path(kbench *b) {
#if defined(__x86_64__)
    const int type = b->type;
    const long cols = b->o.cols;
    const hm_cpu_ops *ops = b->ops;
    kjob *job = &b->job;
    /* AMX: tile matmul for more than 4 tokens: int8 for integer formats; BF16 tiles for
     * BF16/F16/FP8 (hm_nn_matmul's opt-in HM_NN_BF16_TILES path); other float weights run the
     * exact kernels, as they do in a model */
    job->bf16 = ops->isa == HM_ISA_AMX &&
                (type == HM_TYPE_BF16 || type == HM_TYPE_F16 || type == HM_TYPE_FP8_B128);
    if (job->bf16) {
        b->scratch = calloc((size_t)hm_pool_size(b->pool), sizeof(void *));
        for (int t = 0; b->scratch && t < hm_pool_size(b->pool); t++)
            b->scratch[t] = malloc(hm_amx_bf16_scratch_bytes(cols));
        job->packed = malloc(kpacked_bytes(job, b->o.tokens, b->o.n_tokens));
        printf("matmul (> 4 tokens): AMX BF16 tiles (TDPBF16PS, K = 32, 32 rows x 32 tokens per "
               "step, float32 sums; activations rounded to bf16 and packed once per token set, "
               "untimed; weights copied per 32-row unit; in a model only with --bf16-tiles)\n");
        b->o.repack = false;
    } else if (b->float_w) {
        /* as hm_nn_matmul and the expert engine run float weights by default */
        printf("matmul (> 4 tokens): the exact per-row kernels, 4 tokens per pass over the weights "
               "(float weights never take the int8 path)\n");
    } else if (hm_i8_matmul_ok(ops) && hm_dequantize_supported((uint32_t)type)) {
        b->scratch = calloc((size_t)hm_pool_size(b->pool), sizeof(void *));
        for (int t = 0; b->scratch && t < hm_pool_size(b->pool); t++)
            b->scratch[t] = malloc(hm_amx_scratch_bytes((uint32_t)type, cols));
        job->packed = malloc(kpacked_bytes(job, b->o.tokens, b->o.n_tokens));
        printf(
            "matmul (> 4 tokens): %s; weights and activations int8 per 256 values; activations "
            "packed once per token set, untimed); weights %s\n",
            ops->isa == HM_ISA_AMX ? "AMX INT8 tiles (TDPBSSD, K = 64, 32 rows x 32 tokens per step"
                                   : "AVX-512 VNNI (VPDPBUSD, 4 rows x 32 tokens per step",
            !b->o.repack ? "converted to int8 on every call"
            : ops->i8_matmul_packed_rt && !b->o.unswapped
                ? "repacked once to int8 tile units in the VNNI layout, activations as row tiles "
                  "(the swapped operands of the expert engine; untimed; the GB/s column still "
                  "counts the original bytes)"
                : "repacked once to int8 tile units (untimed; the GB/s column still counts the "
                  "original bytes)");
    }
#else
    (void)b;
#endif
}

/* the ISA peak, the weights filled and with --repack repacked; -1 to go on, else the exit code */
static int kprepare(kbench *b) {
    const hm_cpu_ops *ops = b->ops;
    hm_pool *pool = b->pool;
    kjob *job = &b->job;
    job->scratch = b->scratch;
    /* the matmul rows' roofline: the peak of the instruction they run, measured now */
    const hm_peak_kind pk = job->bf16 ? HM_PEAK_BF16 : b->float_w ? HM_PEAK_F32 : HM_PEAK_I8;
    const double peak = b->peak = b->max_tok > 4 ? kpeak(pool, ops, pk) : 0;
    if (peak > 0)
        printf("roofline (> 4 tokens): same-run ISA peak %.2f TOPS (%s: the multiply-add on "
               "independent accumulators with no loads, all %d threads at once, best of 3); the "
               "%% of peak column compares GOP/s with it\n",
               peak, ops->peak_names[pk], hm_pool_size(pool));
    else if (b->max_tok > 4)
        printf("roofline (> 4 tokens): no ISA peak for the %s variant\n", ops->name);
    hm_pool_run(pool, kfill_task, job); /* first touch by the threads that will read */
#if defined(__x86_64__)
    if (b->o.repack && b->scratch) {
        job->wpack_bytes = (hm_amx_wpack_bytes(b->o.rows, b->o.cols) + 63) & ~(size_t)63;
        if (hm_large_alloc(job->wpack_bytes * (size_t)b->n_mats, true, "repacked weights",
                           &b->wpbuf) != HM_OK) {
            fprintf(stderr, "hmoe bench kernels: %s\n", hm_last_error());
            return 1;
        }
        job->wpack = b->wpbuf.ptr;
        job->rt = ops->i8_matmul_packed_rt != NULL && !b->o.unswapped;
        uint64_t t0 = hm_time_ns();
        hm_pool_run(pool, kwpack_task, job);
        printf("repacked %d matrices (%.2f GiB) in %.2f s\n", b->n_mats,
               (double)job->wpack_bytes * b->n_mats / (1 << 30),
               (double)(hm_time_ns() - t0) * 1e-9);
    }
#endif
    if (b->o.repack && !job->wpack) printf("--repack: no AMX on this machine, nothing repacked\n");
    cli_print_huge_pages("");
    return -1;
}

/* the variant against the reference on the first matrix, up to 4 tokens; 0, or 1 when it fails */
static int kvalidate(kbench *b) {
    const long rows = b->o.rows;
    const int vt = b->max_tok < 4 ? (int)b->max_tok : 4;
    hm_matvec_rows(hm_vec_dot_for(&hm_ops_ref, (uint32_t)b->type), NULL, NULL, &b->mats[0], b->xqr,
                   b->xbr, vt, b->yref, (size_t)rows, 0, rows);
    b->job.n_mats = 1;
    b->job.n_tok = vt;
    krun(b->pool, &b->job);
    double ymax = 1e-9, err = 0;
    for (long k = 0; k < rows * vt; k++) ymax = fmax(ymax, fabs(b->yref[k]));
    for (long k = 0; k < rows * vt; k++) err = fmax(err, fabs((double)b->y[k] - b->yref[k]));
    printf("validation: max |%s - ref| = %.3g (%.2g of max |y|) %s\n", b->ops->name, err,
           err / ymax, err <= 2e-5 * ymax ? "ok" : "FAILED");
    return err > 2e-5 * ymax;
}

/* the notes on the columns, and the table's header */
static void kprint_header(const kbench *b) {
    const int job_mats = b->job.job_mats, n_mats = b->n_mats;
    printf("%% of read (up to 4 tokens): each of %d passes paired with a read of the same weight "
           "bytes by the same threads and claims (the membw loads, right before or after it, in "
           "turn); the median of the %d pairs' ratios. It follows the machine's bandwidth from "
           "moment to moment, which the %% of bw (the membw passes before the runs) does not.\n",
           KPAIRED, KPAIRED);
    if (b->sweep)
        printf("cache sweep: before each timed pass up to 4 tokens (the kernel's and its read), a "
               "read of %.0f MiB of other memory, so neither finds the other's bytes in the "
               "caches (--no-sweep: none)\n",
               (double)hm_membw_sweep_bytes(b->sweep) / (1 << 20));
    if (job_mats && job_mats < n_mats)
        printf("jobs (up to 4 tokens): each pass, and its paired read, as %d jobs of %d matrices "
               "(%.1f MB; --job-bytes) one after another, as a model's layers are\n",
               (n_mats + job_mats - 1) / job_mats, job_mats, (double)b->mb * job_mats * 1e-6);
    printf("%7s %8s %12s %10s %9s %10s %9s %10s %10s\n", "tokens", "matrices", "us/matrix", "GB/s",
           "% of bw", "GOP/s", "% of peak", "read GB/s", "% of read");
}

/* the passes of n_tok tokens into *r (up to 4 tokens each paired with a read); 0, or 1 when a
 * sweep failed */
static int kmeasure(kbench *b, long n_tok, krow *r) {
    kjob *job = &b->job;
    const int nth = hm_pool_size(b->pool);
    int rc = 0;
    job->n_tok = (int)n_tok;
    /* large token counts are compute bound: fewer matrices keep a pass short */
    job->n_mats = kmats(b->n_mats, n_tok);
    job->y_mat = (size_t)(b->o.rows * n_tok);
#if defined(__x86_64__)
    /* once per activation set, as a layer would: not part of the per-matrix time */
    if (job->packed && job->n_tok > 4) {
        kblocks(job, job->n_tok);
        hm_pool_run(b->pool, kpack_task, job);
    }
#endif
    krun(b->pool, job); /* warm-up pass */
    *r = (krow){.paired = job->n_tok <= 4, .best = 1e30};
    r->passes = r->paired ? KPAIRED : 3;
    for (int pass = 0; pass < r->passes; pass++) {
        for (int half = 0; half < 2; half++) {
            /* the read first in odd passes: neither side always follows the other */
            const bool read = r->paired && half == (pass % 2 == 0);
            if (!r->paired && half) break;
            job->read_only = read;
            if (read) memset(job->sinks, 0, sizeof(cli_read_sink) * (size_t)nth);
            if (r->paired && b->sweep && hm_membw_sweep_run(b->sweep) != HM_OK) {
                fprintf(stderr, "hmoe bench kernels: %s\n", hm_last_error());
                rc = 1;
            }
            uint64_t t0 = hm_time_ns();
            krun(b->pool, job);
            double s = (double)(hm_time_ns() - t0) * 1e-9;
            if (read) {
                r->rbytes = 0;
                for (int t = 0; t < nth; t++) r->rbytes += job->sinks[t].bytes;
                r->rsec[pass] = s;
            } else {
                r->ratio[pass] = s; /* the kernel's time, made a ratio in kprint_row */
                if (s < r->best) r->best = s;
            }
        }
        job->read_only = false;
    }
    return rc;
}

/* a token count's row (after kmeasure, whose job.n_mats it reads) */
static void kprint_row(const kbench *b, long n_tok, krow *r) {
    const int n_mats = b->job.n_mats;
    const double best = r->best;
    double gbs = (double)b->mb * n_mats / best * 1e-9;
    double gops =
        2.0 * (double)b->o.rows * (double)b->o.cols * (double)n_tok * n_mats / best * 1e-9;
    printf("%7ld %8d %12.2f %10.1f %8.1f%% %10.1f", n_tok, n_mats, best / n_mats * 1e6, gbs,
           100.0 * gbs / b->bw.median_gbs, gops);
    if (n_tok > 4 && b->peak > 0)
        printf(" %8.1f%%", 100.0 * gops * 1e-3 / b->peak);
    else
        printf(" %9s", "-");
    /* per pair: (kernel bytes / kernel time) / (read bytes / read time) */
    for (int p = 0; r->paired && r->rbytes && p < r->passes; p++)
        r->ratio[p] = (double)b->mb * n_mats / r->ratio[p] / ((double)r->rbytes / r->rsec[p]);
    cli_print_read_columns(r->ratio, r->rsec, r->paired ? r->passes : 0, r->rbytes);
}

/* the tile path against the reference, on the first matrix, for the largest token count (more
 * than 4); 0, or 1 when it fails */
static int kvalidate_matmul(kbench *b) {
    const long rows = b->o.rows, max_tok = b->max_tok;
    kjob *job = &b->job;
    job->n_mats = 1;
    job->n_tok = (int)max_tok;
    if (max_tok <= 4) return 0;
    float *yr = malloc(sizeof(float) * (size_t)(rows * max_tok));
    hm_matvec_rows(hm_vec_dot_for(&hm_ops_ref, (uint32_t)b->type), NULL, NULL, &b->mats[0], b->xqr,
                   b->xbr, (int)max_tok, yr, (size_t)rows, 0, rows);
    kblocks(job, job->n_tok);
    hm_pool_run(b->pool, kpack_task, job);
    /* 3.4e38 in every float: a row the pass misses fails the check */
    memset(b->y, 0x7f, sizeof(float) * (size_t)(rows * max_tok));
    krun(b->pool, job);
    double emax = 0, ym = 1e-9;
    for (long k = 0; k < rows * max_tok; k++) {
        ym = fmax(ym, fabs(yr[k]));
        emax = fmax(emax, fabs((double)b->y[k] - yr[k]));
    }
    /* int8 (per 256 values) or bf16 activations vs the ref's activation format: 1% */
    printf("validation (%s matmul, %ld tokens): max |%s - ref| = %.3g (%.2g of max |y|, "
           "tolerance 1e-2) %s\n",
           job->bf16 ? "bf16 tile" : "int8", max_tok, b->ops->name, emax, emax / ym,
           emax <= 1e-2 * ym ? "ok" : "FAILED");
    free(yr);
    return emax > 1e-2 * ym;
}

static void kfree(kbench *b) {
    if (b->scratch) {
        for (int t = 0; t < hm_pool_size(b->pool); t++) free(b->scratch[t]);
        free(b->scratch);
        free(b->job.packed);
        hm_large_free(&b->wpbuf);
    }
    hm_membw_sweep_free(b->sweep);
    hm_large_free(&b->wbuf);
    free(b->mats);
    free(b->xq);
    free(b->xqr);
    free(b->x);
    hm_free(b->y);
    free(b->yref);
    hm_free(b->work);
    hm_free(b->job.sinks);
    hm_pool_free(b->pool);
}

static int bench_kernels(int argc, char **argv) {
    kbench b = {0};
    int rc = kparse(argc, argv, &b.o);
    if (rc < 0) rc = kstart(&b);
    if (rc < 0) rc = kalloc(&b);
    if (rc < 0) {
        kmatmul_path(&b);
        rc = kprepare(&b);
    }
    if (rc >= 0) return rc;
    rc = kvalidate(&b);
    kprint_header(&b);
    for (int k = 0; k < b.o.n_tokens; k++) {
        krow r;
        if (kmeasure(&b, b.o.tokens[k], &r)) rc = 1;
        kprint_row(&b, b.o.tokens[k], &r);
    }
    if (b.scratch && kvalidate_matmul(&b)) rc = 1;
    kfree(&b);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    if (argc < 2)
        return cli_usage_error(
            "bench: which one? pool | membw | kernels | moe | e2e | tokenizer | cuda");
    if (!strcmp(argv[1], "pool")) return bench_pool(argc, argv);
    if (!strcmp(argv[1], "membw")) return bench_membw(argc, argv);
    if (!strcmp(argv[1], "kernels")) return bench_kernels(argc, argv);
    if (!strcmp(argv[1], "moe")) return bench_moe(argc, argv);
    if (!strcmp(argv[1], "e2e")) return bench_e2e(argc, argv);
    if (!strcmp(argv[1], "tokenizer")) return bench_tokenizer(argc - 1, argv + 1);
    if (!strcmp(argv[1], "cuda")) return bench_cuda(argc, argv);
    return cli_usage_error(
        "bench: unknown benchmark '%s' (pool | membw | kernels | moe | e2e | tokenizer | cuda)",
        argv[1]);
}
