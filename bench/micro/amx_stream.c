/* AMX micro-benchmark (measurement only, not built with the product): the expert engine's tile
 * loop (groups of 256, 4 token pairs per weight chunk, store + fold) with the weights streamed
 * from memory (256 MiB per thread), and software prefetch of the weights (T0 / T1 / T2, 1-16
 * scale groups ahead, spread over the pairs). bench/RESULTS.md, 2026-11-30 (fourth).
 *   gcc -O2 -march=sapphirerapids -o amx_stream bench/micro/amx_stream.c -lpthread
 *   ./amx_stream THREADS */
#include "amx_micro.h"

#define K  2048
#define NT 256
#define NU 64 /* units per measured pass: 64 x 64 KiB = 4 MiB of weights */
#define WB ((size_t)256 << 20)

static int8_t *g_x;
static pthread_barrier_t g_bar;
static int g_nth;
static float g_sw[64], g_dx[64];

static inline void prefetch(const int8_t *p, int hint) {
    if (hint == 0)
        _mm_prefetch((const char *)p, _MM_HINT_T0);
    else if (hint == 1)
        _mm_prefetch((const char *)p, _MM_HINT_T1);
    else
        _mm_prefetch((const char *)p, _MM_HINT_T2);
}

static void *thread_main(void *arg) {
    const int id = (int)(long)arg;
    micro_thread th = micro_thread_start(WB);
    size_t wofs = 0;
    static const int dist[] = {0, 1, 2, 4, 8, 16};
    for (int hint = 0; hint < 3; hint++)
        for (unsigned di = 0; di < sizeof dist / sizeof *dist; di++) {
            const int d = dist[di];
            if (d == 0 && hint) continue;
            pthread_barrier_wait(&g_bar);
            double best = 1e9;
            for (int rep = 0; rep < 5; rep++) {
                const double t0 = micro_now();
                for (int u = 0; u < NU; u++) {
                    const int8_t *base = th.wt + wofs, *W0 = base, *W1 = base + 16 * K;
                    wofs = (wofs + 32 * K) % (WB - 64 * K); /* room for the prefetches ahead */
                    for (int p0 = 0; p0 < NT / 32; p0 += 4)
                        for (int g = 0; g < K / 256; g++) {
                            /* group g + d of this unit or the following ones: 128 lines, 32 per
                             * pair, while the first pairs read this one from memory */
                            const int G = g + d;
                            const int8_t *pb =
                                base + (size_t)(G / 8) * 32 * K + (size_t)(G % 8) * 4096;
                            for (int pi = 0; pi < 4; pi++) {
                                if (d && p0 == 0)
                                    for (int l = 32 * pi; l < 32 * pi + 32; l++)
                                        prefetch(pb + (l < 64 ? 0 : 16 * K) + 64 * (l & 63), hint);
                                const int8_t *X0 = g_x + (size_t)(p0 + pi) * 32 * K,
                                             *X1 = X0 + 16 * K;
                                micro_zero();
                                for (int k = g * 256; k < g * 256 + 256; k += 64)
                                    micro_step(W0 + k * 16, W1 + k * 16, X0 + k * 16, X1 + k * 16);
                                micro_store_fold(th.cb, th.acc + pi * 1024, g_sw, g_dx, 1);
                            }
                        }
                }
                const double t = micro_now() - t0;
                best = t < best ? t : best;
            }
            if (id == 0)
                printf("threads %2d  prefetch %s distance %2d groups: %.3f TOPS/core\n", g_nth,
                       d ? (hint == 0   ? "T0"
                            : hint == 1 ? "T1"
                                        : "T2")
                         : "--",
                       d, 2.0 * NU * 32 * NT * K / best * 1e-12);
        }
    micro_thread_end(&th);
    return NULL;
}

int main(int argc, char **argv) {
    g_nth = argc > 1 ? atoi(argv[1]) : 1;
    g_x = aligned_alloc(64, (size_t)NT * K);
    for (size_t i = 0; i < (size_t)NT * K; i++) g_x[i] = (int8_t)(rand() % 7 - 3);
    for (int i = 0; i < 64; i++) g_sw[i] = g_dx[i] = 0.01f;
    pthread_barrier_init(&g_bar, NULL, (unsigned)(g_nth > 0 ? g_nth : 1));
    return micro_run_threads(g_nth, thread_main);
}
