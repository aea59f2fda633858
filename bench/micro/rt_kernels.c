/* Micro-benchmark (measurement only, not built with the product): the expert engine's swapped
 * kernels through the library (hm_amx_matmul_packed_rt, hm_amx_glu_packed_rt, hm_amx_down_acc),
 * R = 128 rows x K x 256 tokens per call, every thread on its own data: the weights and the
 * packed activations either one L2-resident copy, or cycled through many copies so that every
 * call streams one of them from memory. Prints TOPS per core (mean and slowest thread).
 * bench/RESULTS.md, 2026-11-30 (sixth).
 *   cmake --build build --target hmoe
 *   gcc -O2 -march=sapphirerapids -Isrc -Iinclude -o rt_kernels bench/micro/rt_kernels.c \
 *       build/libhmoe.a -lm -lpthread
 *   ./rt_kernels THREADS [REPS] */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/timer.h"
#include "cpu/ops.h"
#include "quant/blocks.h"
#include "quant/synth.h"
#include "quant/types.h"

#define NT 256 /* tokens per call: an expert's share of a 4096-token batch */
#define R  128 /* rows per call: one down claim (4 units) */

enum { MODE_STORE, MODE_GLU, MODE_DOWN };

static int g_reps, g_mode;
static bool g_stream_w, g_stream_x;
static int64_t g_K;
static pthread_barrier_t g_bar;
static double g_res[256];

static size_t up64(size_t x) {
    return (x + 63) / 64 * 64;
}

static void *thread_main(void *arg) {
    const int id = (int)(long)arg;
    const int64_t K = g_K;
    const int ncw = g_stream_w ? 256 : 1, ncx = g_stream_x ? 64 : 1;
    const size_t rb = (size_t)K / 256 * sizeof(hm_block_q4_K);
    uint8_t *w = malloc(rb * R);
    const size_t wb = up64(hm_amx_wpack_bytes(R, K)),
                 ab = up64(hm_amx_act_bytes(HM_TYPE_Q4_K, K, NT));
    uint8_t *wp = aligned_alloc(64, wb * (size_t)ncw), *px = aligned_alloc(64, ab * (size_t)ncx);
    void *scr = aligned_alloc(64, up64(hm_amx_scratch_bytes(HM_TYPE_Q4_K, K)) + 64);
    float *x = malloc(sizeof(float) * NT * (size_t)K),
          *y = aligned_alloc(64, sizeof(float) * NT * R);
    if (!w || !wp || !px || !scr || !x || !y) {
        fprintf(stderr, "rt_kernels: out of memory\n");
        exit(1);
    }
    hm_synth_fill(HM_TYPE_Q4_K, w, (uint64_t)R * (uint64_t)K, 0.0f, 0.02f, 7 + (uint64_t)id);
    hm_amx_wpack_vnni(HM_TYPE_Q4_K, w, rb, R, K, 0, R / 32, wp, scr);
    for (int c = 1; c < ncw; c++) memcpy(wp + wb * (size_t)c, wp, wb);
    for (int64_t i = 0; i < NT * K; i++) x[i] = (float)((i * 7919 + id) % 201) / 100.0f - 1.0f;
    hm_amx_pack_act_rt(x, (size_t)K, NULL, NT, K, px, 0, 2 * ((NT + 31) / 32));
    for (int c = 1; c < ncx; c++) memcpy(px + ab * (size_t)c, px, ab);
    memset(y, 0, sizeof(float) * NT * R);
    int32_t tok[NT];
    float wt[NT];
    for (int t = 0; t < NT; t++) tok[t] = t, wt[t] = 0.5f;
    int cw = 0, cx = 0;
    double best = 1e30;
    for (int r = 0; r < g_reps; r++) {
        pthread_barrier_wait(&g_bar);
        const uint64_t t0 = hm_time_ns();
        for (int i = 0; i < 16; i++) {
            const uint8_t *W = wp + wb * (size_t)cw, *X = px + ab * (size_t)cx;
            cw = (cw + 1) % ncw, cx = (cx + 1) % ncx;
            if (g_mode == MODE_STORE)
                hm_amx_matmul_packed_rt(W, R, K, 0, R, X, NT, y, R, scr);
            else if (g_mode == MODE_GLU)
                hm_amx_glu_packed_rt(W, W, R, K, 0, R, X, NT, y, R, scr);
            else
                hm_amx_down_acc(W, R, K, 0, R, X, NT, tok, wt, NULL, y, R, scr);
        }
        const double s = (double)(hm_time_ns() - t0) * 1e-9 / 16;
        best = s < best ? s : best;
    }
    g_res[id] = 2.0 * R * (double)K * NT * (g_mode == MODE_GLU ? 2 : 1) / best * 1e-12;
    free(w), free(wp), free(px), free(scr), free(x), free(y);
    return NULL;
}

int main(int argc, char **argv) {
    if (hm_cpu_request_amx() != HM_OK) {
        fprintf(stderr, "rt_kernels: no AMX here\n");
        return 1;
    }
    const int nth = argc > 1 ? atoi(argv[1]) : 1;
    g_reps = argc > 2 ? atoi(argv[2]) : 20;
    if (nth < 1 || nth > 256 || g_reps < 1) {
        fprintf(stderr, "usage: rt_kernels THREADS(1-256) [REPS]\n");
        return 1;
    }
    static const struct {
        int mode;
        int64_t k;
        const char *name;
    } cases[] = {{MODE_STORE, 768, "store"},
                 {MODE_STORE, 2048, "store"},
                 {MODE_GLU, 2048, "glu"},
                 {MODE_DOWN, 768, "down_acc"}};
    static const char *const src[] = {"all in L2", "weights streamed", "activations streamed"};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int s = 0; s < 3; s++) {
            g_mode = cases[c].mode, g_K = cases[c].k, g_stream_w = s == 1, g_stream_x = s == 2;
            pthread_barrier_init(&g_bar, NULL, (unsigned)nth);
            pthread_t th[256];
            for (int i = 0; i < nth; i++)
                pthread_create(&th[i], NULL, thread_main, (void *)(long)i);
            double sum = 0, lo = 1e30;
            for (int i = 0; i < nth; i++) {
                pthread_join(th[i], NULL);
                sum += g_res[i];
                lo = g_res[i] < lo ? g_res[i] : lo;
            }
            pthread_barrier_destroy(&g_bar);
            printf("%3d threads  %-8s K %4lld  %-20s %.3f TOPS per core (slowest thread %.3f)\n",
                   nth, cases[c].name, (long long)g_K, src[s], sum / nth, lo);
        }
    return 0;
}
