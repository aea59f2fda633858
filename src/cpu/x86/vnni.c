/* vnni.c - the AVX-512 VNNI int8 matmul of the avx512 variant (CPUs with AVX-512 but no AMX), over
 * amx.c's packed activations and weight units; compiled with the avx512 flags only. */
#include <immintrin.h>
#include <string.h>

#include "cpu/ops.h"
#include "cpu/x86/i8_units.h"

/* ---------------------------------------------------------------- AVX-512 VNNI int8 matmul
 * The same packed activations and weight units as the tile path, for AVX-512 CPUs without AMX
 * (VPDPBUSD: u8 x s8, 4 products per int32 lane). Lanes are 16 tokens of one 4-value quad; each
 * weight row's quad is broadcast. VPDPBUSD wants one unsigned operand, so the activations are
 * flipped to x + 128 on load and 128 * (the row's sum over the group) is taken off again before
 * the fold: exact in int32, so the products equal the tile path's bit for bit per group and the
 * folds are the same float operations in the same order. Blocking: 4 rows x 32 tokens, 8 int32
 * and 8 float accumulators in registers; one fold per 256-value group. */

static void vnni_unit(const amx_act *a, const int8_t *A, const float *sw, int n_tok, int nr,
                      float *y, size_t y_stride, const amx_scratch *s) {
    int32_t *wsum = (int32_t *)s->wrow; /* the rows' sums [32][ngrp] */
    const int64_t kp = a->kp, ng = a->ngrp;
    const __m512i ones = _mm512_set1_epi8(1), flip = _mm512_set1_epi8((char)0x80);
    for (int r = 0; r < 32; r++) {
        const int8_t *row = A + (size_t)(r / 16) * 16 * (size_t)kp + (size_t)(r % 16) * 64;
        for (int64_t g = 0; g < ng; g++) {
            __m512i acc = _mm512_setzero_si512();
            for (int64_t k = g * AMX_G; k < kp && k < (g + 1) * AMX_G; k += 64)
                acc = _mm512_dpbusd_epi32(acc, ones, _mm512_load_si512(row + (k / 64) * 1024));
            wsum[r * ng + g] = 128 * _mm512_reduce_add_epi32(acc);
        }
    }
    _Alignas(64) float tmp[16];
    for (int tg = 0; tg < a->tp * 2 && tg * 16 < n_tok; tg += 2) {
        const bool two = (tg + 1) * 16 < n_tok;
        const int8_t *X0 = a->q + (size_t)tg * 16 * (size_t)kp, *X1 = X0 + 16 * (size_t)kp;
        const float *dx0 = a->dx + (size_t)tg * ng * 16, *dx1 = dx0 + ng * 16;
        for (int rb = 0; rb < nr; rb += 4) {
            const int8_t *W = A + (size_t)(rb / 16) * 16 * (size_t)kp + (size_t)(rb % 16) * 64;
            __m512 f00 = _mm512_setzero_ps(), f01 = f00, f10 = f00, f11 = f00, f20 = f00, f21 = f00,
                   f30 = f00, f31 = f00;
            for (int64_t g = 0; g < ng; g++) {
                __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00,
                        c21 = c00, c30 = c00, c31 = c00;
                const int64_t k1 = (g + 1) * AMX_G < kp ? (g + 1) * AMX_G : kp;
                for (int64_t k = g * AMX_G; k < k1; k += 4) {
                    const __m512i x0 = _mm512_xor_si512(_mm512_load_si512(X0 + k * 16), flip);
                    const __m512i x1 =
                        two ? _mm512_xor_si512(_mm512_load_si512(X1 + k * 16), flip) : flip;
                    const int8_t *wk = W + (k / 64) * 1024 + (k % 64);
                    int32_t w0, w1, w2, w3;
                    memcpy(&w0, wk, 4), memcpy(&w1, wk + 64, 4), memcpy(&w2, wk + 128, 4),
                        memcpy(&w3, wk + 192, 4);
                    const __m512i b0 = _mm512_set1_epi32(w0), b1 = _mm512_set1_epi32(w1),
                                  b2 = _mm512_set1_epi32(w2), b3 = _mm512_set1_epi32(w3);
                    c00 = _mm512_dpbusd_epi32(c00, x0, b0), c01 = _mm512_dpbusd_epi32(c01, x1, b0);
                    c10 = _mm512_dpbusd_epi32(c10, x0, b1), c11 = _mm512_dpbusd_epi32(c11, x1, b1);
                    c20 = _mm512_dpbusd_epi32(c20, x0, b2), c21 = _mm512_dpbusd_epi32(c21, x1, b2);
                    c30 = _mm512_dpbusd_epi32(c30, x0, b3), c31 = _mm512_dpbusd_epi32(c31, x1, b3);
                }
                const __m512 d0 = _mm512_loadu_ps(dx0 + g * 16), d1 = _mm512_loadu_ps(dx1 + g * 16);
                const float *swg = sw + g * 32 + rb;
#define VNNI_FOLD(c, f, i, d)                                                                      \
    f = _mm512_fmadd_ps(                                                                           \
        _mm512_cvtepi32_ps(_mm512_sub_epi32(c, _mm512_set1_epi32(wsum[(rb + i) * ng + g]))),       \
        _mm512_mul_ps(d, _mm512_set1_ps(swg[i])), f)
                VNNI_FOLD(c00, f00, 0, d0);
                VNNI_FOLD(c01, f01, 0, d1);
                VNNI_FOLD(c10, f10, 1, d0);
                VNNI_FOLD(c11, f11, 1, d1);
                VNNI_FOLD(c20, f20, 2, d0);
                VNNI_FOLD(c21, f21, 2, d1);
                VNNI_FOLD(c30, f30, 3, d0);
                VNNI_FOLD(c31, f31, 3, d1);
#undef VNNI_FOLD
            }
            const __m512 fr[4][2] = {{f00, f01}, {f10, f11}, {f20, f21}, {f30, f31}};
            for (int i = 0; i < 4 && rb + i < nr; i++)
                for (int j = 0; j < (two ? 2 : 1); j++) {
                    _mm512_store_ps(tmp, fr[i][j]);
                    const int t0 = (tg + j) * 16;
                    for (int t = 0; t < 16 && t0 + t < n_tok; t++)
                        y[(size_t)(t0 + t) * y_stride + (size_t)(rb + i)] = tmp[t];
                }
        }
    }
}

void hm_vnni_matmul(uint32_t type, const void *w, size_t row_bytes, int64_t cols, int64_t r0,
                    int64_t r1, const void *packed, int n_tok, float *y, size_t y_stride,
                    void *scratch) {
    i8_matmul_units(vnni_unit, type, w, row_bytes, NULL, r1, cols, r0, r1, packed, n_tok, y,
                    y_stride, scratch);
}

void hm_vnni_matmul_packed(const void *wp, int64_t rows, int64_t cols, int64_t r0, int64_t r1,
                           const void *packed, int n_tok, float *y, size_t y_stride,
                           void *scratch) {
    i8_matmul_units(vnni_unit, 0, NULL, 0, wp, rows, cols, r0, r1, packed, n_tok, y, y_stride,
                    scratch);
}
