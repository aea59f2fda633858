/* Micro-benchmark (measurement only, not built with the product): the latent attention's walk
 * (mla.c attend_span) alone on one thread: P positions of 576-float cache rows against 16 heads'
 * joined queries, in blocks of 16 (scores, the online softmax's block maxima and weights, the
 * weighted latents of 512 columns). Rows hot (the same P rows every pass, in L2) or cold (the
 * next P rows of a 256 MB buffer each pass); the fastest of 200 passes. bench/RESULTS.md,
 * 2026-12-06 (seventh).
 *   cmake --build build --target hmoe
 *   gcc -O2 -march=native -Isrc -Iinclude -o mla_walk bench/micro/mla_walk.c build/libhmoe.a \
 *       -lm -lpthread
 *   ./mla_walk [P [COLD [MODE]]]   (defaults 48, 0, 0; MODE 1: scores only, 2: pv only;
 *   HMOE_ISA picks the variant) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "cpu/ops.h"

int main(int argc, char **argv) {
    const int P = argc > 1 ? atoi(argv[1]) : 48, cold = argc > 2 ? atoi(argv[2]) : 0;
    const int mode = argc > 3 ? atoi(argv[3]) : 0;
    enum { KD = 576, KVL = 512, NQ = 16, B = 16 };
    const hm_cpu_ops *o;
    if (P < B || P % B || hm_cpu_ops_get(&o) != HM_OK || !o->qk_rows16 || !o->pv_block16) {
        fprintf(stderr, "mla_walk: P must be a multiple of 16, and the kernels present\n");
        return 1;
    }
    const size_t nbuf = cold ? ((size_t)256 << 20) / (KD * 4) : (size_t)P;
    float *cache = malloc(nbuf * KD * sizeof(float)), *q = malloc(NQ * KD * sizeof(float)),
          *oc = malloc(NQ * KD * sizeof(float)), sc[NQ * B];
    if (!cache || !q || !oc) return 1;
    for (size_t i = 0; i < nbuf * KD; i++)
        cache[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    for (int i = 0; i < NQ * KD; i++) q[i] = (float)(i % 17) * 0.01f;
    double best = 1e30, sum[NQ];
    size_t off = 0;
    for (int it = 0; it < 200; it++) {
        if (cold && (off += (size_t)P) + (size_t)P > nbuf) off = 0;
        const float *base = cache + off * KD;
        float mx[NQ];
        for (int g = 0; g < NQ; g++) mx[g] = -INFINITY, sum[g] = 0;
        memset(oc, 0, NQ * KD * sizeof(float));
        const uint64_t t0 = hm_time_ns();
        for (int b0 = 0; b0 < P; b0 += B) {
            const float *blk = base + (size_t)b0 * KD;
            if (mode != 2)
                o->qk_rows16(q, KD, NQ, blk, KD, B, KD, 0.05f, sc, B);
            else
                for (int i = 0; i < NQ * B; i++) sc[i] = 0.01f * (float)(i % 7);
            for (int g = 0; g < NQ; g++) {
                float *s = sc + g * B;
                const float bm = o->max_f32(B, s);
                if (bm > mx[g]) {
                    const float r = expf(mx[g] - bm);
                    sum[g] *= r;
                    o->scale_f32(KVL, r, oc + (size_t)g * KD);
                    mx[g] = bm;
                }
                sum[g] += o->expsum_f32(B, s, mx[g]);
            }
            if (mode != 1) o->pv_block16(sc, B, NQ, blk, KD, KVL, oc, KD);
        }
        const double ns = (double)(hm_time_ns() - t0);
        if (ns < best) best = ns;
    }
    printf("%s: %d positions, %s rows, %s: %.1f ns a position (sum %.3g)\n", o->name, P,
           cold ? "cold" : "hot",
           mode == 1   ? "scores"
           : mode == 2 ? "pv"
                       : "walk",
           best / P, sum[0] + oc[0]);
    free(cache), free(q), free(oc);
    return 0;
}
