/* pool.c - persistent pinned thread pool with spin-then-futex waiting. */
#include "core/pool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/cpu.h"
#include "core/log.h"
#include "core/timer.h"

#define HM_POOL_MAX_THREADS 4096
#define DEFAULT_SPIN_US     200

typedef struct worker {
    hm_pool *pool;
    int ith;
    int cpu;
    pthread_t thread;
} worker;

struct hm_pool {
    /* written by the caller once per job, read by every worker: one line */
    _Alignas(64) atomic_uint gen; /* futex word: bumped to start a job */
    hm_task_fn fn;
    void *arg;
    hm_idle_fn idle_fn; /* the job's idle work (hm_pool_set_idle) */
    void *idle_arg;
    atomic_int stop;
    /* workers count down; the last one publishes done_gen */
    _Alignas(64) atomic_int pending;
    _Alignas(64) atomic_uint done_gen; /* futex word: generation of the last finished job */
    atomic_int waiter_sleeping;
    hm_barrier bar;                   /* hm_pool_barrier */
    _Alignas(64) atomic_int sleepers; /* workers asleep on gen */

    int n_threads; /* participants */
    int first_ith; /* 1 for sync pools (caller is 0), 0 for async */
    int n_workers; /* threads spawned */
    bool async;
    bool busy; /* async: submitted, not yet waited */
    uint64_t spin_ns;
    int spin_us;
    int *cpus; /* [n_threads] or NULL when unpinned */
    worker *workers;
    hm_pool_stats stats;  /* the caller's counters (hm_pool_run) */
    hm_idle_fn idle_next; /* set by hm_pool_set_idle for the next dispatch */
    void *idle_next_arg;
};

static long futex_wait(atomic_uint *addr, unsigned val) {
    return syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *addr) {
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Waits until *word != old: spins for spin_ns, then sleeps. *sleepers counts sleeping waiters so
 * that the writer only pays for a futex wake when someone sleeps (both sides use seq_cst, so
 * either the writer sees the sleeper or the sleeper sees the new value). */
static unsigned wait_change(atomic_uint *word, unsigned old, uint64_t spin_ns,
                            atomic_int *sleepers) {
    unsigned v = atomic_load_explicit(word, memory_order_acquire);
    if (v != old) return v;
    if (spin_ns) {
        uint64_t start = hm_time_ns();
        for (unsigned i = 1;; i++) {
            hm_cpu_relax();
            v = atomic_load_explicit(word, memory_order_acquire);
            if (v != old) return v;
            if ((i & 63) == 0 && hm_time_ns() - start > spin_ns) break;
        }
    }
    atomic_fetch_add(sleepers, 1);
    while ((v = atomic_load(word)) == old) futex_wait(word, old);
    atomic_fetch_sub(sleepers, 1);
    return v;
}

static void publish(atomic_uint *word, unsigned v, atomic_int *sleepers) {
    atomic_store(word, v);
    if (atomic_load(sleepers) > 0) futex_wake_all(word);
}

static void *worker_main(void *p) {
    worker *w = p;
    hm_pool *pool = w->pool;
    if (w->cpu >= 0 && hm_thread_pin(w->cpu) != HM_OK)
        HM_WARN("pool worker %d: %s", w->ith, hm_last_error());
    unsigned seen = 0;
    for (;;) {
        unsigned g = wait_change(&pool->gen, seen, pool->spin_ns, &pool->sleepers);
        seen = g;
        if (atomic_load_explicit(&pool->stop, memory_order_acquire)) break;
        pool->fn(w->ith, pool->n_threads, pool->arg);
        /* read before the count down: the caller rewrites them only after the join */
        const hm_idle_fn idle = pool->idle_fn;
        void *idle_arg = pool->idle_arg;
        if (atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel) == 1)
            publish(&pool->done_gen, g, &pool->waiter_sleeping);
        if (idle)
            for (int step = 0; atomic_load_explicit(&pool->gen, memory_order_acquire) == g &&
                               idle(w->ith, pool->n_threads, idle_arg, step);
                 step++) {
            }
    }
    return NULL;
}

hm_pool_params hm_pool_default_params(void) {
    hm_pool_params p;
    memset(&p, 0, sizeof p);
    p.pin = true;
    p.spin_us = -1;
    p.numa_node = -1;
    return p;
}

static int default_spin_us(void) {
    const char *s = getenv("HMOE_SPIN_US");
    if (s && *s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (*end == '\0' && v >= 0 && v <= 10000000) return (int)v;
        HM_WARN("HMOE_SPIN_US='%s' is not a number of microseconds in [0, 10000000]; using %d", s,
                DEFAULT_SPIN_US);
    }
    return DEFAULT_SPIN_US;
}

/* Default CPU order: the physical cores (of one node or all), then their SMT siblings. */
static hm_status default_cpus(int node, int **out, int *n_out) {
    const hm_topology *t = hm_topology_get();
    int *v = malloc(sizeof(int) * (size_t)t->n_cpus);
    if (!v) return hm_errorf(HM_ERR_NO_MEMORY, "pool: out of memory");
    int n = 0;
    if (node >= 0) {
        const hm_numa_node *nd = NULL;
        for (int i = 0; i < t->n_nodes; i++)
            if (t->nodes[i].id == node) nd = &t->nodes[i];
        if (!nd) {
            free(v);
            return hm_errorf(HM_ERR_INVALID_ARG, "pool: NUMA node %d has no usable CPUs", node);
        }
        for (int i = 0; i < nd->n_cores; i++) v[n++] = nd->core_cpus[i];
    } else {
        for (int i = 0; i < t->n_cores; i++) v[n++] = t->core_cpus[i];
    }
    for (int i = 0; i < t->n_cpus; i++)
        if (!t->cpus[i].primary && (node < 0 || t->cpus[i].node == node)) v[n++] = t->cpus[i].cpu;
    *out = v;
    *n_out = n;
    return HM_OK;
}

static int n_primary(int node) {
    const hm_topology *t = hm_topology_get();
    if (node < 0) return t->n_cores;
    for (int i = 0; i < t->n_nodes; i++)
        if (t->nodes[i].id == node) return t->nodes[i].n_cores;
    return 0;
}

hm_status hm_pool_create(const hm_pool_params *params, hm_pool **out) {
    *out = NULL;
    hm_pool_params p = params ? *params : hm_pool_default_params();
    if (p.n_threads < 0 || p.n_threads > HM_POOL_MAX_THREADS)
        return hm_errorf(HM_ERR_INVALID_ARG, "pool: n_threads %d outside [0, %d]", p.n_threads,
                         HM_POOL_MAX_THREADS);
    int *order = NULL, n_order = 0;
    if (!p.cpus) {
        hm_status st = default_cpus(p.numa_node, &order, &n_order);
        if (st != HM_OK) return st;
        if (p.n_threads == 0) p.n_threads = n_primary(p.numa_node);
        if (p.n_threads == 0) p.n_threads = 1;
    } else if (p.n_threads == 0) {
        return hm_errorf(HM_ERR_INVALID_ARG, "pool: an explicit cpu list needs n_threads > 0");
    }

    hm_pool *pool = aligned_alloc(64, hm_align_up(sizeof(hm_pool), 64));
    if (!pool) {
        free(order);
        return hm_errorf(HM_ERR_NO_MEMORY, "pool: out of memory");
    }
    memset(pool, 0, sizeof *pool);
    pool->n_threads = p.n_threads;
    pool->async = p.async;
    pool->first_ith = p.async ? 0 : 1;
    pool->spin_us = p.spin_us < 0 ? default_spin_us() : p.spin_us;
    pool->spin_ns = (uint64_t)pool->spin_us * 1000;
    hm_barrier_init(&pool->bar, p.n_threads, pool->spin_us);
    pool->workers = calloc((size_t)p.n_threads, sizeof(worker));
    if (!pool->workers) goto oom;
    if (p.pin) {
        pool->cpus = malloc(sizeof(int) * (size_t)p.n_threads);
        if (!pool->cpus) goto oom;
        for (int i = 0; i < p.n_threads; i++) {
            int c = p.cpus ? p.cpus[i] : order[i % n_order];
            if (c < 0 || c >= CPU_SETSIZE) {
                free(order);
                hm_pool_free(pool);
                return hm_errorf(HM_ERR_INVALID_ARG, "pool: cpu %d of participant %d is invalid", c,
                                 i);
            }
            pool->cpus[i] = c;
        }
        if (!p.cpus && p.n_threads > n_order)
            HM_WARN("pool: %d threads on %d usable CPUs: threads will share CPUs", p.n_threads,
                    n_order);
    }
    free(order);
    order = NULL;

    if (!p.async && p.pin && p.pin_caller && hm_thread_pin(pool->cpus[0]) != HM_OK)
        HM_WARN("pool: cannot pin caller: %s", hm_last_error());

    for (int ith = pool->first_ith; ith < p.n_threads; ith++) {
        worker *w = &pool->workers[ith];
        w->pool = pool;
        w->ith = ith;
        w->cpu = pool->cpus ? pool->cpus[ith] : -1;
        int rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc != 0) {
            hm_pool_free(pool);
            return hm_errorf_errno(HM_ERR_SYSTEM, rc, "pool: cannot start thread %d of %d", ith,
                                   p.n_threads);
        }
        pool->n_workers++;
    }
    HM_DEBUG("pool: %d participants (%s), %d worker threads, spin %d us", pool->n_threads,
             pool->async ? "async" : "sync", pool->n_workers, pool->spin_us);
    *out = pool;
    return HM_OK;
oom:
    free(order);
    hm_pool_free(pool);
    return hm_errorf(HM_ERR_NO_MEMORY, "pool: out of memory");
}

void hm_pool_free(hm_pool *pool) {
    if (!pool) return;
    if (pool->n_workers > 0) {
        atomic_store(&pool->stop, 1);
        unsigned g = atomic_load(&pool->gen) + 1;
        atomic_store(&pool->gen, g);
        futex_wake_all(&pool->gen);
        for (int ith = pool->first_ith; ith < pool->first_ith + pool->n_workers; ith++)
            pthread_join(pool->workers[ith].thread, NULL);
    }
    free(pool->workers);
    free(pool->cpus);
    free(pool);
}

int hm_pool_size(const hm_pool *pool) {
    return pool->n_threads;
}
int hm_pool_spin_us(const hm_pool *pool) {
    return pool->spin_us;
}

int hm_pool_cpu(const hm_pool *pool, int ith) {
    if (!pool->cpus || ith < 0 || ith >= pool->n_threads) return -1;
    return pool->cpus[ith];
}

void hm_pool_set_idle(hm_pool *pool, hm_idle_fn fn, void *arg) {
    pool->idle_next = fn;
    pool->idle_next_arg = arg;
}

static unsigned dispatch(hm_pool *pool, hm_task_fn fn, void *arg) {
    pool->fn = fn;
    pool->arg = arg;
    pool->idle_fn = pool->idle_next, pool->idle_arg = pool->idle_next_arg;
    pool->idle_next = NULL, pool->idle_next_arg = NULL;
    atomic_store_explicit(&pool->pending, pool->n_workers, memory_order_relaxed);
    unsigned g = atomic_load_explicit(&pool->gen, memory_order_relaxed) + 1;
    publish(&pool->gen, g, &pool->sleepers); /* seq_cst store: fn/arg/pending visible first */
    return g;
}

static void join(hm_pool *pool, unsigned g) {
    unsigned v = atomic_load_explicit(&pool->done_gen, memory_order_acquire);
    while (v != g) v = wait_change(&pool->done_gen, v, pool->spin_ns, &pool->waiter_sleeping);
}

void hm_pool_run(hm_pool *pool, hm_task_fn fn, void *arg) {
    if (pool->async) {
        /* a job still in flight is finished first (submit would refuse, and fn would not run) */
        hm_pool_wait(pool);
        const uint64_t t0 = hm_time_ns();
        if (hm_pool_submit(pool, fn, arg) == HM_OK) hm_pool_wait(pool);
        pool->stats.jobs++;
        pool->stats.run_ns += hm_time_ns() - t0;
        return;
    }
    const uint64_t t0 = hm_time_ns();
    if (pool->n_workers == 0) {
        pool->idle_next = NULL, pool->idle_next_arg = NULL; /* no workers to idle */
        fn(0, 1, arg);
        const uint64_t t1 = hm_time_ns();
        pool->stats.jobs++;
        pool->stats.run_ns += t1 - t0, pool->stats.own_ns += t1 - t0;
        return;
    }
    unsigned g = dispatch(pool, fn, arg);
    const uint64_t t1 = hm_time_ns();
    fn(0, pool->n_threads, arg);
    const uint64_t t2 = hm_time_ns();
    join(pool, g);
    pool->stats.jobs++;
    pool->stats.run_ns += hm_time_ns() - t0, pool->stats.own_ns += t2 - t1;
}

void hm_pool_stats_get(const hm_pool *pool, hm_pool_stats *out) {
    *out = pool->stats;
}

void hm_pool_stats_reset(hm_pool *pool) {
    memset(&pool->stats, 0, sizeof pool->stats);
}

hm_status hm_pool_submit(hm_pool *pool, hm_task_fn fn, void *arg) {
    if (!pool->async)
        return hm_errorf(HM_ERR_INVALID_ARG, "pool: submit needs a pool created with async=true");
    if (pool->busy)
        return hm_errorf(HM_ERR_INVALID_ARG, "pool: submit while the previous job is in flight");
    pool->busy = true;
    dispatch(pool, fn, arg);
    return HM_OK;
}

void hm_pool_wait(hm_pool *pool) {
    if (!pool->busy) return;
    join(pool, atomic_load_explicit(&pool->gen, memory_order_relaxed));
    pool->busy = false;
}

bool hm_pool_busy(const hm_pool *pool) {
    return pool->busy;
}

void hm_barrier_init(hm_barrier *b, int n, int spin_us) {
    atomic_init(&b->phase, 0);
    atomic_init(&b->count, 0);
    atomic_init(&b->sleepers, 0);
    b->n = n;
    b->spin_ns = (uint64_t)(spin_us < 0 ? default_spin_us() : spin_us) * 1000;
}

void hm_barrier_wait(hm_barrier *b) {
    if (b->n <= 1) return;
    unsigned phase = atomic_load(&b->phase);
    if (atomic_fetch_add(&b->count, 1) == b->n - 1) {
        atomic_store(&b->count, 0);
        publish(&b->phase, phase + 1, &b->sleepers);
    } else {
        wait_change(&b->phase, phase, b->spin_ns, &b->sleepers);
    }
}

void hm_pool_barrier(hm_pool *pool) {
    hm_barrier_wait(&pool->bar);
}

/* ---------------------------------------------------------------- poolset */

struct hm_poolset {
    int n;
    hm_pool **pools;
    int *nodes;
    bool async;
};

hm_poolset_params hm_poolset_default_params(void) {
    hm_poolset_params p;
    memset(&p, 0, sizeof p);
    p.pin = true;
    p.spin_us = -1;
    return p;
}

hm_status hm_poolset_create(const hm_poolset_params *params, hm_poolset **out) {
    *out = NULL;
    hm_poolset_params p = params ? *params : hm_poolset_default_params();
    const hm_topology *t = hm_topology_get();
    if (p.emulate_nodes < 0 || p.emulate_nodes > t->n_cores)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "poolset: cannot emulate %d nodes on %d physical cores", p.emulate_nodes,
                         t->n_cores);
    if (p.threads_per_node < 0)
        return hm_errorf(HM_ERR_INVALID_ARG, "poolset: threads_per_node %d < 0",
                         p.threads_per_node);
    hm_poolset *set = calloc(1, sizeof *set);
    if (!set) return hm_errorf(HM_ERR_NO_MEMORY, "poolset: out of memory");
    set->async = p.async;
    set->n = p.emulate_nodes > 0 ? p.emulate_nodes : t->n_nodes;
    set->pools = calloc((size_t)set->n, sizeof(hm_pool *));
    set->nodes = calloc((size_t)set->n, sizeof(int));
    if (!set->pools || !set->nodes) {
        hm_poolset_free(set);
        return hm_errorf(HM_ERR_NO_MEMORY, "poolset: out of memory");
    }
    for (int i = 0; i < set->n; i++) {
        hm_pool_params pp = hm_pool_default_params();
        pp.pin = p.pin;
        pp.spin_us = p.spin_us;
        pp.async = p.async || i > 0; /* sub-pool 0 runs in the caller for sync sets */
        pp.pin_caller = p.pin_caller && i == 0;
        const int *cpus;
        int n_avail;
        if (p.emulate_nodes > 0) {
            int lo = (int)((long)t->n_cores * i / set->n);
            int hi = (int)((long)t->n_cores * (i + 1) / set->n);
            cpus = t->core_cpus + lo;
            n_avail = hi - lo;
            set->nodes[i] = -1;
        } else {
            cpus = t->nodes[i].core_cpus;
            n_avail = t->nodes[i].n_cores;
            set->nodes[i] = t->nodes[i].id;
        }
        int n = p.threads_per_node ? p.threads_per_node : n_avail;
        int *list = malloc(sizeof(int) * (size_t)n);
        if (!list) {
            hm_poolset_free(set);
            return hm_errorf(HM_ERR_NO_MEMORY, "poolset: out of memory");
        }
        for (int k = 0; k < n; k++) list[k] = cpus[k % n_avail];
        pp.n_threads = n;
        pp.cpus = list;
        hm_status st = hm_pool_create(&pp, &set->pools[i]);
        free(list);
        if (st != HM_OK) {
            hm_poolset_free(set);
            return hm_error_prefix(st, "poolset: sub-pool %d", i);
        }
    }
    *out = set;
    return HM_OK;
}

void hm_poolset_free(hm_poolset *set) {
    if (!set) return;
    for (int i = 0; set->pools && i < set->n; i++) hm_pool_free(set->pools[i]);
    free(set->pools);
    free(set->nodes);
    free(set);
}

int hm_poolset_count(const hm_poolset *set) {
    return set->n;
}
hm_pool *hm_poolset_pool(hm_poolset *set, int i) {
    return set->pools[i];
}
int hm_poolset_node(const hm_poolset *set, int i) {
    return set->nodes[i];
}

void hm_poolset_run(hm_poolset *set, hm_task_fn fn, void *const *args) {
    if (set->async) {
        if (hm_poolset_submit(set, fn, args) == HM_OK) hm_poolset_wait(set);
        return;
    }
    for (int i = 1; i < set->n; i++) hm_pool_submit(set->pools[i], fn, args[i]);
    hm_pool_run(set->pools[0], fn, args[0]);
    for (int i = 1; i < set->n; i++) hm_pool_wait(set->pools[i]);
}

hm_status hm_poolset_submit(hm_poolset *set, hm_task_fn fn, void *const *args) {
    if (!set->async) return hm_errorf(HM_ERR_INVALID_ARG, "poolset: submit needs async=true");
    for (int i = 0; i < set->n; i++)
        if (hm_pool_busy(set->pools[i]))
            return hm_errorf(HM_ERR_INVALID_ARG, "poolset: submit while a job is in flight");
    for (int i = 0; i < set->n; i++) hm_pool_submit(set->pools[i], fn, args[i]);
    return HM_OK;
}

void hm_poolset_wait(hm_poolset *set) {
    for (int i = 0; i < set->n; i++) hm_pool_wait(set->pools[i]);
}
