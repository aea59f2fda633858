/* AMX tile-loop micro-benchmark (measurement only, not built with the product): TOPS per core of
 * the expert engine's loop shapes on one claim (256 rows x 256 tokens x K 2048, 2 x 2 tiles):
 * peak (no loads), scale groups of 256 / 512 / 2048 with and without the fold, token pairs per
 * weight chunk, L1 prefetch of the next K step's token tiles (distance 0-2), and each tile's
 * next load issued right after its last product (with or without the next pair's first tiles
 * loaded before the C stores). bench/RESULTS.md, 2026-11-30 (fourth, seventh).
 *   gcc -O2 -march=sapphirerapids -o amx_loop bench/micro/amx_loop.c -lpthread
 *   ./amx_loop THREADS [BIGW]   (BIGW 1: each thread streams its own 32 MiB of weights;
 *   AMX_LOOP_PF=N: prefetch distances 0 .. N-1 only, default 3) */
#include "amx_micro.h"

#ifndef K
#define K 2048 /* -DK=768: the down projection's K */
#endif
#define NT       256
#define ROWS     256 /* one claim: 8 units of 32 rows */
#define WT_BYTES ((size_t)32 << 20)

static int8_t *g_w, *g_x;
static pthread_barrier_t g_bar;
static int g_bigw;
static float g_sw[64], g_dx[64];
static int g_npf = 3; /* prefetch distances tried: 0 .. g_npf - 1 (AMX_LOOP_PF) */

typedef struct {
    int peak, group, fold, tb;
    const char *name;
    int lag;  /* 1: each pair's fold after the next pair's products and C stores (two C buffers) */
    int pipe; /* 1: each tile loaded for the next K step as soon as its last product of this step
                 is issued; 2: also the next pair's first tiles before the C stores and fold */
} variant;

/* the 2 x 2 block over K [k0, k1) with every load issued right after the last product that
 * reads its tile's old contents, so each load has at least one product's time to land (the
 * tiles are not renamed: a load waits for the products reading the tile) */
static inline void step_pipe(const int8_t *W0, const int8_t *W1, const int8_t *X0, const int8_t *X1,
                             int k0, int k1, int loaded) {
    if (!loaded) {
        _tile_loadd(4, W0 + k0 * 16, 64);
        _tile_loadd(6, X0 + k0 * 16, 64);
        _tile_loadd(5, W1 + k0 * 16, 64);
        _tile_loadd(7, X1 + k0 * 16, 64);
    }
    for (int k = k0; k < k1; k += 64) {
        const int more = k + 64 < k1;
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(2, 4, 7);
        if (more) _tile_loadd(4, W0 + (k + 64) * 16, 64);
        _tile_dpbssd(1, 5, 6);
        if (more) _tile_loadd(6, X0 + (k + 64) * 16, 64);
        _tile_dpbssd(3, 5, 7);
        if (more) {
            _tile_loadd(5, W1 + (k + 64) * 16, 64);
            _tile_loadd(7, X1 + (k + 64) * 16, 64);
        }
    }
}

/* TOPS of one variant on this thread: best of 5 passes over the claim */
static double run(const variant *v, int pf, int8_t *wt, size_t *wofs, float *acc, int32_t *cb) {
    double best = 1e9, ops = 0;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = micro_now();
        if (v->peak) {
            micro_zero();
            _tile_loadd(4, g_w, 64);
            _tile_loadd(5, g_w + 1024, 64);
            _tile_loadd(6, g_x, 64);
            _tile_loadd(7, g_x + 1024, 64);
            for (long i = 0; i < 200000; i++) {
                _tile_dpbssd(0, 4, 6);
                _tile_dpbssd(1, 5, 6);
                _tile_dpbssd(2, 4, 7);
                _tile_dpbssd(3, 5, 7);
            }
            _tile_stored(0, cb, 64);
            ops = 2.0 * 200000 * 4 * 16 * 16 * 64;
        } else {
            int n_lag = 0;
            int32_t *prev = NULL;
            float *prev_acc = NULL;
            for (int u = 0; u < ROWS / 32; u++) {
                const int8_t *W0 = g_w + (size_t)u * 32 * K;
                if (g_bigw) {
                    W0 = wt + *wofs;
                    *wofs = (*wofs + 32 * K) % WT_BYTES;
                }
                const int8_t *W1 = W0 + 16 * K;
                for (int p0 = 0; p0 < NT / 32; p0 += v->tb)
                    for (int g = 0; g < K / v->group; g++)
                        for (int pi = 0; pi < v->tb; pi++) {
                            if (v->lag) {
                                const int8_t *X0 = g_x + (size_t)(p0 + pi) * 32 * K,
                                             *X1 = X0 + 16 * K;
                                micro_zero();
                                for (int k = g * v->group; k < (g + 1) * v->group; k += 64)
                                    micro_step(W0 + k * 16, W1 + k * 16, X0 + k * 16, X1 + k * 16);
                                int32_t *c = cb + 1024 * (n_lag++ & 1);
                                micro_store_fold(c, NULL, NULL, NULL, 0);
                                if (prev) micro_fold(prev, prev_acc, g_sw, g_dx);
                                prev = c;
                                prev_acc = acc + pi * 1024;
                                continue;
                            }
                            const int8_t *X0 = g_x + (size_t)(p0 + pi) * 32 * K, *X1 = X0 + 16 * K;
                            if (v->pipe) {
                                const int k0 = g * v->group, k1 = k0 + v->group;
                                micro_zero();
                                step_pipe(W0, W1, X0, X1, k0, k1, v->pipe == 2 && pi > 0);
                                if (v->pipe == 2 && pi + 1 < v->tb) { /* next pair's first tiles */
                                    const int8_t *N0 = X0 + 32 * K;
                                    _tile_loadd(4, W0 + k0 * 16, 64);
                                    _tile_loadd(6, N0 + k0 * 16, 64);
                                    _tile_loadd(5, W1 + k0 * 16, 64);
                                    _tile_loadd(7, N0 + 16 * K + k0 * 16, 64);
                                }
                                micro_store_fold(cb, acc + pi * 1024, g_sw, g_dx, v->fold);
                                continue;
                            }
                            micro_zero();
                            for (int k = g * v->group; k < (g + 1) * v->group; k += 64) {
                                if (pf)
                                    for (int l = 0; l < 1024; l += 64) {
                                        _mm_prefetch((const char *)X0 + (k + 64 * pf) * 16 + l,
                                                     _MM_HINT_T0);
                                        _mm_prefetch((const char *)X1 + (k + 64 * pf) * 16 + l,
                                                     _MM_HINT_T0);
                                    }
                                micro_step(W0 + k * 16, W1 + k * 16, X0 + k * 16, X1 + k * 16);
                            }
                            micro_store_fold(cb, acc + pi * 1024, g_sw, g_dx, v->fold);
                        }
            }
            if (prev) micro_fold(prev, prev_acc, g_sw, g_dx);
            ops = 2.0 * ROWS * NT * K;
        }
        const double t = micro_now() - t0;
        best = t < best ? t : best;
    }
    return ops / best * 1e-12;
}

static void *thread_main(void *arg) {
    const int id = (int)(long)arg;
    micro_thread th = micro_thread_start(WT_BYTES);
    size_t wofs = 0;
    static const variant v[] = {
        {1, 0, 0, 1, "peak: 4 dpbssd, no loads"},
        {0, 256, 0, 4, "group 256, TB 4, store no fold"},
        {0, 256, 1, 4, "group 256, TB 4, store+fold (the kernel's loop)"},
        {0, 256, 1, 8, "group 256, TB 8, store+fold"},
        {0, 256, 1, 2, "group 256, TB 2, store+fold"},
        {0, 512, 1, 4, "group 512, TB 4, store+fold"},
        {0, 2048, 1, 4, "group 2048, TB 4, store+fold"},
        {0, 2048, 1, 1, "all of K per pair, one store+fold"},
        {0, 256, 1, 4, "group 256, TB 4, fold one pair late (2 C bufs)", 1},
        {0, 256, 1, 8, "group 256, TB 8, fold one pair late (2 C bufs)", 1},
        {0, 256, 0, 4, "group 256, TB 4, no fold, loads pipelined", 0, 1},
        {0, 256, 1, 4, "group 256, TB 4, fold, loads pipelined", 0, 1},
        {0, 256, 1, 4, "group 256, TB 4, fold, pipelined + next pair", 0, 2},
        {0, 256, 0, 4, "group 256, TB 4, no fold, pipelined + next pair", 0, 2},
    };
    for (unsigned i = 0; i < sizeof v / sizeof v[0]; i++)
        for (int pf = 0; !v[i].peak && K % v[i].group && pf < 1; pf++)
            if (id == 0) printf("%-48s skipped: K %d\n", v[i].name, K);
    for (unsigned i = 0; i < sizeof v / sizeof v[0]; i++)
        if (v[i].peak || K % v[i].group == 0)
            for (int pf = 0; pf < (v[i].peak || v[i].pipe || v[i].lag ? 1 : g_npf); pf++) {
                pthread_barrier_wait(&g_bar);
                const double tops = run(&v[i], pf, th.wt, &wofs, th.acc, th.cb);
                if (id == 0) printf("%-48s pf %d %.3f TOPS/core\n", v[i].name, pf, tops);
            }
    micro_thread_end(&th);
    return NULL;
}

int main(int argc, char **argv) {
    const int nth = argc > 1 ? atoi(argv[1]) : 1;
    g_bigw = argc > 2 ? atoi(argv[2]) : 0;
    if (getenv("AMX_LOOP_PF")) g_npf = atoi(getenv("AMX_LOOP_PF"));
    g_w = aligned_alloc(64, (size_t)ROWS * K);
    g_x = aligned_alloc(64, (size_t)NT * K + 4096); /* the prefetches run past the last tile */
    for (size_t i = 0; i < (size_t)ROWS * K; i++) g_w[i] = (int8_t)(rand() % 7 - 3);
    for (size_t i = 0; i < (size_t)NT * K; i++) g_x[i] = (int8_t)(rand() % 7 - 3);
    for (int i = 0; i < 64; i++) g_sw[i] = g_dx[i] = 0.01f;
    pthread_barrier_init(&g_bar, NULL, (unsigned)(nth > 0 ? nth : 1));
    return micro_run_threads(nth, thread_main);
}
