/* test_pool.c - thread pool: every participant runs once per job, barriers order memory, pinning
 * holds, sleeping and spinning paths, async submit/wait, NUMA sub-pools, bad parameters. */
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "core/cpu.h"
#include "core/pool.h"
#include "test.h"

#define MAXT 128

typedef struct {
    hm_pool *pool;
    atomic_int calls[MAXT];
    atomic_int bad_nth;
    int expect_nth;
    int data[MAXT];
    atomic_int bar_errors;
    int round;
    int cpu_seen[MAXT];
} job_t;

static void count_task(int ith, int nth, void *arg) {
    job_t *j = arg;
    if (nth != j->expect_nth || ith < 0 || ith >= nth)
        atomic_fetch_add(&j->bad_nth, 1);
    else
        atomic_fetch_add(&j->calls[ith], 1);
    j->cpu_seen[ith] = sched_getcpu();
}

/* Each round: write own slot, barrier, check all slots, barrier. A broken barrier shows up as a
 * slot from an older round. */
static void barrier_task(int ith, int nth, void *arg) {
    job_t *j = arg;
    for (int r = 0; r < 20; r++) {
        int v = j->round * 1000 + r;
        j->data[ith] = v;
        hm_pool_barrier(j->pool);
        for (int k = 0; k < nth; k++)
            if (j->data[k] != v) atomic_fetch_add(&j->bar_errors, 1);
        hm_pool_barrier(j->pool);
    }
}

/* Groups of a job's participants, each with its own hm_barrier ([0, g) and [g, nth)), doing the
 * rounds of barrier_task among themselves; group 1 pauses so that a barrier letting anyone through
 * early (or across groups) shows up as a stale slot. */
typedef struct {
    hm_barrier bar[2];
    int g;
    int data[MAXT];
    atomic_int errors;
} group_job;

static void group_task(int ith, int nth, void *arg) {
    group_job *j = arg;
    const int grp = ith >= j->g, lo = grp ? j->g : 0, hi = grp ? nth : j->g;
    for (int r = 0; r < 50; r++) {
        j->data[ith] = r * 2 + grp;
        if (grp && r % 8 == 0) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
        hm_barrier_wait(&j->bar[grp]);
        for (int k = lo; k < hi; k++)
            if (j->data[k] != r * 2 + grp) atomic_fetch_add(&j->errors, 1);
        hm_barrier_wait(&j->bar[grp]);
    }
}

static void run_counted(hm_pool *pool, job_t *j, int jobs, bool async, int sleep_us) {
    int n = hm_pool_size(pool);
    memset(j, 0, sizeof *j);
    j->pool = pool;
    j->expect_nth = n;
    for (int i = 0; i < jobs; i++) {
        if (async) {
            CHECK_OK(hm_pool_submit(pool, count_task, j));
            CHECK(hm_pool_busy(pool));
            hm_pool_wait(pool);
            CHECK(!hm_pool_busy(pool));
        } else {
            hm_pool_run(pool, count_task, j);
        }
        if (sleep_us) {
            struct timespec ts = {0, sleep_us * 1000L};
            nanosleep(&ts, NULL);
        }
    }
    CHECK(atomic_load(&j->bad_nth) == 0);
    for (int i = 0; i < n; i++)
        CHECK_MSG(atomic_load(&j->calls[i]) == jobs, "ith %d ran %d of %d jobs", i,
                  atomic_load(&j->calls[i]), jobs);
}

static void run_barrier(hm_pool *pool, job_t *j, int rounds) {
    memset(j, 0, sizeof *j);
    j->pool = pool;
    for (int r = 0; r < rounds; r++) {
        j->round = r;
        hm_pool_run(pool, barrier_task, j);
    }
    CHECK_MSG(atomic_load(&j->bar_errors) == 0, "%d barrier violations",
              atomic_load(&j->bar_errors));
}

static hm_pool *make(int n, bool async, int spin_us, bool pin) {
    hm_pool_params p = hm_pool_default_params();
    p.n_threads = n;
    p.async = async;
    p.spin_us = spin_us;
    p.pin = pin;
    hm_pool *pool = NULL;
    CHECK_OK(hm_pool_create(&p, &pool));
    return pool;
}

static job_t job;

/* Work ranges (hm_work_slot): every unit is handed out exactly once, each participant takes its
 * own share in order, and a participant that stalls has the back of its share taken by others. */
enum { WU = 5000 };
typedef struct {
    hm_work_slot slots[8];
    atomic_int taken[WU];
    atomic_int own_out_of_order, stolen;
} work_t;
static work_t wk;

static void work_task(int ith, int nth, void *arg) {
    work_t *w = arg;
    const int64_t lo = (int64_t)WU * ith / nth, hi = (int64_t)WU * (ith + 1) / nth;
    int64_t prev = -1, u;
    bool first = true;
    while ((u = hm_work_next(w->slots, nth, ith)) >= 0) {
        if (u >= WU) {
            atomic_fetch_add(&w->own_out_of_order, 1000000);
            break;
        }
        atomic_fetch_add(&w->taken[u], 1);
        if (u >= lo && u < hi) {
            if (u <= prev) atomic_fetch_add(&w->own_out_of_order, 1); /* own share: in order */
            prev = u;
        } else {
            atomic_fetch_add(&w->stolen, 1);
        }
        if (ith == 0 && first) { /* participant 0 stalls after its first unit */
            struct timespec ts = {0, 20 * 1000 * 1000L};
            nanosleep(&ts, NULL);
        }
        first = false;
    }
}

static void test_work_ranges(void) {
    hm_pool *pool = make(4, false, 100, false);
    if (!pool) return;
    for (int rep = 0; rep < 3; rep++) {
        memset(&wk, 0, sizeof wk);
        hm_work_init(wk.slots, 4, WU);
        hm_pool_run(pool, work_task, &wk);
        int wrong = 0;
        for (int u = 0; u < WU; u++) wrong += atomic_load(&wk.taken[u]) != 1;
        CHECK_MSG(wrong == 0, "work ranges: %d of %d units not taken exactly once", wrong, WU);
        CHECK_MSG(atomic_load(&wk.own_out_of_order) == 0, "own share taken out of order");
        CHECK_MSG(atomic_load(&wk.stolen) > 0, "the stalled participant's share was not helped");
        CHECK(hm_work_next(wk.slots, 4, 2) == -1);
    }
    /* fewer units than participants, and none */
    memset(&wk, 0, sizeof wk);
    hm_work_init(wk.slots, 4, 2);
    int64_t a = hm_work_next(wk.slots, 4, 0), b = hm_work_next(wk.slots, 4, 0);
    CHECK((a == 0 && b == 1) || (a == 1 && b == 0));
    CHECK(hm_work_next(wk.slots, 4, 3) == -1);
    hm_work_init(wk.slots, 4, 0);
    CHECK(hm_work_next(wk.slots, 4, 1) == -1);
    hm_pool_free(pool);
}

/* hm_pool_run's counters: every job counted once; the caller's own share inside the job's time,
 * and a job that sleeps 2 ms in participant 0 (own share) or in the last one (the wait) lands on
 * the right side; reset clears them */
static void sleep_task(int ith, int nth, void *arg) {
    const int who = *(const int *)arg;
    if (ith == (who < 0 ? nth - 1 : who)) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
}

static void test_stats(int n) {
    hm_pool *pool = make(n, false, 50, false);
    hm_pool_stats st;
    hm_pool_stats_get(pool, &st);
    CHECK(st.jobs == 0 && st.run_ns == 0 && st.own_ns == 0);
    int who = 0;
    for (int i = 0; i < 5; i++) hm_pool_run(pool, sleep_task, &who);
    hm_pool_stats_get(pool, &st);
    CHECK_MSG(st.jobs == 5 && st.own_ns >= 10000000 && st.run_ns >= st.own_ns,
              "%d threads: %llu jobs, own %llu ns, run %llu ns", n, (unsigned long long)st.jobs,
              (unsigned long long)st.own_ns, (unsigned long long)st.run_ns);
    hm_pool_stats_reset(pool);
    who = -1; /* the last participant sleeps: the caller waits for it */
    for (int i = 0; i < 5; i++) hm_pool_run(pool, sleep_task, &who);
    hm_pool_stats_get(pool, &st);
    CHECK(st.jobs == 5 && st.run_ns >= 10000000);
    if (n > 1)
        CHECK_MSG(st.own_ns < st.run_ns / 2, "%d threads: own %llu of %llu ns", n,
                  (unsigned long long)st.own_ns, (unsigned long long)st.run_ns);
    hm_pool_free(pool);
}

/* idle work: each worker (never the sync caller) runs it after its share of the job it was set
 * for, steps 0, 1, ... until it returns false; it belongs to that job only; a worker that would
 * idle forever still starts the next job */
typedef struct {
    atomic_int steps[MAXT];
    atomic_int order_bad;
    int limit; /* < 0: never stop */
} idle_t;

static bool idle_fn(int ith, int nth, void *arg, int step) {
    idle_t *d = arg;
    (void)nth;
    if (atomic_fetch_add(&d->steps[ith], 1) != step) atomic_fetch_add(&d->order_bad, 1);
    return d->limit < 0 || step < d->limit;
}

static void noop_task(int ith, int nth, void *arg) {
    (void)ith, (void)nth, (void)arg;
}

static void test_idle(int n, bool async) {
    hm_pool *pool = make(n, async, 50, false);
    static idle_t d;
    memset(&d, 0, sizeof d);
    d.limit = 5;
    const int first = async ? 0 : 1;
    hm_pool_set_idle(pool, idle_fn, &d);
    hm_pool_run(pool, noop_task, NULL);
    for (int i = first, waited = 0; i < n && waited < 5000; i++)
        while (atomic_load(&d.steps[i]) < 6 && waited++ < 5000) { /* up to ~5 s */
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    hm_pool_run(pool, noop_task, NULL); /* no idle work set for this one */
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    for (int i = 0; i < n; i++)
        CHECK_MSG(atomic_load(&d.steps[i]) == (i < first ? 0 : 6),
                  "%s pool of %d: participant %d ran %d idle steps", async ? "async" : "sync", n, i,
                  atomic_load(&d.steps[i]));
    CHECK(atomic_load(&d.order_bad) == 0);
    /* idle work that never ends: the next jobs still run */
    d.limit = -1;
    hm_pool_set_idle(pool, idle_fn, &d);
    hm_pool_run(pool, noop_task, NULL);
    static job_t j;
    run_counted(pool, &j, 20, async, 0);
    hm_pool_free(pool);
}

int main(void) {
    test_work_ranges();
    test_idle(1, false);
    test_idle(4, false);
    test_idle(3, true);
    test_stats(1);
    test_stats(3);
    const hm_topology *t = hm_topology_get();
    int cores = t->n_cores;

    /* default pool: one participant per physical core, pinned to distinct cores */
    hm_pool *pool = make(0, false, -1, true);
    CHECK(hm_pool_size(pool) == cores);
    for (int i = 0; i < cores; i++) {
        CHECK(hm_pool_cpu(pool, i) == t->core_cpus[i]);
        for (int k = 0; k < i; k++) CHECK(hm_pool_cpu(pool, i) != hm_pool_cpu(pool, k));
    }
    run_counted(pool, &job, 2000, false, 0);
    for (int i = 1; i < cores; i++) /* workers run where they were pinned */
        CHECK_MSG(job.cpu_seen[i] == hm_pool_cpu(pool, i), "worker %d on cpu %d, pinned to %d", i,
                  job.cpu_seen[i], hm_pool_cpu(pool, i));
    run_barrier(pool, &job, 200);
    if (cores >= 2) { /* two groups with their own barriers in one job */
        static group_job gj;
        gj.g = cores / 2;
        hm_barrier_init(&gj.bar[0], gj.g, -1);
        hm_barrier_init(&gj.bar[1], cores - gj.g, 0); /* futex only */
        atomic_init(&gj.errors, 0);
        for (int r = 0; r < 20; r++) hm_pool_run(pool, group_task, &gj);
        CHECK_MSG(atomic_load(&gj.errors) == 0, "%d group barrier violations",
                  atomic_load(&gj.errors));
    }
    CHECK_STATUS(hm_pool_submit(pool, count_task, &job), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "async=true");
    hm_pool_free(pool);

    /* more participants than cores, sync and async, spinning and sleeping (spin 0 = futex only) */
    int spins[] = {0, 30, 200};
    for (int s = 0; s < 3; s++) {
        for (int async = 0; async < 2; async++) {
            pool = make(cores + 3, async, spins[s], s != 1);
            run_counted(pool, &job, 300, async, 0);
            run_counted(pool, &job, 30, async, 300); /* idle gaps longer than the spin window */
            if (!async) run_barrier(pool, &job, 50);
            hm_pool_free(pool);
        }
    }

    /* a single participant: no threads at all */
    pool = make(1, false, -1, false);
    run_counted(pool, &job, 10, false, 0);
    run_barrier(pool, &job, 5);
    hm_pool_free(pool);

    /* async rules */
    pool = make(2, true, 50, false);
    hm_pool_wait(pool); /* nothing submitted: returns */
    memset(&job, 0, sizeof job);
    job.expect_nth = 2;
    CHECK_OK(hm_pool_submit(pool, count_task, &job));
    CHECK_STATUS(hm_pool_submit(pool, count_task, &job), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "in flight");
    hm_pool_wait(pool);
    CHECK(atomic_load(&job.calls[0]) == 1 && atomic_load(&job.calls[1]) == 1);
    /* run while a submitted job is in flight: that one finishes, then fn runs (not skipped) */
    CHECK_OK(hm_pool_submit(pool, count_task, &job));
    hm_pool_run(pool, count_task, &job);
    CHECK(!hm_pool_busy(pool));
    CHECK(atomic_load(&job.calls[0]) == 3 && atomic_load(&job.calls[1]) == 3);
    hm_pool_free(pool);
    hm_pool_free(NULL);

    /* many threads on few cores (oversubscribed, unpinned) stay correct */
    pool = make(MAXT, false, 5, false);
    run_counted(pool, &job, 50, false, 0);
    run_barrier(pool, &job, 10);
    hm_pool_free(pool);

    /* explicit CPU list and bad parameters */
    hm_pool_params p = hm_pool_default_params();
    int cpus[2] = {t->core_cpus[0], t->core_cpus[0]};
    p.n_threads = 2;
    p.cpus = cpus;
    CHECK_OK(hm_pool_create(&p, &pool));
    CHECK(hm_pool_cpu(pool, 1) == t->core_cpus[0]);
    run_counted(pool, &job, 100, false, 0);
    hm_pool_free(pool);
    cpus[1] = -5;
    CHECK_STATUS(hm_pool_create(&p, &pool), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "cpu -5");
    CHECK(pool == NULL);
    p = hm_pool_default_params();
    p.n_threads = 100000;
    CHECK_STATUS(hm_pool_create(&p, &pool), HM_ERR_INVALID_ARG);
    p.n_threads = 0;
    p.numa_node = 4000;
    CHECK_STATUS(hm_pool_create(&p, &pool), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "NUMA node 4000");

    /* NUMA sub-pools: real nodes, then emulated halves; each sub-pool sums its share */
    for (int emu = 0; emu <= 2; emu += 2) {
        if (emu > cores) break;
        for (int async = 0; async < 2; async++) {
            hm_poolset_params sp = hm_poolset_default_params();
            sp.emulate_nodes = emu;
            sp.async = async;
            sp.threads_per_node = emu ? 2 : 0;
            hm_poolset *set;
            CHECK_OK(hm_poolset_create(&sp, &set));
            int n = hm_poolset_count(set);
            CHECK(n == (emu ? emu : t->n_nodes));
            static job_t jobs[8];
            void *args[8];
            for (int i = 0; i < n && i < 8; i++) {
                memset(&jobs[i], 0, sizeof jobs[i]);
                jobs[i].expect_nth = hm_pool_size(hm_poolset_pool(set, i));
                args[i] = &jobs[i];
                if (emu)
                    CHECK(hm_poolset_node(set, i) == -1);
                else
                    CHECK(hm_poolset_node(set, i) == t->nodes[i].id);
            }
            for (int r = 0; r < 200; r++) hm_poolset_run(set, count_task, args);
            if (async) {
                CHECK_OK(hm_poolset_submit(set, count_task, args));
                CHECK_STATUS(hm_poolset_submit(set, count_task, args), HM_ERR_INVALID_ARG);
                hm_poolset_wait(set);
            } else {
                CHECK_STATUS(hm_poolset_submit(set, count_task, args), HM_ERR_INVALID_ARG);
            }
            for (int i = 0; i < n && i < 8; i++) {
                CHECK(atomic_load(&jobs[i].bad_nth) == 0);
                for (int k = 0; k < jobs[i].expect_nth; k++)
                    CHECK(atomic_load(&jobs[i].calls[k]) == 200 + async);
            }
            /* emulated halves use disjoint cores */
            if (emu == 2)
                CHECK(hm_pool_cpu(hm_poolset_pool(set, 0), 0) !=
                      hm_pool_cpu(hm_poolset_pool(set, 1), 0));
            hm_poolset_free(set);
        }
    }
    hm_poolset_params sp = hm_poolset_default_params();
    sp.emulate_nodes = cores + 1;
    hm_poolset *set;
    CHECK_STATUS(hm_poolset_create(&sp, &set), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "emulate");
    hm_poolset_free(NULL);
    return test_done("pool");
}
