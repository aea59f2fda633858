/* Micro-benchmark (measurement only, not built with the product): where the one-token Q4_K
 * AVX-512 kernel's time goes in cache. The kernel's loop (kernels_avx512.h, hm_q4_K_rows_avx512)
 * with parts left out, each timed on ROWS rows x COLS columns cycled 200 times (fastest pass):
 *   full      the kernel as it is
 *   nopf      without the weight prefetches
 *   pf1       one T0 + one T2 prefetch per 64-byte line instead of three each per block
 *   noscale   the sub-block scales decoded once per row instead of per block
 *   nomins    without the mins' term
 *   noperm    the scales not spread per sub-block pair (one vector for all four)
 *   loads     the weight and activation loads only
 * Results mean nothing numerically except "full"; the others show what each part costs. The
 * loop follows the kernel as of 2026-12-01 (VPDPBUSD sums packed to int16; the fourteenth
 * session's measurements in bench/RESULTS.md were taken with the VPMADDUBSW form before it).
 *   gcc -O3 -march=sapphirerapids -Isrc -Iinclude -o q4k_parts bench/micro/q4k_parts.c \
 *       build/libhmoe.a -lm -lpthread -ldl
 *   ./q4k_parts [ROWS [COLS]]   (defaults 48, 2048) */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "cpu/ops.h"
#include "cpu/x86/kernels_avx512.h"
#include "quant/synth.h"

enum { FULL, NOPF, PF1, NOSCALE, NOMINS, NOPERM, LOADS, N_VAR };
static const char *const k_names[N_VAR] = {"full",   "nopf",   "pf1",  "noscale",
                                           "nomins", "noperm", "loads"};

static inline __attribute__((always_inline)) float row(int64_t n, const void *vw, const void *vx,
                                                       const int v) {
    const hm_block_q4_K *w = vw;
    const int64_t nb = n / HM_QK_K;
    const __m512i nib = _mm512_load_si512(hm_k4_nib_avx512);
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    const float *xs = (const float *)((const hm_block_q8_K *)vx + nb);
    const __m128i sm0 = hm_k4_scales_vec(w[0].scales);
    const __m512i sc0 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(sm0));
    __m512i lsum = _mm512_setzero_si512();
    for (int64_t i = 0; i < nb; i++) {
        const char *blk = (const char *)(w + i);
        if (v == PF1) {
            /* the lines this block starts in */
            const uintptr_t a = (uintptr_t)blk, e = a + sizeof(hm_block_q4_K);
            for (uintptr_t l = (a + 63) & ~(uintptr_t)63; l < e; l += 64)
                hm_prefetch_w((const char *)l);
        } else if (v != NOPF) {
            hm_prefetch_w(blk);
            hm_prefetch_w(blk + 64);
            hm_prefetch_w(blk + 128);
        }
        const hm_block_q8_K *x = (const hm_block_q8_K *)vx + i;
        if (v == LOADS) {
            lsum = _mm512_add_epi32(lsum, _mm512_loadu_si512(blk));
            lsum = _mm512_add_epi32(lsum, _mm512_loadu_si512(blk + 64));
            for (int j = 0; j < 4; j++)
                lsum = _mm512_add_epi32(lsum, _mm512_loadu_si512(x->qs + 64 * j));
            continue;
        }
        const __m128i sm = v == NOSCALE ? sm0 : hm_k4_scales_vec(w[i].scales);
        const __m512i sc = v == NOSCALE ? sc0 : _mm512_castsi256_si512(_mm256_cvtepu8_epi16(sm));
        const __m128 dd = hm_dmin_f32(&w[i].d);
        const __m512 d = _mm512_broadcastss_ps(dd);
        const __m512 fd = _mm512_mul_ps(d, _mm512_set1_ps(x->d));
        if (v != NOMINS) {
            const __m256 mdm =
                _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8))),
                              _mm256_broadcastss_ps(_mm_movehdup_ps(dd)));
            accm = _mm256_fmadd_ps(mdm, _mm256_loadu_ps(xs + HM_Q8_KX_SUMS * i), accm);
        }
        __m512i sumi = _mm512_setzero_si512(), p[4];
        for (int j = 0; j < 4; j++)
            p[j] = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                       hm_k4_codes_avx512(w[i].qs + 32 * j, nib),
                                       _mm512_loadu_si512(x->qs + 64 * j));
        for (int pr = 0; pr < 2; pr++) {
            const __m512i s16 =
                v == NOPERM
                    ? sc
                    : _mm512_permutexvar_epi16(_mm512_load_si512(hm_k4_pidx_avx512[pr]), sc);
            sumi = _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(p[2 * pr], p[2 * pr + 1]), s16);
        }
        acc = _mm512_fmadd_ps(fd, _mm512_cvtepi32_ps(sumi), acc);
    }
    if (v == LOADS) return (float)_mm512_reduce_add_epi32(lsum);
    return hm_kdmin_result_avx512(acc, accm);
}

#define VARIANT(V)                                                                                 \
    static __attribute__((noinline)) float row_##V(int64_t n, const void *w, const void *x) {      \
        return row(n, w, x, V);                                                                    \
    }
VARIANT(FULL)
VARIANT(NOPF)
VARIANT(PF1)
VARIANT(NOSCALE)
VARIANT(NOMINS)
VARIANT(NOPERM)
VARIANT(LOADS)
static float (*const k_fns[N_VAR])(int64_t, const void *, const void *) = {
    row_FULL, row_NOPF, row_PF1, row_NOSCALE, row_NOMINS, row_NOPERM, row_LOADS};

int main(int argc, char **argv) {
    const int rows = argc > 1 ? atoi(argv[1]) : 48, cols = argc > 2 ? atoi(argv[2]) : 2048;
    const hm_cpu_ops *ops;
    if (rows < 1 || cols < 256 || cols % 256 || hm_cpu_ops_get(&ops) != HM_OK ||
        ops->isa < HM_ISA_AVX512) {
        fprintf(stderr, "q4k_parts: bad arguments or no AVX-512\n");
        return 1;
    }
    const size_t rb = (size_t)cols / 256 * sizeof(hm_block_q4_K);
    uint8_t *w = aligned_alloc(64, (size_t)rows * rb);
    float *x = malloc(sizeof(float) * (size_t)cols);
    const size_t ab = hm_act_bytes(HM_TYPE_Q4_K, cols);
    uint8_t *xq = aligned_alloc(64, (ab + 63) / 64 * 64);
    if (!w || !x || !xq) return 1;
    hm_synth_fill(HM_TYPE_Q4_K, w, (uint64_t)rows * (uint64_t)cols, 0.0f, 0.02f, 1);
    for (int i = 0; i < cols; i++) x[i] = (float)((i * 37) % 11) - 5.0f;
    hm_act_convert(HM_TYPE_Q4_K, x, xq, cols);
    const float ref = ops->vec_dot[HM_TYPE_Q4_K](cols, w, xq), mine = k_fns[FULL](cols, w, xq);
    printf("q4k_parts %s, %d rows x %d: full %s the kernel (%g / %g)\n", ops->name, rows, cols,
           ref == mine ? "equals" : "DIFFERS FROM", mine, ref);
    for (int v = 0; v < N_VAR; v++) {
        float s = 0;
        double best = 1e30;
        for (int it = 0; it < 200; it++) {
            const uint64_t t0 = hm_time_ns();
            for (int r = 0; r < rows; r++) s += k_fns[v](cols, w + (size_t)r * rb, xq);
            const double ns = (double)(hm_time_ns() - t0);
            best = ns < best ? ns : best;
        }
        printf("  %-8s %.2f ns per block (checksum %g)\n", k_names[v],
               best / rows / ((double)cols / 256), s);
    }
    free(w), free(x), free(xq);
    return 0;
}
