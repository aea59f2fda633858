/* pool.h - persistent thread pool: pinned workers, fork/join of fn(ith, nth, arg), an in-job
 * barrier, spin-then-sleep waiting, and one sub-pool per NUMA node (hm_poolset).
 *
 * Threading rules: a pool is driven by one thread at a time (the "caller"); hm_pool_run, submit
 * and wait must not be called concurrently on the same pool, nor from inside one of its jobs.
 * hm_pool_barrier is called only from inside a job, by every one of its nth participants.
 * Lifetime: hm_pool_free joins the workers; it must not run while a job is in flight.
 * Placement: the caller of an async pool spins while it waits (up to spin_us); give it a CPU that
 * no worker is pinned to, or it steals that worker's time slice until it falls asleep. */
#ifndef HM_CORE_POOL_H
#define HM_CORE_POOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

/* A job: called once for every ith in [0, nth). */
typedef void (*hm_task_fn)(int ith, int nth, void *arg);

typedef struct hm_pool_params {
    int n_threads;   /* participants per job; 0 = one per physical core (of numa_node if >= 0) */
    const int *cpus; /* [n_threads] logical CPU for participant i; NULL = physical cores in
                        topology order, then SMT siblings */
    bool pin;        /* pin workers (and, with pin_caller, the creating thread) to their CPUs */
    bool pin_caller; /* sync pools: pin the creating thread to the CPU of participant 0 */
    bool async;      /* false: the caller is participant 0 of hm_pool_run (lowest latency).
                        true: every participant is a worker thread; hm_pool_submit returns at
                        once and hm_pool_wait joins */
    int spin_us;     /* how long an idle worker or a waiting caller spins before it sleeps on a
                        futex; < 0: HMOE_SPIN_US if set, else 200 */
    int numa_node;   /* < 0: any node; else the default CPU list is that node's cores */
} hm_pool_params;

typedef struct hm_pool hm_pool;

hm_pool_params hm_pool_default_params(void);

/* Starts the workers. Fails with a message naming the bad parameter (more threads than 4096,
 * unknown node, a CPU outside the affinity mask, thread creation failure). */
hm_status hm_pool_create(const hm_pool_params *params, hm_pool **out);
void hm_pool_free(hm_pool *pool); /* NULL is a no-op */

int hm_pool_size(const hm_pool *pool);         /* nth of every job */
int hm_pool_cpu(const hm_pool *pool, int ith); /* CPU participant ith is pinned to, -1 if none */
int hm_pool_spin_us(const hm_pool *pool);

/* Runs fn on all participants and returns when all have finished. In a sync pool the caller runs
 * ith = 0; in an async pool it is submit + wait (after waiting for a job still in flight). */
void hm_pool_run(hm_pool *pool, hm_task_fn fn, void *arg);

/* Async pools only: start fn on all workers and return at once / block until it is done. */
hm_status hm_pool_submit(hm_pool *pool, hm_task_fn fn, void *arg);
void hm_pool_wait(hm_pool *pool);
bool hm_pool_busy(const hm_pool *pool); /* a submitted job has not been waited for */

/* Idle work for the workers between jobs (prefetching what the next job reads, while the memory
 * would otherwise idle): set before hm_pool_run or hm_pool_submit, it belongs to that job only.
 * Each worker, once its share of the job is done, calls fn(ith, nth, arg, step) for step = 0,
 * 1, 2, ... until fn returns false or the next job is dispatched; it checks for the next job
 * between calls, so each call should be short (about a microsecond). The participant 0 of a sync
 * pool (the caller) does not run it. arg must stay valid until the next job has finished. */
typedef bool (*hm_idle_fn)(int ith, int nth, void *arg, int step);
void hm_pool_set_idle(hm_pool *pool, hm_idle_fn fn, void *arg);

/* Inside a job: returns once all nth participants have called it. */
void hm_pool_barrier(hm_pool *pool);

/* A barrier of n threads with the pool's spin-then-sleep wait, for a group of a job's
 * participants that synchronize among themselves (hm_pool_barrier is the whole job's): each of
 * the n calls hm_barrier_wait, which returns once all n have. Reusable; init before the job. */
typedef struct hm_barrier {
    _Alignas(64) atomic_uint phase; /* futex word */
    atomic_int count;
    atomic_int sleepers;
    int n;
    uint64_t spin_ns;
} hm_barrier;
void hm_barrier_init(hm_barrier *b, int n, int spin_us);
void hm_barrier_wait(hm_barrier *b);

/* Counters of the jobs run through hm_pool_run since creation or the last reset, as the caller
 * sees them: run_ns from dispatch to the end of the join; own_ns the part of it a sync pool's
 * caller spent in its own share (participant 0); run_ns - own_ns is then the dispatch and the
 * wait for the slowest participant. Kept by the caller (one thread drives a pool), ~3 clock
 * reads per job. */
typedef struct hm_pool_stats {
    uint64_t jobs, run_ns, own_ns;
} hm_pool_stats;
void hm_pool_stats_get(const hm_pool *pool, hm_pool_stats *out);
void hm_pool_stats_reset(hm_pool *pool);

/* ---- work ranges: contiguous shares with stealing ---- */

/* Units [0, n) of a job split into one contiguous range per participant: each takes its own
 * units from the front, in order (long sequential streams for the hardware prefetchers), and
 * when its range is empty takes single units from the back of the others' ranges (a slowed
 * participant is relieved). One slot per participant, each on its own cache line; n < 2^32. */
typedef struct hm_work_slot {
    _Alignas(64) atomic_ullong fb; /* front << 32 | back: units [front, back) left */
} hm_work_slot;

static inline void hm_work_init(hm_work_slot *s, int nth, int64_t n) {
    for (int i = 0; i < nth; i++) {
        const uint64_t a = (uint64_t)(n * i / nth), b = (uint64_t)(n * (i + 1) / nth);
        atomic_store_explicit(&s[i].fb, a << 32 | b, memory_order_relaxed);
    }
}

/* The next unit for participant ith, or -1 when every range is empty. */
static inline int64_t hm_work_next(hm_work_slot *s, int nth, int ith) {
    uint64_t v = atomic_load_explicit(&s[ith].fb, memory_order_relaxed);
    while ((v >> 32) < (v & 0xffffffffu))
        if (atomic_compare_exchange_weak_explicit(&s[ith].fb, &v, v + ((uint64_t)1 << 32),
                                                  memory_order_relaxed, memory_order_relaxed))
            return (int64_t)(v >> 32);
    for (int k = 1; k < nth; k++) {
        hm_work_slot *o = &s[(ith + k) % nth];
        v = atomic_load_explicit(&o->fb, memory_order_relaxed);
        while ((v >> 32) < (v & 0xffffffffu))
            if (atomic_compare_exchange_weak_explicit(&o->fb, &v, v - 1, memory_order_relaxed,
                                                      memory_order_relaxed))
                return (int64_t)(v & 0xffffffffu) - 1;
    }
    return -1;
}

/* ---- one sub-pool per NUMA node ---- */

typedef struct hm_poolset_params {
    int threads_per_node; /* 0 = every physical core of the node */
    int emulate_nodes;    /* > 0: ignore real NUMA and split the cores into this many groups */
    bool pin;
    bool pin_caller; /* sync sets: pin the caller to sub-pool 0's first CPU */
    bool async;      /* false: the caller is participant 0 of sub-pool 0 in hm_poolset_run */
    int spin_us;
} hm_poolset_params;

typedef struct hm_poolset hm_poolset;

hm_poolset_params hm_poolset_default_params(void);
hm_status hm_poolset_create(const hm_poolset_params *params, hm_poolset **out);
void hm_poolset_free(hm_poolset *set);
int hm_poolset_count(const hm_poolset *set);
hm_pool *hm_poolset_pool(hm_poolset *set, int i);
int hm_poolset_node(const hm_poolset *set, int i); /* NUMA node id of sub-pool i (-1 emulated) */

/* Runs fn on every sub-pool at once; sub-pool i's participants get args[i]. Returns when all are
 * done. */
void hm_poolset_run(hm_poolset *set, hm_task_fn fn, void *const *args);
/* Async sets only. */
hm_status hm_poolset_submit(hm_poolset *set, hm_task_fn fn, void *const *args);
void hm_poolset_wait(hm_poolset *set);

#endif
