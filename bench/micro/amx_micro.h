/* Shared by the AMX micro-benchmarks (measurement only, not built with the product): the tile
 * configuration, a clock, and the expert engine's inner loop pieces (amx.c): one K = 64 step of
 * the 2 x 2 tile block, the C tile stores and the fold of the four C tiles into floats. */
#ifndef HMOE_AMX_MICRO_H
#define HMOE_AMX_MICRO_H
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    uint8_t palette_id, start_row, r[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} micro_cfg;

static const _Alignas(64) micro_cfg k_micro_cfg = {.palette_id = 1,
                                                   .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
                                                   .rows = {16, 16, 16, 16, 16, 16, 16, 16}};

/* AMX state permission for this process (XFEATURE_XTILEDATA), then the tile configuration */
static inline void micro_tiles_on(void) {
    syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18);
    _tile_loadconfig(&k_micro_cfg);
}

/* a thread's tiles and buffers: float accumulators (16 KiB per token pair), two C tile stores,
 * and wt_bytes of weights of its own (touched, so that they are resident) */
typedef struct {
    float *acc;
    int32_t *cb;
    int8_t *wt;
} micro_thread;

static inline micro_thread micro_thread_start(size_t wt_bytes) {
    micro_tiles_on();
    micro_thread t = {aligned_alloc(64, 16 * 4096), aligned_alloc(64, 2 * 4096),
                      aligned_alloc(4096, wt_bytes)};
    memset(t.acc, 0, 16 * 4096);
    memset(t.wt, 1, wt_bytes);
    return t;
}

static inline void micro_thread_end(micro_thread *t) {
    _tile_release();
    free(t->acc), free(t->cb), free(t->wt);
}

/* fn(i) on nth threads (1..256), joined */
static inline int micro_run_threads(int nth, void *(*fn)(void *)) {
    if (nth < 1 || nth > 256) return fprintf(stderr, "threads: 1..256\n"), 1;
    pthread_t t[256];
    for (int i = 0; i < nth; i++) pthread_create(&t[i], NULL, fn, (void *)(long)i);
    for (int i = 0; i < nth; i++) pthread_join(t[i], NULL);
    return 0;
}

static inline double micro_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* one K = 64 step: weight tiles (rows 0-15 at W0, 16-31 at W1) times token tiles X0, X1, each
 * tile one contiguous KiB, into C 0-3 */
static inline void micro_step(const int8_t *W0, const int8_t *W1, const int8_t *X0,
                              const int8_t *X1) {
    _tile_loadd(4, W0, 64);
    _tile_loadd(5, W1, 64);
    _tile_loadd(6, X0, 64);
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 5, 6);
    _tile_loadd(7, X1, 64);
    _tile_dpbssd(2, 4, 7);
    _tile_dpbssd(3, 5, 7);
}

static inline void micro_zero(void) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
}

/* acc[32][32] += cvt(C) * sw[row] * dx[token] for C 0-3 stored at cb [4][16][16] */
static inline void micro_fold(const int32_t *cb, float *acc, const float *sw, const float *dx) {
    static const int off[4] = {0, 512, 16, 528};
    for (int c = 0; c < 4; c++) {
        const __m512 vv = _mm512_loadu_ps(dx);
        for (int i = 0; i < 16; i++) {
            const __m512 sc = _mm512_mul_ps(vv, _mm512_set1_ps(sw[i]));
            float *a = acc + off[c] + 32 * i;
            _mm512_storeu_ps(
                a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cb + 256 * c + 16 * i)), sc,
                                   _mm512_loadu_ps(a)));
        }
    }
}

/* C 0-3 to cb [4][16][16] and, with fold, micro_fold */
static inline void micro_store_fold(int32_t *cb, float *acc, const float *sw, const float *dx,
                                    int fold) {
    _tile_stored(0, cb, 64);
    _tile_stored(1, cb + 256, 64);
    _tile_stored(2, cb + 512, 64);
    _tile_stored(3, cb + 768, 64);
    if (fold) micro_fold(cb, acc, sw, dx);
}
#endif
