/* amx.c - AMX (TILE/INT8/BF16) tile kernels, and the activation packers, weight conversion and
 * repacking that the avx512 variant's VNNI matmul (vnni.c) shares (so compiled without GFNI /
 * VBMI); the amx variant's table is in amx_ops.c. */
#include <math.h>
#include <immintrin.h>
#include <string.h>

#include "cpu/ops.h"
#include "quant/ref.h"
#include "cpu/x86/i8_units.h"
#include "cpu/x86/kernels_avx512.h"

/* Palette-1 tile configuration (64 bytes, layout fixed by the ISA). */
typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* hm_amx_selftest's tile product, on a CPU whose AMX the caller (ops.c) has checked: a function
 * of this file may use AVX-512 anywhere, even in its prologue (a sanitizer build's stack
 * poisoning does), so none runs before that check */
hm_status hm_amx_selftest_tiles(void) {
    enum { M = 16, N = 16, K = 64 };
    _Alignas(64) int8_t a[M][K];
    _Alignas(64) int8_t b[K][N];
    _Alignas(64) int8_t bv[K / 4][N][4]; /* VNNI layout: 4 consecutive k of one column */
    _Alignas(64) int32_t c[M][N];
    uint32_t s = 12345;
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) a[i][k] = (int8_t)((s = s * 1103515245u + 12345u) >> 24);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++) b[k][j] = (int8_t)((s = s * 1103515245u + 12345u) >> 24);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++) bv[k / 4][j][k % 4] = b[k][j];

    /* a constant object, not one built on the stack: see k_tile_config below */
    static const _Alignas(64) tile_config cfg = {
        .palette_id = 1,
        .colsb = {N * 4, K, N * 4}, /* C: 16 x 16 int32, A: 16 x 64 int8, B: 16 x (16 x 4) */
        .rows = {M, M, K / 4},
    };
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_loadd(1, a, K);
    _tile_loadd(2, bv, N * 4);
    _tile_dpbssd(0, 1, 2);
    _tile_stored(0, c, N * 4);
    _tile_release();

    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            int32_t ref = 0;
            for (int k = 0; k < K; k++) ref += (int32_t)a[i][k] * b[k][j];
            if (ref != c[i][j])
                return hm_errorf(HM_ERR_INTERNAL, "AMX self-test: C[%d][%d] = %d, expected %d", i,
                                 j, c[i][j], ref);
        }
    return HM_OK;
}

/* ---------------------------------------------------------------- AMX INT8 matmul
 * Any weight type we can dequantize, times float activations, both as int8 with one float scale
 * per 256 values (per row for weights, per token for activations):
 *   y[t][r] = sum_g sw[r][g] * dx[t][g] * (Qw_g . Qx_g)[r][t]
 * Within a 256-group the int8 products accumulate in int32 inside the tiles (K = 64 per
 * TDPBSSD, 4 per group), so the float work is one fold per group instead of one per 32-block.
 * That costs one more rounding: the weights' dequantized values are re-quantized to int8 per 256
 * (relative error ~0.2% of the group's max |w|, far below a 4- to 6-bit format's own error; for
 * Q8_0 it is comparable to Q8_0's). Measured against float64 in test_kernels.
 * Blocking: 32 rows x 32 tokens per step (A0 A1 = two 16-row weight tiles, B0 B1 = two 16-token
 * activation tiles, C00..C11 = four int32 accumulators), so every tile load feeds two products.
 * Weights are converted per 32-row group into the thread's scratch (row-major int8, as tile A
 * loads them) and reused for every token pair; activations are packed once per call (VNNI).
 * Layouts: src/quant/README.md. */

size_t hm_amx_act_bytes(uint32_t type, int64_t cols, int n_tok) {
    (void)type;
    amx_act a = act_layout(cols, n_tok, NULL);
    return (size_t)((uintptr_t)a.dx + (size_t)a.tp * 32 * (size_t)a.ngrp * sizeof(float)) + 64;
}

static inline __mmask16 tail_mask(int left) {
    return left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
}

/* One token's full 256-value group (x; its codes in four 64-byte pieces to dst, dst_step apart):
 * the same codes and scale as quant_group's masked loops for short groups (the same max,
 * multiply and round to nearest even; int32 -> int16 -> int8 saturation is int32 -> int8
 * saturation), from registers in one pass over the floats, four vectors packed into one 64-byte
 * store. */
static inline float quant_group256(const float *x, int8_t *dst, size_t dst_step) {
    __m512 v[16];
    __m512 mx = _mm512_setzero_ps();
    for (int i = 0; i < 16; i++) {
        v[i] = _mm512_loadu_ps(x + 16 * i);
        mx = _mm512_max_ps(mx, _mm512_abs_ps(v[i]));
    }
    const float d = _mm512_reduce_max_ps(mx) / 127.0f;
    const __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    /* packs work per 128-bit lane: lane j then holds dwords (a_j, b_j, c_j, d_j) of the four
     * vectors' quads; this puts quad j of vector k at dword 4 k + j */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (int c = 0; c < 4; c++) {
        const __m512i a = _mm512_cvtps_epi32(_mm512_mul_ps(v[4 * c], id)),
                      b = _mm512_cvtps_epi32(_mm512_mul_ps(v[4 * c + 1], id)),
                      e = _mm512_cvtps_epi32(_mm512_mul_ps(v[4 * c + 2], id)),
                      f = _mm512_cvtps_epi32(_mm512_mul_ps(v[4 * c + 3], id));
        const __m512i q = _mm512_packs_epi16(_mm512_packs_epi32(a, b), _mm512_packs_epi32(e, f));
        _mm512_storeu_si512(dst + (size_t)c * dst_step, _mm512_permutexvar_epi32(order, q));
    }
    return d;
}

/* n (<= 256) floats -> int8 codes (round to nearest even) in q[0..n), zeros up to pad; returns
 * the scale max|x| / 127 (a full group: quant_group256) */
static inline float quant_group(const float *x, int n, int8_t *q, int pad) {
    if (n == AMX_G) return quant_group256(x, q, 64);
    __m512 mx = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16)
        mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_maskz_loadu_ps(tail_mask(n - i), x + i)));
    const float d = _mm512_reduce_max_ps(mx) / 127.0f;
    const __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    for (int i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), id));
        _mm_mask_storeu_epi8(q + i, k, _mm512_cvtsepi32_epi8(v));
    }
    if (pad > n) memset(q + n, 0, (size_t)(pad - n));
    return d;
}

/* The 16 x 16 matrix of 32-bit lanes in r (row i = token i's 64 bytes) transposed in place: row
 * j then holds lane j (4 consecutive k) of every token, one 64-byte row of a B tile. */
static inline void transpose16_epi32(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 16; i += 8)
        for (int j = 0; j < 4; j++) {
            t[i + j] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0x88);
            t[i + j + 4] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0xdd);
        }
    for (int j = 0; j < 8; j++) {
        r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
    }
}

/* 64 bytes of k from each of 16 token rows (NULL: a zero row) into the 1 KiB of a B tile they
 * make: 16 full-line loads and an in-register transpose (a 32-bit gather per tile row was 5x
 * slower once the rows sat in other cores' caches) */
static inline void pack_b64(const int8_t *const rows[16], int64_t k, int8_t *dst) {
    __m512i r[16];
    for (int i = 0; i < 16; i++)
        r[i] = rows[i] ? _mm512_loadu_si512(rows[i] + k) : _mm512_setzero_si512();
    transpose16_epi32(r);
    for (int j = 0; j < 16; j++) _mm512_store_si512(dst + 64 * j, r[j]);
}

/* Scale group gi of the 16-token group g: quantized and packed (codes and scales), into the
 * VNNI tiles (row tile k / 4 holds each token's values k .. k + 3) or, rt, the row tiles (row tl
 * of tile k / 64 holds token tl's values k .. k + 63); tokens past n_tok code 0. xg: the group's
 * first value of row 0 (row r's at xg + r * x_stride) */
static void pack_group(const amx_act *a, const float *xg, size_t x_stride, const int32_t *idx,
                       int n_tok, int64_t cols, int g, int64_t gi, bool rt) {
    _Alignas(64) int8_t qt[16][AMX_G];
    int8_t *T = a->q + (size_t)g * 16 * (size_t)a->kp;
    const int8_t *rows[16];
    const int64_t c0 = gi * AMX_G;
    const int len = (int)(cols - c0 < AMX_G ? cols - c0 : AMX_G);
    const int plen = (int)(a->kp - c0 < AMX_G ? a->kp - c0 : AMX_G);
    if (rt && len == AMX_G) { /* a full group: each token's codes straight into its tile rows */
        for (int tl = 0; tl < 16; tl++) {
            const int t = g * 16 + tl;
            int8_t *dst = T + (size_t)c0 / 64 * 1024 + (size_t)tl * 64;
            float d = 0.0f;
            if (t < n_tok)
                d = quant_group256(xg + (size_t)(idx ? idx[t] : t) * x_stride, dst, 1024);
            else
                for (int c = 0; c < 4; c++)
                    _mm512_store_si512(dst + c * 1024, _mm512_setzero_si512());
            a->dx[((size_t)g * a->ngrp + gi) * 16 + tl] = d;
        }
        return;
    }
    for (int tl = 0; tl < 16; tl++) {
        const int t = g * 16 + tl;
        float d = 0.0f;
        rows[tl] = NULL;
        if (t < n_tok) {
            d = quant_group(xg + (size_t)(idx ? idx[t] : t) * x_stride, len, qt[tl], plen);
            rows[tl] = qt[tl];
        }
        a->dx[((size_t)g * a->ngrp + gi) * 16 + tl] = d;
    }
    if (!rt) {
        for (int i = 0; i < plen; i += 64) pack_b64(rows, i, T + (c0 + i) / 4 * 64);
        return;
    }
    for (int tl = 0; tl < 16; tl++)
        for (int i = 0; i < plen; i += 64)
            _mm512_store_si512(T + (size_t)(c0 + i) / 64 * 1024 + (size_t)tl * 64,
                               rows[tl] ? _mm512_load_si512(rows[tl] + i) : _mm512_setzero_si512());
}

/* 16-token groups [g0, g1) over every scale group, or one scale group gi over every token group */
static void pack_tokens(const float *x, size_t x_stride, const int32_t *idx, int n_tok,
                        int64_t cols, void *packed, int g0, int g1, bool rt) {
    const amx_act a = act_layout(cols, n_tok, packed);
    for (int g = g0; g < g1 && g < a.tp * 2; g++)
        for (int64_t gi = 0; gi < a.ngrp; gi++)
            pack_group(&a, x + gi * AMX_G, x_stride, idx, n_tok, cols, g, gi, rt);
}

static void pack_kgroup(const float *xg, size_t x_stride, int n_tok, int64_t cols, void *packed,
                        int64_t gi, bool rt) {
    const amx_act a = act_layout(cols, n_tok, packed);
    if (gi < 0 || gi >= a.ngrp) return;
    for (int g = 0; g < a.tp * 2; g++) pack_group(&a, xg, x_stride, NULL, n_tok, cols, g, gi, rt);
}

void hm_amx_pack_act(uint32_t type, const float *x, size_t x_stride, const int32_t *idx, int n_tok,
                     int64_t cols, void *packed, int g0, int g1) {
    (void)type;
    pack_tokens(x, x_stride, idx, n_tok, cols, packed, g0, g1, false);
}

void hm_amx_pack_act_group(const float *xg, size_t x_stride, int n_tok, int64_t cols, void *packed,
                           int64_t gi) {
    pack_kgroup(xg, x_stride, n_tok, cols, packed, gi, false);
}

void hm_amx_pack_act_rt(const float *x, size_t x_stride, const int32_t *idx, int n_tok,
                        int64_t cols, void *packed, int g0, int g1) {
    pack_tokens(x, x_stride, idx, n_tok, cols, packed, g0, g1, true);
}

void hm_amx_pack_act_group_rt(const float *xg, size_t x_stride, int n_tok, int64_t cols,
                              void *packed, int64_t gi) {
    pack_kgroup(xg, x_stride, n_tok, cols, packed, gi, true);
}

/* Per-token int8 rows: kp codes then ngrp float scales, 64-byte aligned size */
size_t hm_amx_qrow_bytes(int64_t cols) {
    const int64_t kp = (cols + 63) / 64 * 64, ngrp = (cols + AMX_G - 1) / AMX_G;
    return ((size_t)kp + (size_t)ngrp * sizeof(float) + 63) & ~(size_t)63;
}

void hm_amx_quant_row(const float *x, int64_t cols, void *qrow) {
    const int64_t kp = (cols + 63) / 64 * 64, ngrp = (cols + AMX_G - 1) / AMX_G;
    int8_t *q = qrow;
    float *d = (float *)(q + kp);
    for (int64_t gi = 0; gi < ngrp; gi++) {
        const int64_t c0 = gi * AMX_G;
        const int len = (int)(cols - c0 < AMX_G ? cols - c0 : AMX_G);
        const int plen = (int)(kp - c0 < AMX_G ? kp - c0 : AMX_G);
        d[gi] = quant_group(x + c0, len, q + c0, plen);
    }
}

/* The packed layout of hm_amx_pack_act from rows quantized once (hm_amx_quant_row): each tile row
 * (one 4-value quad of 16 tokens) is one 32-bit gather; or, rt, that of hm_amx_pack_act_rt, where
 * each tile row is one token's 64 codes. Same codes and scales, so the same bits. */
static void pack_act_q(const void *qrows, size_t qrow_bytes, const int32_t *idx, int n_tok,
                       int64_t cols, void *packed, int g0, int g1, bool rt) {
    const amx_act a = act_layout(cols, n_tok, packed);
    const uint8_t *base = qrows;
    for (int g = g0; g < g1 && g < a.tp * 2; g++) {
        int8_t *B = a.q + (size_t)g * 16 * (size_t)a.kp;
        const int8_t *rows[16];
        for (int tl = 0; tl < 16; tl++) {
            const int t = g * 16 + tl;
            rows[tl] =
                t < n_tok ? (const int8_t *)(base + (size_t)(idx ? idx[t] : t) * qrow_bytes) : NULL;
        }
        if (rt) /* row tile k / 64: row tl is token tl's codes k .. k + 63, a 64-byte copy */
            for (int64_t k = 0; k < a.kp; k += 64)
                for (int tl = 0; tl < 16; tl++)
                    _mm512_store_si512(B + k * 16 + 64 * tl, rows[tl]
                                                                 ? _mm512_loadu_si512(rows[tl] + k)
                                                                 : _mm512_setzero_si512());
        else
            for (int64_t k = 0; k < a.kp; k += 64) pack_b64(rows, k, B + k / 4 * 64);
        for (int64_t gi = 0; gi < a.ngrp; gi++)
            for (int tl = 0; tl < 16; tl++)
                a.dx[((size_t)g * a.ngrp + gi) * 16 + tl] =
                    rows[tl] ? *(const float *)((const uint8_t *)rows[tl] + (size_t)a.kp + 4 * gi)
                             : 0.0f;
    }
}

void hm_amx_pack_act_q(const void *qrows, size_t qrow_bytes, const int32_t *idx, int n_tok,
                       int64_t cols, void *packed, int g0, int g1) {
    pack_act_q(qrows, qrow_bytes, idx, n_tok, cols, packed, g0, g1, false);
}

void hm_amx_pack_act_q_rt(const void *qrows, size_t qrow_bytes, const int32_t *idx, int n_tok,
                          int64_t cols, void *packed, int g0, int g1) {
    pack_act_q(qrows, qrow_bytes, idx, n_tok, cols, packed, g0, g1, true);
}

size_t hm_amx_scratch_bytes(uint32_t type, int64_t cols) {
    (void)type;
    amx_scratch s = scratch_layout(cols, NULL);
    /* wrow: a dequantized row while converting, then the VNNI kernel's row sums [32][ngrp] */
    const int64_t ngrp = (cols + AMX_G - 1) / AMX_G, w = cols > 32 * ngrp ? cols : 32 * ngrp;
    return (size_t)((uintptr_t)s.wrow + (size_t)w * sizeof(float)) + 64;
}

size_t hm_amx_wpack_bytes(int64_t rows, int64_t cols) {
    return (size_t)((rows + 31) / 32) * unit_bytes(cols);
}

/* ---- AVX-512 dequantizers for the per-call conversion: the reference dequantizers' float
 * operations on 16 values at a time (the product (d * sc) * q, then a min subtracted or added:
 * the same bits, as -std=c11 contracts nothing), the codes unpacked by vector ops into a 256-value
 * buffer first. The reference ones cost ~10 cycles per value: a Q6_K matrix's per-call
 * conversion took ~35x a 4-token matvec of it (bench/RESULTS.md, 2026-11-30). */

/* w[16g .. 16g + 15] = (float)c[16g + i] * s[g] (- m[g] when m) for the n / 16 groups */
static void deq_groups(const int8_t *c, int n, const float *s, const float *m, float *w) {
    for (int g = 0; g < n / 16; g++) {
        const __m512 v = _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(c + 16 * g)))),
            _mm512_set1_ps(s[g]));
        _mm512_storeu_ps(w + 16 * g, m ? _mm512_sub_ps(v, _mm512_set1_ps(m[g])) : v);
    }
}

/* a 32-block's 16 code bytes as 32 codes: elements 0-15 the low nibbles, 16-31 the high ones */
static inline __m256i nibbles32(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(15);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(q, m)),
                                   _mm_and_si128(_mm_srli_epi16(q, 4), m), 1);
}

/* 2-bit plane p of 32 bytes (Q2_K, Q3_K): (q >> 2p) & 3 per byte */
static inline __m256i plane2(__m256i q, int p) {
    return _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * p)), _mm256_set1_epi8(3));
}

static void deq_row_simd(uint32_t type, const void *row, int64_t cols, float *w) {
    _Alignas(64) int8_t c[HM_QK_K];
    float s[16], m[16];
    const __m256i m0f = _mm256_set1_epi8(15);
    switch (type) {
    case HM_TYPE_Q6_K: {
        const hm_block_q6_K *b = row;
        for (int64_t i = 0; i < cols / HM_QK_K; i++, w += HM_QK_K) {
            const float d = hm_h2f(b[i].d);
            for (int h = 0; h < 2; h++) { /* element 128h + 32p + l: ql and qh as in q6_code */
                const __m256i qh = _mm256_loadu_si256((const __m256i *)(b[i].qh + 32 * h));
                for (int p = 0; p < 4; p++) {
                    const __m256i lq =
                        _mm256_loadu_si256((const __m256i *)(b[i].ql + 64 * h + 32 * (p & 1)));
                    const __m256i lo = p < 2 ? _mm256_and_si256(lq, m0f)
                                             : _mm256_and_si256(_mm256_srli_epi16(lq, 4), m0f);
                    _mm256_store_si256(
                        (__m256i *)(c + 128 * h + 32 * p),
                        _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(plane2(qh, p), 4)),
                                        _mm256_set1_epi8(32)));
                }
            }
            for (int g = 0; g < 16; g++) s[g] = d * (float)b[i].scales[g];
            deq_groups(c, HM_QK_K, s, NULL, w);
        }
        return;
    }
    case HM_TYPE_Q5_K: {
        const hm_block_q5_K *b = row;
        for (int64_t i = 0; i < cols / HM_QK_K; i++, w += HM_QK_K) {
            const float d = hm_h2f(b[i].d), dmin = hm_h2f(b[i].dmin);
            const __m256i qh = _mm256_loadu_si256((const __m256i *)b[i].qh);
            for (int j = 0; j < 8; j++) { /* sub-block j: nibble of qs[32 (j / 2) + l], bit j */
                const __m256i q = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * (j / 2)));
                const __m256i lo = (j & 1) ? _mm256_and_si256(_mm256_srli_epi16(q, 4), m0f)
                                           : _mm256_and_si256(q, m0f);
                const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j)),
                                                    _mm256_set1_epi8(1));
                _mm256_store_si256((__m256i *)(c + 32 * j),
                                   _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4)));
                uint8_t sc, mn;
                hm_k4_scale_min(b[i].scales, j, &sc, &mn);
                s[2 * j] = s[2 * j + 1] = d * (float)sc;
                m[2 * j] = m[2 * j + 1] = dmin * (float)mn;
            }
            deq_groups(c, HM_QK_K, s, m, w);
        }
        return;
    }
    case HM_TYPE_Q3_K: {
        const hm_block_q3_K *b = row;
        for (int64_t i = 0; i < cols / HM_QK_K; i++, w += HM_QK_K) {
            const float d = hm_h2f(b[i].d);
            const __m256i hm = _mm256_loadu_si256((const __m256i *)b[i].hmask);
            for (int h = 0; h < 2; h++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * h));
                for (int p = 0; p < 4; p++) { /* lo - 4 where the high bit is clear */
                    const __m256i hb = _mm256_and_si256(
                        _mm256_srl_epi16(hm, _mm_cvtsi32_si128(4 * h + p)), _mm256_set1_epi8(1));
                    _mm256_store_si256(
                        (__m256i *)(c + 128 * h + 32 * p),
                        _mm256_sub_epi8(_mm256_or_si256(plane2(q, p), _mm256_slli_epi16(hb, 2)),
                                        _mm256_set1_epi8(4)));
                }
            }
            for (int j = 0; j < 16; j++) s[j] = d * (float)hm_q3_scale(b[i].scales, j);
            deq_groups(c, HM_QK_K, s, NULL, w);
        }
        return;
    }
    case HM_TYPE_Q2_K: {
        const hm_block_q2_K *b = row;
        for (int64_t i = 0; i < cols / HM_QK_K; i++, w += HM_QK_K) {
            const float d = hm_h2f(b[i].d), dmin = hm_h2f(b[i].dmin);
            for (int h = 0; h < 2; h++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * h));
                for (int p = 0; p < 4; p++)
                    _mm256_store_si256((__m256i *)(c + 128 * h + 32 * p), plane2(q, p));
            }
            for (int j = 0; j < 16; j++) {
                s[j] = d * (float)(b[i].scales[j] & 0xF);
                m[j] = dmin * (float)(b[i].scales[j] >> 4);
            }
            deq_groups(c, HM_QK_K, s, m, w);
        }
        return;
    }
    case HM_TYPE_IQ4_XS: {
        const hm_block_iq4_xs *b = row;
        const __m256i kv =
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)hm_kvalues_iq4nl));
        for (int64_t i = 0; i < cols / HM_QK_K; i++, w += HM_QK_K) {
            const float d = hm_h2f(b[i].d);
            for (int j = 0; j < 8; j++) {
                _mm256_store_si256((__m256i *)(c + 32 * j),
                                   _mm256_shuffle_epi8(kv, nibbles32(b[i].qs + 16 * j)));
                s[2 * j] = s[2 * j + 1] = d * (float)hm_iq4_xs_scale(&b[i], j);
            }
            deq_groups(c, HM_QK_K, s, NULL, w);
        }
        return;
    }
    default:
        break;
    }
    /* the 32-blocks: (float)q * d (+ m for Q4_1 / Q5_1), q from nibbles (+ the fifth bit) or a
     * table */
    const int64_t nb = cols / 32;
    const bool with_min = type == HM_TYPE_Q4_1 || type == HM_TYPE_Q5_1;
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128(
        (const __m128i *)(type == HM_TYPE_MXFP4 ? hm_kvalues_mxfp4 : hm_kvalues_iq4nl)));
    for (int64_t i = 0; i < nb; i++, w += 32) {
        __m256i q;
        float d, mn = 0.0f;
        switch (type) {
        case HM_TYPE_Q4_0: {
            const hm_block_q4_0 *b = (const hm_block_q4_0 *)row + i;
            q = _mm256_sub_epi8(nibbles32(b->qs), _mm256_set1_epi8(8)), d = hm_h2f(b->d);
            break;
        }
        case HM_TYPE_Q4_1: {
            const hm_block_q4_1 *b = (const hm_block_q4_1 *)row + i;
            q = nibbles32(b->qs), d = hm_h2f(b->d), mn = hm_h2f(b->m);
            break;
        }
        case HM_TYPE_Q5_0:
        case HM_TYPE_Q5_1: {
            const uint8_t *qh, *qs;
            if (type == HM_TYPE_Q5_0) {
                const hm_block_q5_0 *b = (const hm_block_q5_0 *)row + i;
                qh = b->qh, qs = b->qs, d = hm_h2f(b->d);
            } else {
                const hm_block_q5_1 *b = (const hm_block_q5_1 *)row + i;
                qh = b->qh, qs = b->qs, d = hm_h2f(b->d), mn = hm_h2f(b->m);
            }
            uint32_t hb;
            memcpy(&hb, qh, 4);
            q = _mm256_or_si256(nibbles32(qs),
                                _mm256_maskz_mov_epi8((__mmask32)hb, _mm256_set1_epi8(16)));
            if (type == HM_TYPE_Q5_0) q = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
            break;
        }
        case HM_TYPE_IQ4_NL: {
            const hm_block_iq4_nl *b = (const hm_block_iq4_nl *)row + i;
            q = _mm256_shuffle_epi8(kv, nibbles32(b->qs)), d = hm_h2f(b->d);
            break;
        }
        default: { /* MXFP4 */
            const hm_block_mxfp4 *b = (const hm_block_mxfp4 *)row + i;
            q = _mm256_shuffle_epi8(kv, nibbles32(b->qs)), d = hm_e8m0_to_f32_half(b->e);
            break;
        }
        }
        for (int h = 0; h < 2; h++) {
            const __m512 v =
                _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                  h ? _mm256_extracti128_si256(q, 1) : _mm256_castsi256_si128(q))),
                              _mm512_set1_ps(d));
            _mm512_storeu_ps(w + 16 * h, with_min ? _mm512_add_ps(v, _mm512_set1_ps(mn)) : v);
        }
    }
}

/* Dequantizes one weight row to floats: AVX-512 for the main expert formats, else the
 * reference dequantizer. */
static void dequant_row(uint32_t type, const void *row, int64_t cols, float *w) {
    if (type == HM_TYPE_Q4_K) {
        const hm_block_q4_K *b = row;
        for (int64_t i = 0; i < cols / HM_QK_K; i++) {
            const float d = hm_h2f(b[i].d), dmin = hm_h2f(b[i].dmin);
            for (int c = 0; c < 4; c++) { /* 64-chunk: sub-blocks 2c (low) and 2c+1 (high) */
                uint8_t s0, m0, s1, m1;
                hm_k4_scale_min(b[i].scales, 2 * c, &s0, &m0);
                hm_k4_scale_min(b[i].scales, 2 * c + 1, &s1, &m1);
                const __m512 d0 = _mm512_set1_ps(d * (float)s0),
                             n0 = _mm512_set1_ps(dmin * (float)m0);
                const __m512 d1 = _mm512_set1_ps(d * (float)s1),
                             n1 = _mm512_set1_ps(dmin * (float)m1);
                float *o = w + 256 * i + 64 * c;
                for (int h = 0; h < 2; h++) {
                    const __m128i q = _mm_loadu_si128((const __m128i *)(b[i].qs + 32 * c + 16 * h));
                    const __m512i lo = _mm512_cvtepu8_epi32(_mm_and_si128(q, _mm_set1_epi8(15)));
                    const __m512i hi = _mm512_cvtepu8_epi32(
                        _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(15)));
                    _mm512_storeu_ps(o + 16 * h,
                                     _mm512_sub_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(lo), d0), n0));
                    _mm512_storeu_ps(o + 32 + 16 * h,
                                     _mm512_sub_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(hi), d1), n1));
                }
            }
        }
        return;
    }
    if (type == HM_TYPE_Q8_0) {
        const hm_block_q8_0 *b = row;
        for (int64_t i = 0; i < cols / HM_QK8_0; i++) {
            const __m512 d = _mm512_set1_ps(hm_h2f(b[i].d));
            for (int h = 0; h < 2; h++) {
                const __m512i q =
                    _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b[i].qs + 16 * h)));
                _mm512_storeu_ps(w + 32 * i + 16 * h, _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
            }
        }
        return;
    }
    if (hm_i8_block(type)) { /* every other integer format (Q4_K and Q8_0 above) */
        deq_row_simd(type, row, cols, w);
        return;
    }
    hm_dequantize_row(type, row, w, cols);
}

void hm_amx_dequant_row(uint32_t type, const void *row, int64_t cols, float *w) {
    dequant_row(type, row, cols, w);
}

/* Q4_K row straight to int8 tile chunks: within a 32-value sub-block w = a*q + b with only 16
 * codes, so each sub-block's int8 values are a 16-entry table looked up with a byte shuffle; the
 * 256-value scale comes from the table ends (max |w| over q in 0..15, a bound of the actual max).
 * About 4x fewer instructions than dequantizing to float and re-quantizing. */
static void convert_row_q4_K(const hm_block_q4_K *b, int64_t nblk, int8_t *A, float *sw) {
    const __m512 qv = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m256i m0f = _mm256_set1_epi8(15);
    for (int64_t i = 0; i < nblk; i++) {
        const float d = hm_h2f(b[i].d), dmin = hm_h2f(b[i].dmin);
        float a[8], o[8], mx = 0.0f;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            hm_k4_scale_min(b[i].scales, j, &sc, &m);
            a[j] = d * (float)sc, o[j] = -dmin * (float)m;
            const float e0 = fabsf(o[j]), e1 = fabsf(15.0f * a[j] + o[j]);
            mx = e0 > mx ? e0 : mx;
            mx = e1 > mx ? e1 : mx;
        }
        const float scale = mx / 127.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
        sw[i * 32] = scale;
        for (int c = 0; c < 4; c++) {
            __m256i lut[2];
            for (int h = 0; h < 2; h++) {
                const int j = 2 * c + h;
                const __m512 v =
                    _mm512_fmadd_ps(qv, _mm512_set1_ps(a[j] * inv), _mm512_set1_ps(o[j] * inv));
                lut[h] = _mm256_broadcastsi128_si256(_mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v)));
            }
            const __m256i q = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * c));
            const __m256i lo = _mm256_shuffle_epi8(lut[0], _mm256_and_si256(q, m0f));
            const __m256i hi =
                _mm256_shuffle_epi8(lut[1], _mm256_and_si256(_mm256_srli_epi16(q, 4), m0f));
            /* one full-line store: tile loads of half-written lines stall */
            _mm512_store_si512(A + (size_t)(4 * i + c) * 1024,
                               _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
        }
    }
}

/* rows rg..rg+nr-1 (nr <= 32) -> one unit: int8 tile rows A[32][kp] + scales sw[g][32]; missing
 * rows 0; wrow: cols floats of scratch */
void hm_amx_convert_rows(uint32_t type, const uint8_t *w, size_t row_bytes, int64_t cols, int nr,
                         int8_t *unit, float *wrow) {
    const int64_t kp = (cols + 63) / 64 * 64, ngrp = (cols + AMX_G - 1) / AMX_G;
    float *sw = (float *)(unit + 32 * kp);
    _Alignas(64) int8_t qg[AMX_G];
    for (int n = 0; n < 32; n++) {
        /* row n's 64-value chunk k sits at A + ((n / 16) * (kp / 64) + k) * 1024 + (n % 16) * 64 */
        int8_t *A = unit + (size_t)(n / 16) * (size_t)kp * 16 + (size_t)(n % 16) * 64;
        if (n >= nr) {
            for (int64_t k = 0; k < kp / 64; k++) memset(A + k * 1024, 0, 64);
            for (int64_t g = 0; g < ngrp; g++) sw[g * 32 + n] = 0.0f;
            continue;
        }
        if (type == HM_TYPE_Q4_K && kp == cols) {
            convert_row_q4_K((const hm_block_q4_K *)(w + (size_t)n * row_bytes), cols / HM_QK_K, A,
                             sw + n);
            continue;
        }
        dequant_row(type, w + (size_t)n * row_bytes, cols, wrow);
        for (int64_t g = 0; g < ngrp; g++) {
            const int64_t c0 = g * AMX_G;
            const int len = (int)(cols - c0 < AMX_G ? cols - c0 : AMX_G);
            const int plen = (int)(kp - c0 < AMX_G ? kp - c0 : AMX_G);
            sw[g * 32 + n] = quant_group(wrow + c0, len, qg, plen);
            for (int i = 0; i < plen; i += 64)
                _mm512_store_si512(A + (c0 + i) / 64 * 1024, _mm512_load_si512(qg + i));
        }
    }
}

/* Every tile 16 rows x 64 bytes: C 0-3 (16 rows x 16 int32), A 4-5 (16 rows x 64 int8), B 6-7
 * (16 x (16 tokens x 4)). A constant object: gcc 12 with -march=native dropped the stores to a
 * stack-built config before LDTILECFG (it does not see the instruction read them), leaving every
 * tile unconfigured (#UD on the first tile op). */
static const _Alignas(64) tile_config k_tile_config = {
    .palette_id = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

static void amx_config(void) {
    _tile_loadconfig(&k_tile_config);
}

double hm_amx_peak_ops(hm_peak_kind kind, int64_t iters) {
    if (kind == HM_PEAK_F32) return hm_peak_ops_avx512(kind, iters);
    _Alignas(64) int8_t ab[2048];
    _Alignas(64) int32_t cb[256];
    for (int i = 0; i < 2048; i += 2) { /* int8 codes, or bf16 1.0 (0x3f80) for the float kind */
        ab[i] = kind == HM_PEAK_I8 ? (int8_t)(i % 7 - 3) : (int8_t)0x80;
        ab[i + 1] = kind == HM_PEAK_I8 ? (int8_t)(i % 5 - 2) : (int8_t)0x3f;
    }
    amx_config();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ab, 64);
    _tile_loadd(5, ab + 1024, 64);
    _tile_loadd(6, ab + 512, 64);
    _tile_loadd(7, ab + 256, 64);
    /* four independent C tiles, as the matmuls' 2 x 2 blocks */
    if (kind == HM_PEAK_I8)
        for (int64_t i = 0; i < iters; i++) {
            _tile_dpbssd(0, 4, 6);
            _tile_dpbssd(1, 5, 6);
            _tile_dpbssd(2, 4, 7);
            _tile_dpbssd(3, 5, 7);
        }
    else
        for (int64_t i = 0; i < iters; i++) {
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 5, 6);
            _tile_dpbf16ps(2, 4, 7);
            _tile_dpbf16ps(3, 5, 7);
        }
    _tile_stored(0, cb, 64);
    _tile_release();
    volatile int32_t sink = cb[0];
    (void)sink;
    /* per product: 16 x 16 outputs of K = 64 int8 (or 32 bf16) multiply-adds */
    return 2.0 * 4 * 16 * 16 * (kind == HM_PEAK_I8 ? 64 : 32) * (double)iters;
}

/* The C tiles 0-3 of a 32-row x 32-token block to cb [4][16][16] (int32 or float); tiles 2-3
 * (the second 16 tokens) only when `two` */
static inline void store_c(void *cb, bool two) {
    uint8_t *b = cb;
    _tile_stored(0, b, 64);
    _tile_stored(1, b + 1024, 64);
    if (two) {
        _tile_stored(2, b + 2048, 64);
        _tile_stored(3, b + 3072, 64);
    }
}

/* acc[i][j] += u[i] * v[j] * C[i][j] for one 16x16 tile stored at cb (acc row stride 32): the
 * tile's rows are weight rows (u = sw, v = dx) or, with the operands swapped, tokens (u = dx,
 * v = sw); either way each product is sw[r] * dx[t] (multiplication commutes) */
static inline __attribute__((always_inline)) void
fold(const int32_t *cb, const float *u, const float *v, float *acc, const bool first) {
    const __m512 vv = _mm512_loadu_ps(v);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
        const __m512 sc = _mm512_mul_ps(vv, _mm512_set1_ps(u[i]));
        /* the first group adds to zero without reading acc (fma onto +0: the same bits) */
        const __m512 a = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + 32 * i);
        _mm512_storeu_ps(
            acc + 32 * i,
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cb + 16 * i)), sc, a));
    }
}

/* fold of a tile whose rows are weight rows (sw first) or, swapped, tokens (dx first) */
static inline __attribute__((always_inline)) void fold_sd(const int32_t *cb, const float *sw,
                                                          const float *dx, float *acc,
                                                          const bool swapped, const bool first) {
    if (swapped)
        fold(cb, dx, sw, acc, first);
    else
        fold(cb, sw, dx, acc, first);
}

/* The folds of one pair's four C tiles (stored at cb) into its acc; tiles 2-3 only with a
 * second token tile, else (on the first group) that half of acc is zeroed */
static inline __attribute__((always_inline)) void
fold_pair(const int32_t *cb, const float *swg, const float *dx0, const float *dx1, float *acc,
          int r16, int t16, bool two_tok, const bool swapped, const bool first) {
    fold_sd(cb, swg, dx0, acc, swapped, first);
    fold_sd(cb + 256, swg + 16, dx0, acc + r16, swapped, first);
    if (two_tok) {
        fold_sd(cb + 512, swg, dx1, acc + t16, swapped, first);
        fold_sd(cb + 768, swg + 16, dx1, acc + t16 + r16, swapped, first);
    } else if (first) { /* tokens 16..31: acc rows 16.. (swapped) or columns 16.. of each row */
        for (int i = 0; i < 32; i++)
            _mm512_store_ps(acc + t16 + (swapped ? 16 : 32) * i, _mm512_setzero_ps());
    }
}

/* Token pairs p0 .. p0 + pn - 1 of one weight unit W (+ scales sw) into acc_all: for each
 * 256-value group, the unit's 8 KiB of that group is used by all pn pairs while it is in L1,
 * each pair's 16 products folded into its float accumulators. Two operand orders:
 *   swapped false: W is A tiles (row-major, hm_amx_wpack), the activations VNNI B tiles; acc is
 *     [pn][32 rows][32 tokens];
 *   swapped true: the activations are row tiles (A, the _rt packers), W VNNI B tiles
 *     (hm_amx_wpack_vnni); acc is [pn][32 tokens][32 rows].
 * C tile c holds (tokens 16 (c / 2) .., rows 16 (c % 2) ..) in both; swapped is a constant at
 * every call, so each instance keeps only its own loads (tile numbers must be constants). */
static inline __attribute__((always_inline)) void
amx_chunk_any(const amx_act *a, const int8_t *W, const float *sw, int n_tok, int p0, int pn,
              float *acc_all, int32_t *cb, const char *pf, size_t pf_bytes, const bool swapped) {
    const int64_t kp = a->kp;
    /* pf: bytes (the next unit's weights) fetched into L2 a few lines per step */
    const int steps = (int)a->ngrp * pn;
    const size_t per = (pf_bytes / 64 + (size_t)steps - 1) / (size_t)steps;
    size_t pfl = 0;
    const int8_t *W1 = W + 16 * kp;
    /* acc offsets of the rows 16.. and the tokens 16.. quadrants */
    const int r16 = swapped ? 16 : 16 * 32, t16 = swapped ? 16 * 32 : 16;
    for (int64_t g = 0; g < a->ngrp; g++) {
        const int64_t k0 = g * AMX_G, k1 = k0 + AMX_G < kp ? k0 + AMX_G : kp;
        const float *swg = sw + g * 32;
        for (int pi = 0; pi < pn; pi++) {
            const int p = p0 + pi;
            const bool two_tok = n_tok - 32 * p > 16;
            const int8_t *X0 = a->q + (size_t)(2 * p) * 16 * (size_t)kp, *X1 = X0 + 16 * (size_t)kp;
            const float *dx0 = a->dx + ((size_t)(2 * p) * a->ngrp + g) * 16,
                        *dx1 = dx0 + a->ngrp * 16;
            float *acc = acc_all + pi * 32 * 32;
            for (size_t e = pfl + per; pfl < e && pfl * 64 < pf_bytes; pfl++)
                _mm_prefetch(pf + pfl * 64, _MM_HINT_T1);
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int64_t k = k0; k < k1; k += 64) {
                if (swapped) { /* 4, 5: tokens; 6, 7: weight rows */
                    _tile_loadd(4, X0 + k * 16, 64);
                    _tile_loadd(6, W + k * 16, 64);
                    _tile_loadd(7, W1 + k * 16, 64);
                    _tile_dpbssd(0, 4, 6);
                    _tile_dpbssd(1, 4, 7);
                    if (two_tok) {
                        _tile_loadd(5, X1 + k * 16, 64);
                        _tile_dpbssd(2, 5, 6);
                        _tile_dpbssd(3, 5, 7);
                    }
                } else { /* 4, 5: weight rows; 6, 7: tokens */
                    _tile_loadd(4, W + k * 16, 64);
                    _tile_loadd(5, W1 + k * 16, 64);
                    _tile_loadd(6, X0 + k * 16, 64);
                    _tile_dpbssd(0, 4, 6);
                    _tile_dpbssd(1, 5, 6);
                    if (two_tok) {
                        _tile_loadd(7, X1 + k * 16, 64);
                        _tile_dpbssd(2, 4, 7);
                        _tile_dpbssd(3, 5, 7);
                    }
                }
            }
            store_c(cb, two_tok);
            /* the first group's folds write acc without reading it (no zeroing pass) */
            if (g == 0)
                fold_pair(cb, swg, dx0, dx1, acc, r16, t16, two_tok, swapped, true);
            else
                fold_pair(cb, swg, dx0, dx1, acc, r16, t16, two_tok, swapped, false);
        }
    }
}

static void amx_chunk(const amx_act *a, const int8_t *A, const float *sw, int n_tok, int p0, int pn,
                      float *acc_all, int32_t *cb) {
    amx_chunk_any(a, A, sw, n_tok, p0, pn, acc_all, cb, NULL, 0, false);
}

static void amx_chunk_rt(const amx_act *a, const int8_t *W, const float *sw, int n_tok, int p0,
                         int pn, float *acc_all, int32_t *cb, const char *pf, size_t pf_bytes) {
    amx_chunk_any(a, W, sw, n_tok, p0, pn, acc_all, cb, pf, pf_bytes, true);
}

/* acc [pn][32 rows][32 tokens] of pairs p0.. to y[t][r] for r < nr */
static void store_acc(const float *acc_all, int n_tok, int p0, int pn, int nr, float *y,
                      size_t y_stride) {
    for (int pi = 0; pi < pn; pi++) {
        const int p = p0 + pi, nt = n_tok - 32 * p < 32 ? n_tok - 32 * p : 32;
        const float *acc = acc_all + pi * 32 * 32;
        for (int t = 0; t < nt; t++) {
            float *yt = y + (size_t)(32 * p + t) * y_stride;
            for (int n = 0; n < nr; n++) yt[n] = acc[32 * n + t];
        }
    }
}

/* y[t][r] (r < nr) for every token from one weight unit, AMX_TB token pairs at a time. */
static void amx_unit(const amx_act *a, const int8_t *A, const float *sw, int n_tok, int nr,
                     float *y, size_t y_stride, const amx_scratch *s) {
    for (int p0 = 0; p0 < a->tp; p0 += AMX_TB) {
        const int pn = a->tp - p0 < AMX_TB ? a->tp - p0 : AMX_TB;
        amx_chunk(a, A, sw, n_tok, p0, pn, s->acc, s->cbuf);
        store_acc(s->acc, n_tok, p0, pn, nr, y, y_stride);
    }
}

void hm_amx_wpack(uint32_t type, const void *w, size_t row_bytes, int64_t rows, int64_t cols,
                  int64_t u0, int64_t u1, void *dst, void *scratch) {
    const amx_scratch s = scratch_layout(cols, scratch);
    const size_t ub = unit_bytes(cols);
    for (int64_t u = u0; u < u1 && 32 * u < rows; u++) {
        const int nr = (int)(rows - 32 * u < 32 ? rows - 32 * u : 32);
        hm_amx_convert_rows(type, (const uint8_t *)w + (size_t)(32 * u) * row_bytes, row_bytes,
                            cols, nr, (int8_t *)dst + (size_t)u * ub, s.wrow);
    }
}

/* ---------------------------------------------------------------- swapped operands
 * The expert engine's matmuls over repacked weights with the roles swapped: the activations are
 * the row tiles (A: 16 tokens x 64 values, token-major, "rt" layout: [16-token group][kp / 64]
 * [16][64] with the same dx scales as the VNNI layout), so packing them is 64-byte copies of
 * each token's codes, and the weights the VNNI tiles (hm_amx_wpack_vnni: each KiB of a unit
 * transposed to [16 quads][16 rows][4]). The products then come out token-major and leave as
 * whole vectors into the tokens' rows: no transposing copy and no float tile in between. Every
 * product and fold is the same float operation as in hm_amx_matmul_packed (sw[r] * dx[t]
 * commutes), the GLU the same silu_mul, and the adds the per-call path's axpys, so the results
 * are the same bits. */

void hm_amx_wpack_vnni(uint32_t type, const void *w, size_t row_bytes, int64_t rows, int64_t cols,
                       int64_t u0, int64_t u1, void *dst, void *scratch) {
    hm_amx_wpack(type, w, row_bytes, rows, cols, u0, u1, dst, scratch);
    const int64_t kp = (cols + 63) / 64 * 64;
    const size_t ub = unit_bytes(cols);
    for (int64_t u = u0; u < u1 && 32 * u < rows; u++)
        for (int64_t t = 0; t < 2 * (kp / 64); t++) { /* each KiB tile [16 rows][64 values] */
            int8_t *tile = (int8_t *)dst + (size_t)u * ub + (size_t)t * 1024;
            __m512i r[16];
            for (int i = 0; i < 16; i++) r[i] = _mm512_load_si512(tile + 64 * i);
            transpose16_epi32(r);
            for (int j = 0; j < 16; j++) _mm512_store_si512(tile + 64 * j, r[j]);
        }
}

/* What the swapped-operand driver does with a unit's products (acc [32 tokens][32 rows]) */
typedef enum {
    RT_STORE, /* y[t][r] = W[r] . x_t */
    RT_GLU,   /* y[t][r] = silu(G[r] . x_t) * (U[r] . x_t) */
    RT_ACC,   /* y[tok[t]][r] += wt[t] * (W[r] . x_t), then += wt[t] * bias[r] with a bias */
} rt_mode;

static void rt_matmul(const void *wp, const void *wu, int64_t rows, int64_t cols, int64_t r0,
                      int64_t r1, const void *packed, int n_tok, float *y, size_t y_stride,
                      const int32_t *tok, const float *wt, const float *bias, void *scratch,
                      rt_mode mode) {
    const amx_act a = act_layout(cols, n_tok, packed);
    const amx_scratch s = scratch_layout(cols, scratch);
    const size_t ub = unit_bytes(cols);
    if (r1 > rows) r1 = rows;
    amx_config();
    for (int64_t rg = r0; rg < r1; rg += 32) {
        const int nr = (int)(r1 - rg < 32 ? r1 - rg : 32);
        const __mmask16 k0 = tail_mask(nr), k1 = tail_mask(nr - 16);
        const int8_t *u = (const int8_t *)wp + (size_t)(rg / 32) * ub;
        /* the next unit's weights into L2 while this one runs, a share per chunk of tokens */
        const int nch = (a.tp + AMX_TB - 1) / AMX_TB;
        const size_t share = rg + 32 < r1 ? (ub + (size_t)nch - 1) / (size_t)nch : 0;
        for (int p0 = 0; p0 < a.tp; p0 += AMX_TB) {
            const int pn = a.tp - p0 < AMX_TB ? a.tp - p0 : AMX_TB;
            const size_t po = (size_t)(p0 / AMX_TB) * share,
                         pb = share && po < ub ? (ub - po < share ? ub - po : share) : 0;
            amx_chunk_rt(&a, u, (const float *)(u + 32 * a.kp), n_tok, p0, pn, s.acc, s.cbuf,
                         pb ? (const char *)u + ub + po : NULL, pb);
            if (mode == RT_GLU) {
                const int8_t *uu = (const int8_t *)wu + (size_t)(rg / 32) * ub;
                amx_chunk_rt(&a, uu, (const float *)(uu + 32 * a.kp), n_tok, p0, pn, s.acc2, s.cbuf,
                             pb ? (const char *)uu + ub + po : NULL, pb);
                hm_silu_mul_f32_avx512(pn * 32 * 32, s.acc, s.acc2);
            }
            for (int pi = 0; pi < pn; pi++) {
                const int p = p0 + pi, nt = n_tok - 32 * p < 32 ? n_tok - 32 * p : 32;
                for (int t = 0; t < nt; t++) {
                    const int tt = 32 * p + t;
                    const float *src = s.acc + (size_t)pi * 32 * 32 + 32 * t;
                    if (mode == RT_ACC) {
                        /* the row of the token 8 on into L1 while this one is added: the
                         * tokens' rows lie anywhere in the output (32 MB at 4096 tokens of
                         * 2048), and each add misses without it (the adds are ~28% of the down
                         * phase at 4096 tokens; this takes 5.5% off it, bench/RESULTS.md,
                         * 2026-12-01) */
                        if (t + 8 < nt) {
                            const char *q =
                                (const char *)(y + (size_t)tok[tt + 8] * y_stride + (size_t)rg);
                            _mm_prefetch(q, _MM_HINT_T0);
                            if (nr > 16) _mm_prefetch(q + 64, _MM_HINT_T0);
                        }
                        float *o = y + (size_t)tok[tt] * y_stride + (size_t)rg;
                        hm_axpy_f32_avx512(nr, wt[tt], src, o);
                        if (bias) hm_axpy_f32_avx512(nr, wt[tt], bias + rg, o);
                        continue;
                    }
                    float *o = y + (size_t)tt * y_stride + (size_t)(rg - r0);
                    _mm512_mask_storeu_ps(o, k0, _mm512_load_ps(src));
                    if (nr > 16) _mm512_mask_storeu_ps(o + 16, k1, _mm512_load_ps(src + 16));
                }
            }
        }
    }
    _tile_release();
}

void hm_amx_matmul_packed_rt(const void *wp, int64_t rows, int64_t cols, int64_t r0, int64_t r1,
                             const void *packed, int n_tok, float *y, size_t y_stride,
                             void *scratch) {
    rt_matmul(wp, NULL, rows, cols, r0, r1, packed, n_tok, y, y_stride, NULL, NULL, NULL, scratch,
              RT_STORE);
}

void hm_amx_glu_packed_rt(const void *wg, const void *wu, int64_t rows, int64_t cols, int64_t r0,
                          int64_t r1, const void *packed, int n_tok, float *h, size_t h_stride,
                          void *scratch) {
    rt_matmul(wg, wu, rows, cols, r0, r1, packed, n_tok, h, h_stride, NULL, NULL, NULL, scratch,
              RT_GLU);
}

void hm_amx_down_acc(const void *wp, int64_t rows, int64_t cols, int64_t r0, int64_t r1,
                     const void *packed, int n_tok, const int32_t *tok, const float *wt,
                     const float *bias, float *out, size_t out_stride, void *scratch) {
    rt_matmul(wp, NULL, rows, cols, r0, r1, packed, n_tok, out, out_stride, tok, wt, bias, scratch,
              RT_ACC);
}

/* The int8 matmul of rows [r0, r1) on tiles (i8_matmul_units) */
static void i8_matmul(uint32_t type, const void *w, size_t row_bytes, const void *wp, int64_t rows,
                      int64_t cols, int64_t r0, int64_t r1, const void *packed, int n_tok, float *y,
                      size_t y_stride, void *scratch) {
    amx_config();
    i8_matmul_units(amx_unit, type, w, row_bytes, wp, rows, cols, r0, r1, packed, n_tok, y,
                    y_stride, scratch);
    _tile_release();
}

void hm_amx_matmul(uint32_t type, const void *w, size_t row_bytes, int64_t cols, int64_t r0,
                   int64_t r1, const void *packed, int n_tok, float *y, size_t y_stride,
                   void *scratch) {
    i8_matmul(type, w, row_bytes, NULL, r1, cols, r0, r1, packed, n_tok, y, y_stride, scratch);
}

void hm_amx_matmul_packed(const void *wp, int64_t rows, int64_t cols, int64_t r0, int64_t r1,
                          const void *packed, int n_tok, float *y, size_t y_stride, void *scratch) {
    i8_matmul(0, NULL, 0, wp, rows, cols, r0, r1, packed, n_tok, y, y_stride, scratch);
}

/* ---------------------------------------------------------------- AMX BF16 matmul
 * Float-format weights (BF16 exactly, F16 rounded to BF16, FP8_B128 times its block scale rounded
 * to BF16) times activations rounded to BF16, one
 * TDPBF16PS per 32 values (16 x 16 x 32 products accumulated in float32 inside the tile), so
 * there is no fold: the four C tiles of a 32-row x 32-token block hold the float sums over all of
 * K. Activations: per 16-token group and 32-value chunk one B tile [16 value pairs][16 tokens][2]
 * (1 KiB). Weights: each 32-row unit converted into scratch as A tiles [2][kp / 32][16 rows][32].
 */

typedef struct {
    int64_t kp; /* cols rounded up to 32 (zero padded) */
    int tp;     /* 32-token pairs of groups */
    uint16_t *b;
} bf_act;

static bf_act bf_act_layout(int64_t cols, int n_tok, const void *packed) {
    bf_act a;
    a.kp = (cols + 31) / 32 * 32;
    a.tp = (n_tok + 31) / 32;
    a.b = (uint16_t *)align64((uintptr_t)packed);
    return a;
}

size_t hm_amx_bf16_act_bytes(int64_t cols, int n_tok) {
    const bf_act a = bf_act_layout(cols, n_tok, NULL);
    return (size_t)a.tp * 32 * (size_t)a.kp * 2 + 64;
}

/* 32 floats (masked past n) -> 32 bf16, round to nearest even */
static inline __m512i bf16x32(const float *x, int n) {
    const __m512 lo = _mm512_maskz_loadu_ps(tail_mask(n), x);
    const __m512 hi = _mm512_maskz_loadu_ps(tail_mask(n - 16), x + 16);
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

void hm_amx_bf16_pack_act(const float *x, size_t x_stride, const int32_t *idx, int n_tok,
                          int64_t cols, void *packed, int g0, int g1) {
    const bf_act a = bf_act_layout(cols, n_tok, packed);
    /* dword i of a token's 32-value chunk (values 2i, 2i + 1) goes to tile row i, column tl */
    const __m512i rows =
        _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
    for (int g = g0; g < g1 && g < a.tp * 2; g++) {
        uint16_t *B = a.b + (size_t)g * 16 * (size_t)a.kp;
        for (int tl = 0; tl < 16; tl++) {
            const int t = g * 16 + tl;
            const float *xt = t < n_tok ? x + (size_t)(idx ? idx[t] : t) * x_stride : NULL;
            for (int64_t c = 0; c < a.kp; c += 32) {
                const int left = xt ? (int)(cols - c < 32 ? (cols - c > 0 ? cols - c : 0) : 32) : 0;
                const __m512i v = left ? bf16x32(xt + c, left) : _mm512_setzero_si512();
                _mm512_i32scatter_epi32(B + (c / 32) * 512 + tl * 2, rows, v, 4);
            }
        }
    }
}

/* bf16 units: A [2][kp / 32][16][32] bf16 + cbuf [4][256] floats */
static size_t bf_unit_bytes(int64_t cols) {
    return (size_t)32 * (size_t)((cols + 31) / 32 * 32) * 2;
}

size_t hm_amx_bf16_scratch_bytes(int64_t cols) {
    return bf_unit_bytes(cols) + 4 * 256 * sizeof(float) + 128;
}

static void bf_convert_rows(uint32_t type, const uint8_t *w, size_t row_bytes, int64_t cols, int nr,
                            uint16_t *A) {
    const int64_t kp = (cols + 31) / 32 * 32;
    for (int n = 0; n < 32; n++) {
        uint16_t *An = A + (size_t)(n / 16) * 16 * (size_t)kp + (size_t)(n % 16) * 32;
        const uint8_t *row = w + (size_t)n * row_bytes;
        for (int64_t c = 0; c < kp; c += 32) {
            const int left = n < nr ? (int)(cols - c < 32 ? cols - c : 32) : 0;
            __m512i v = _mm512_setzero_si512();
            if (left && type == HM_TYPE_BF16) {
                v = _mm512_maskz_loadu_epi16(
                    left >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << left) - 1, row + 2 * c);
            } else if (left && type == HM_TYPE_FP8_B128) { /* fp8 * block scale -> bf16 */
                const hm_block_fp8_b128 *b = (const hm_block_fp8_b128 *)row + c / HM_FP8_TILE;
                const uint8_t *q = b->qs + c % HM_FP8_TILE;
                const __m512 d = _mm512_set1_ps(b->d * 256.0f);
                const __m512i h = hm_fp8x32_half_avx512(q);
                v = (__m512i)_mm512_cvtne2ps_pbh(
                    _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), d),
                    _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), d));
            } else if (left) { /* F16: halves -> floats -> bf16 */
                const __m256i h0 = _mm256_maskz_loadu_epi16(tail_mask(left), row + 2 * c);
                const __m256i h1 = _mm256_maskz_loadu_epi16(tail_mask(left - 16), row + 2 * c + 32);
                v = (__m512i)_mm512_cvtne2ps_pbh(_mm512_cvtph_ps(h1), _mm512_cvtph_ps(h0));
            }
            _mm512_store_si512(An + (c / 32) * 512, v);
        }
    }
}

static void bf_unit(const bf_act *a, const uint16_t *A, int n_tok, int nr, float *y,
                    size_t y_stride, float *cb) {
    const int64_t kp = a->kp, nc = kp / 32;
    const uint16_t *A1 = A + 16 * kp;
    for (int p = 0; p < a->tp; p++) {
        const bool two = n_tok - 32 * p > 16;
        const uint16_t *B0 = a->b + (size_t)(2 * p) * 16 * (size_t)kp, *B1 = B0 + 16 * (size_t)kp;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t c = 0; c < nc; c++) {
            _tile_loadd(4, A + c * 512, 64);
            _tile_loadd(6, B0 + c * 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(5, A1 + c * 512, 64);
            _tile_dpbf16ps(1, 5, 6);
            if (two) {
                _tile_loadd(7, B1 + c * 512, 64);
                _tile_dpbf16ps(2, 4, 7);
                _tile_dpbf16ps(3, 5, 7);
            }
        }
        store_c(cb, two);
        /* C tile (h, j): rows 16h.. of the unit, tokens 32p + 16j .. */
        const int nt = n_tok - 32 * p < 32 ? n_tok - 32 * p : 32;
        for (int t = 0; t < nt; t++) {
            const float *ct = cb + (t >= 16 ? 512 : 0) + (t % 16);
            float *yt = y + (size_t)(32 * p + t) * y_stride;
            for (int r = 0; r < nr; r++) yt[r] = ct[(r >= 16 ? 256 : 0) + (r % 16) * 16];
        }
    }
}

void hm_amx_bf16_matmul(uint32_t type, const void *w, size_t row_bytes, int64_t cols, int64_t r0,
                        int64_t r1, const void *packed, int n_tok, float *y, size_t y_stride,
                        void *scratch) {
    const bf_act a = bf_act_layout(cols, n_tok, packed);
    uint16_t *A = (uint16_t *)align64((uintptr_t)scratch);
    float *cb = (float *)((uint8_t *)A + bf_unit_bytes(cols));
    amx_config();
    for (int64_t rg = r0; rg < r1; rg += 32) {
        const int nr = (int)(r1 - rg < 32 ? r1 - rg : 32);
        bf_convert_rows(type, (const uint8_t *)w + (size_t)rg * row_bytes, row_bytes, cols, nr, A);
        bf_unit(&a, A, n_tok, nr, y + (rg - r0), y_stride, cb);
    }
    _tile_release();
}
