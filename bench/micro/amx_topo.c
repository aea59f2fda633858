/* AMX peak per thread with threads pinned to given CPUs (measurement only, not built with the
 * product): does any vCPU share cpu 0's AMX unit (SMT siblings the guest cannot see), and what do
 * 1..N threads reach together. Each thread runs TDPBSSD back to back on random tiles for 0.3 s.
 * bench/RESULTS.md, 2026-11-30 (eighth).
 *   gcc -O2 -march=sapphirerapids -o amx_topo bench/micro/amx_topo.c -lpthread
 *   ./amx_topo [CPUS]   (default 16: pairs cpu 0 + cpu j, then cpus 0..n-1 for n = 2, 4, ..) */
#include "amx_micro.h"
#include <sched.h>
static int g_cpus[64], g_n;
static double g_res[64];
static pthread_barrier_t g_bar;
static double g_secs = 0.3;
static void *th(void *arg) {
    const int i = (int)(long)arg;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(g_cpus[i], &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
    micro_tiles_on();
    int8_t *b = aligned_alloc(64, 4096);
    unsigned seed = 12345u + (unsigned)i;
    for (int k = 0; k < 4096; k++) b[k] = (int8_t)(rand_r(&seed) % 7 - 3);
    _tile_loadd(4, b, 64);
    _tile_loadd(5, b + 1024, 64);
    _tile_loadd(6, b + 2048, 64);
    _tile_loadd(7, b + 3072, 64);
    pthread_barrier_wait(&g_bar);
    double t0 = micro_now();
    long n = 0;
    while (micro_now() - t0 < g_secs) {
        for (int r = 0; r < 2000; r++) {
            _tile_dpbssd(0, 4, 6);
            _tile_dpbssd(1, 5, 6);
            _tile_dpbssd(2, 4, 7);
            _tile_dpbssd(3, 5, 7);
        }
        n += 8000;
    }
    g_res[i] = n * 32768.0 / (micro_now() - t0) * 1e-12;
    _tile_release();
    free(b);
    return NULL;
}
static void run(const char *label) {
    pthread_t t[64];
    pthread_barrier_init(&g_bar, NULL, g_n);
    for (int i = 0; i < g_n; i++) pthread_create(&t[i], NULL, th, (void *)(long)i);
    for (int i = 0; i < g_n; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&g_bar);
    double s = 0, mn = 1e9;
    for (int i = 0; i < g_n; i++) {
        s += g_res[i];
        if (g_res[i] < mn) mn = g_res[i];
    }
    printf("%-14s total %6.2f TOPS, per thread avg %.2f min %.2f [", label, s, s / g_n, mn);
    for (int i = 0; i < g_n && g_n <= 2; i++) printf(" %.2f", g_res[i]);
    printf(" ]\n");
}
int main(int argc, char **argv) {
    const int ncpu = argc > 1 && atoi(argv[1]) >= 1 && atoi(argv[1]) <= 64 ? atoi(argv[1]) : 16;
    char l[64];
    for (int rep = 0; rep < 2; rep++) {
        g_n = 1;
        g_cpus[0] = 0;
        run("cpu 0");
        for (int j = 1; j < ncpu; j++) {
            g_n = 2;
            g_cpus[0] = 0;
            g_cpus[1] = j;
            snprintf(l, 64, "cpu 0+%d", j);
            run(l);
        }
        for (int n = 2; n <= ncpu; n *= 2) {
            g_n = n;
            for (int i = 0; i < n; i++) g_cpus[i] = i;
            snprintf(l, 64, "cpus 0-%d", n - 1);
            run(l);
        }
        g_n = 1;
        g_cpus[0] = 0;
        run("cpu 0");
    }
}
