/* AMX micro-benchmark (measurement only, not built with the product): can the per-256 fold run
 * while the tiles compute? One claim's shape (256 rows x 256 tokens x K 2048, W and x in L2):
 *   2x2:  the kernel's loop: 2 token tiles x 2 weight tiles, four C tiles, each scale group's C
 *         stored and folded before the next group starts (the fold waits for the last product,
 *         the next products wait for the fold's stores);
 *   1x2 double-buffered: 1 token tile x 2 weight tiles into one of two C pairs, the previous
 *         token tile's pair stored and folded after the next one's first K step was issued, so
 *         the vector work overlaps products (the weight tiles are loaded per token tile: from L1);
 *   2x2 storing C and folding the previous block's C, and 1x2 with the fold spread over the
 *   next tile's steps; each also without the fold (stores only), for the ceiling.
 *   gcc -O2 -march=sapphirerapids -o amx_dbuf bench/micro/amx_dbuf.c -lpthread
 *   ./amx_dbuf THREADS */
#include "amx_micro.h"

#define K    2048
#define NT   256
#define ROWS 256
#define G    256

static int8_t *g_w, *g_x;
static pthread_barrier_t g_bar;
static float g_sw[64], g_dx[64];

/* C pair `set` (tiles 0-1 or 2-3) to cb */
static inline void store2(int set, int32_t *cb) {
    if (set == 0) {
        _tile_stored(0, cb, 64);
        _tile_stored(1, cb + 256, 64);
    } else {
        _tile_stored(2, cb, 64);
        _tile_stored(3, cb + 256, 64);
    }
}

/* acc[16][32] += cvt(C) * dx[token] * sw[row] for token rows [i0, i1) of the C pair stored at cb
 * (the swapped layout: rows of C are tokens) */
static inline void fold_rows(const int32_t *cb, float *acc, int i0, int i1) {
    for (int c = 0; c < 2; c++) {
        const __m512 vv = _mm512_loadu_ps(g_sw + 16 * c);
        for (int i = i0; i < i1; i++) {
            const __m512 sc = _mm512_mul_ps(vv, _mm512_set1_ps(g_dx[i]));
            float *a = acc + 16 * c + 32 * i;
            _mm512_storeu_ps(
                a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cb + 256 * c + 16 * i)), sc,
                                   _mm512_loadu_ps(a)));
        }
    }
}

/* C pair `set` to cb and, with fold, all 16 token rows folded */
static inline void store_fold2(int set, int32_t *cb, float *acc, int fold) {
    store2(set, cb);
    if (fold) fold_rows(cb, acc, 0, 16);
}

/* one K = 64 step of token tile X into C pair `set` (tiles 0-1 or 2-3), X in tile 4 or 7 */
static inline void step12(int set, int xt, const int8_t *X, const int8_t *W0, const int8_t *W1) {
    if (xt == 0)
        _tile_loadd(4, X, 64);
    else
        _tile_loadd(7, X, 64);
    _tile_loadd(5, W0, 64);
    _tile_loadd(6, W1, 64);
    if (set == 0 && xt == 0) {
        _tile_dpbssd(0, 4, 5);
        _tile_dpbssd(1, 4, 6);
    } else if (set == 0) {
        _tile_dpbssd(0, 7, 5);
        _tile_dpbssd(1, 7, 6);
    } else if (xt == 0) {
        _tile_dpbssd(2, 4, 5);
        _tile_dpbssd(3, 4, 6);
    } else {
        _tile_dpbssd(2, 7, 5);
        _tile_dpbssd(3, 7, 6);
    }
}

static double run(int variant, int fold, float *acc, int32_t *cb) {
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = micro_now();
        for (int u = 0; u < ROWS / 32; u++) {
            const int8_t *W0 = g_w + (size_t)u * 32 * K, *W1 = W0 + 16 * K;
            for (int p0 = 0; p0 < NT / 32; p0 += 4)
                for (int g = 0; g < K / G; g++) {
                    if (variant == 3) { /* 2x2, the previous block's C folded after this
                                         * block's C is stored */
                        for (int pi = 0; pi < 4; pi++) {
                            const int8_t *X0 = g_x + (size_t)(p0 + pi) * 32 * K, *X1 = X0 + 16 * K;
                            micro_zero();
                            for (int k = g * G; k < (g + 1) * G; k += 64)
                                micro_step(W0 + k * 16, W1 + k * 16, X0 + k * 16, X1 + k * 16);
                            micro_store_fold(cb + (pi & 1) * 1024, acc, g_sw, g_dx, 0);
                            if (pi > 0 && fold)
                                micro_fold(cb + ((pi - 1) & 1) * 1024, acc + (pi - 1) * 1024, g_sw,
                                           g_dx);
                        }
                        if (fold) micro_fold(cb + 1024, acc + 3 * 1024, g_sw, g_dx);
                        continue;
                    }
                    if (variant == 0) {
                        for (int pi = 0; pi < 4; pi++) {
                            const int8_t *X0 = g_x + (size_t)(p0 + pi) * 32 * K, *X1 = X0 + 16 * K;
                            micro_zero();
                            for (int k = g * G; k < (g + 1) * G; k += 64)
                                micro_step(W0 + k * 16, W1 + k * 16, X0 + k * 16, X1 + k * 16);
                            micro_store_fold(cb, acc + pi * 1024, g_sw, g_dx, fold);
                        }
                        continue;
                    }
                    /* 8 token tiles of 16, alternating C pairs; the previous tile's pair is
                     * stored and folded after this tile's first step */
                    for (int j = 0; j < 8; j++) {
                        const int set = j & 1;
                        const int8_t *X = g_x + (size_t)(p0 * 2 + j) * 16 * K;
                        if (set == 0) {
                            _tile_zero(0);
                            _tile_zero(1);
                        } else {
                            _tile_zero(2);
                            _tile_zero(3);
                        }
                        int xt = 0;
                        for (int k = g * G; k < (g + 1) * G; k += 64, xt ^= 1) {
                            step12(set, xt, X + k * 16, W0 + k * 16, W1 + k * 16);
                            if (variant == 4 && j > 0) {
                                const int s4 = (k - g * G) / 64;
                                if (s4 == 0) store2(set ^ 1, cb + (set ^ 1) * 512);
                                if (fold)
                                    fold_rows(cb + (set ^ 1) * 512, acc + (j - 1) * 512, 4 * s4,
                                              4 * s4 + 4);
                            }
                            if (variant == 1 && k == g * G && j > 0)
                                store_fold2(set ^ 1, cb + (set ^ 1) * 512, acc + (j - 1) * 512,
                                            fold);
                        }
                        if (variant == 2 && j > 0)
                            store_fold2(set ^ 1, cb + (set ^ 1) * 512, acc + (j - 1) * 512, fold);
                    }
                    if (variant == 4) {
                        store2(1, cb + 512);
                        if (fold) fold_rows(cb + 512, acc + 7 * 512, 0, 16);
                    } else
                        store_fold2(1, cb + 512, acc + 7 * 512, fold);
                }
        }
        const double t = micro_now() - t0;
        best = t < best ? t : best;
    }
    return 2.0 * ROWS * NT * K / best * 1e-12;
}

static void *thread_main(void *arg) {
    const int id = (int)(long)arg;
    micro_thread th = micro_thread_start(4096);
    int32_t *cb2 = aligned_alloc(64, 8192);
    static const char *const names[5] = {
        "2x2, fold between groups (the kernel)", "1x2, two C pairs, fold after 1st step",
        "1x2, two C pairs, fold after all steps", "2x2, store C, fold the previous C",
        "1x2, two C pairs, fold spread over steps"};
    for (int round = 0; round < 2; round++)
        for (int v = 0; v < 5; v++)
            for (int fold = 1; fold >= 0; fold--) {
                pthread_barrier_wait(&g_bar);
                const double tops = run(v, fold, th.acc, v == 3 ? cb2 : th.cb);
                if (id == 0)
                    printf("%-40s %-8s %.3f TOPS/core\n", names[v], fold ? "fold" : "no fold",
                           tops);
            }
    free(cb2);
    micro_thread_end(&th);
    return NULL;
}

int main(int argc, char **argv) {
    const int nth = argc > 1 ? atoi(argv[1]) : 1;
    g_w = aligned_alloc(64, (size_t)ROWS * K);
    g_x = aligned_alloc(64, (size_t)NT * K);
    for (size_t i = 0; i < (size_t)ROWS * K; i++) g_w[i] = (int8_t)(rand() % 7 - 3);
    for (size_t i = 0; i < (size_t)NT * K; i++) g_x[i] = (int8_t)(rand() % 7 - 3);
    for (int i = 0; i < 64; i++) g_sw[i] = g_dx[i] = 0.01f;
    pthread_barrier_init(&g_bar, NULL, (unsigned)(nth > 0 ? nth : 1));
    return micro_run_threads(nth, thread_main);
}
