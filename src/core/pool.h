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

#include <stdbool.h>

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
 * ith = 0; in an async pool it is submit + wait. */
void hm_pool_run(hm_pool *pool, hm_task_fn fn, void *arg);

/* Async pools only: start fn on all workers and return at once / block until it is done. */
hm_status hm_pool_submit(hm_pool *pool, hm_task_fn fn, void *arg);
void hm_pool_wait(hm_pool *pool);
bool hm_pool_busy(const hm_pool *pool); /* a submitted job has not been waited for */

/* Inside a job: returns once all nth participants have called it. */
void hm_pool_barrier(hm_pool *pool);

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
