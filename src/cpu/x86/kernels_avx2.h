/* kernels_avx2.h - AVX2 kernels (dot products, float ops, attention blocks, activation quantizers)
 * shared by the avx2, avx512 and amx variants (include only from files compiled with at least
 * -mavx2 -mfma -mf16c). */
#ifndef HM_CPU_X86_KERNELS_AVX2_H
#define HM_CPU_X86_KERNELS_AVX2_H

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu/ops.h"
#include "quant/blocks.h"
#include "quant/ref.h"

/* the prefetches for the weight line at p (the stream's current position) */
static inline __attribute__((always_inline)) void hm_prefetch_w(const char *p) {
    _mm_prefetch(p + HM_PREFETCH_BYTES, _MM_HINT_T0);
    _mm_prefetch(p + HM_PREFETCH_L2_BYTES, _MM_HINT_T2);
}

static inline float hm_hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hm_h2f(hm_half h) {
    return _cvtsh_ss(h);
}

/* The one-token kernel hm_dot_NAME and the multi-token kernel hm_dotn_NAME (1-4 tokens) of a row
 * template ROWS(n, w, x[], nt, out) whose nt must be a compile-time constant for the per-token
 * arrays to stay in registers: the same code for every count, so every count gives the same bits */
#define HM_DOT_ENTRIES(NAME, ROWS)                                                                 \
    static inline float hm_dot_##NAME(int64_t n, const void *vw, const void *vx) {                 \
        float r;                                                                                   \
        ROWS(n, vw, &vx, 1, &r);                                                                   \
        return r;                                                                                  \
    }                                                                                              \
    static inline void hm_dotn_##NAME(int64_t n, const void *vw, const void *const *vx, int nt,    \
                                      float *out) {                                                \
        if (nt == 1)                                                                               \
            ROWS(n, vw, vx, 1, out);                                                               \
        else if (nt == 2)                                                                          \
            ROWS(n, vw, vx, 2, out);                                                               \
        else if (nt == 3)                                                                          \
            ROWS(n, vw, vx, 3, out);                                                               \
        else                                                                                       \
            ROWS(n, vw, vx, 4, out);                                                               \
    }

/* The 12 packed scale bytes of a Q4_K/Q5_K block as 16 bytes: bytes 0-7 the sub-block scales,
 * 8-15 the mins (6 bits each). For j < 4: scale scales[j] & 63, min scales[j + 4] & 63; for j >= 4:
 * the low 4 bits from scales[j + 4] (scale: low nibble, min: high) and the top 2 from bits 6-7 of
 * scales[j - 4] (scale) or scales[j] (min). Vector ops instead of ~12 scalar ones and the moves
 * into vectors (bench/RESULTS.md, 2026-11-30). Reads 16 bytes from `scales`: the block's codes
 * follow them. */
static inline __m128i hm_k4_scales_vec(const uint8_t *scales) {
    const __m128i q = _mm_loadu_si128((const __m128i *)scales);
    /* a: the low bits' sources, b: the top 2 bits' sources of scales and mins 4-7 */
    const __m128i a =
        _mm_shuffle_epi8(q, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i b =
        _mm_shuffle_epi8(q, _mm_setr_epi8(0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7));
    const __m128i lo = _mm_and_si128(
        _mm_blend_epi32(a, _mm_srli_epi32(a, 4), 0x8),
        _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15));
    const __m128i hi =
        _mm_and_si128(_mm_srli_epi32(b, 2), _mm_setr_epi8(0, 0, 0, 0, 0x30, 0x30, 0x30, 0x30, 0, 0,
                                                          0, 0, 0x30, 0x30, 0x30, 0x30));
    return _mm_or_si128(lo, hi);
}

/* acc + x.d * wdmin * (min_j x sum of sub-block j's activations, lane j): the mins' term of one
 * K-quant block against one Q8_K block, kept as a float vector (summed once at the end) */
static inline __m256 hm_k4_mins_fma(__m256i mins2, const hm_block_q8_K *x, float wdmin,
                                    __m256 acc) {
    const __m256i mp = _mm256_madd_epi16(mins2, _mm256_loadu_si256((const __m256i *)x->bsums));
    return _mm256_fmadd_ps(_mm256_set1_ps(x->d * wdmin), _mm256_cvtepi32_ps(mp), acc);
}

/* The start of a Q4_K / Q5_K block (both begin with d, dmin and the 12 packed scale bytes) for
 * nt tokens: the weight stream prefetched ahead (rows are contiguous, so this also covers the next
 * row), the 8 scales as int16 into *sc16 (low 128 bits), each token's Q8_K block into x[t] and its
 * mins' term added to accm[t]; returns the block's d as a float. */
static inline __attribute__((always_inline)) float
hm_k4_block_start(const void *blk, hm_half d, hm_half dmin, const uint8_t *scales,
                  const void *const *vx, int64_t i, int nt, __m128i *sc16,
                  const hm_block_q8_K *x[4], __m256 accm[4]) {
    hm_prefetch_w((const char *)blk);
    hm_prefetch_w((const char *)blk + 64);
    hm_prefetch_w((const char *)blk + 128);
    const __m128i sm = hm_k4_scales_vec(scales);
    *sc16 = _mm_cvtepu8_epi16(sm);
    const float wdmin = hm_h2f(dmin);
    /* the 8 mins as int16 pairs, min j in lanes 2j and 2j + 1: one VPMADDWD against a Q8_K
     * block's 16 partial sums gives min_j x (sum of sub-block j) in int32 lane j */
    const __m256i mins2 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));
    for (int t = 0; t < nt; t++) {
        x[t] = (const hm_block_q8_K *)vx[t] + i;
        accm[t] = hm_k4_mins_fma(mins2, x[t], wdmin, accm[t]);
    }
    return hm_h2f(d);
}

/* Sub-blocks 2j (codes lo) and 2j + 1 (codes hi, both unsigned bytes < 32) of a Q4_K/Q5_K block
 * against nt tokens' Q8_K blocks, each sub-block times its scale (sc16: the 8 scales as int16 in
 * both 128-bit lanes, scale s broadcast by one byte shuffle), added to sumi[t] */
static inline __attribute__((always_inline)) void hm_k4_pair_dots_avx2(__m256i lo, __m256i hi,
                                                                       __m256i sc16, int j,
                                                                       const hm_block_q8_K *x[4],
                                                                       int nt, __m256i sumi[4]) {
    const __m256i slo = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 + 0x0404 * j)));
    const __m256i shi = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0302 + 0x0404 * j)));
    for (int t = 0; t < nt; t++) {
        const __m256i ylo = _mm256_loadu_si256((const __m256i *)(x[t]->qs + 64 * j));
        const __m256i yhi = _mm256_loadu_si256((const __m256i *)(x[t]->qs + 64 * j + 32));
        /* |31*127*2| fits int16 */
        const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ylo), slo);
        const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, yhi), shi);
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(plo, phi));
    }
}

/* A block's int32 sums of nt tokens into their float sums: acc[t] += x[t].d * wd * sumi[t] (wd:
 * the weight block's scale) */
static inline __attribute__((always_inline)) void
hm_kfold_avx2(__m256 *acc, const __m256i *sumi, const hm_block_q8_K *const *x, float wd, int nt) {
    for (int t = 0; t < nt; t++)
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(x[t]->d * wd), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
}

/* Q4_K row times nt (1-4) Q8_K activation rows: each weight block is unpacked once for all of
 * them; every token's result is the same float operations in the same order whatever nt, so a
 * token's output does not depend on how many tokens share the row. */
static inline __attribute__((always_inline)) void
hm_q4_K_rows_avx2(int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {
    const hm_block_q4_K *w = vw;
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 acc[4], accm[4]; /* accm: the mins' term, lane j = sub-block j */
    for (int t = 0; t < nt; t++) acc[t] = accm[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        const hm_block_q8_K *x[4];
        __m128i sc;
        const float wd =
            hm_k4_block_start(w + i, w[i].d, w[i].dmin, w[i].scales, vx, i, nt, &sc, x, accm);
        __m256i sumi[4];
        for (int t = 0; t < nt; t++) sumi[t] = _mm256_setzero_si256();
        /* the 8 scales as int16 in both 128-bit lanes (hm_k4_pair_dots_avx2) */
        const __m256i sc16 = _mm256_broadcastsi128_si256(sc);
        for (int j = 0; j < 4; j++) {
            const __m256i q4 = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * j));
            hm_k4_pair_dots_avx2(_mm256_and_si256(q4, low4),
                                 _mm256_and_si256(_mm256_srli_epi16(q4, 4), low4), sc16, j, x, nt,
                                 sumi);
        }
        hm_kfold_avx2(acc, sumi, x, wd, nt);
    }
    for (int t = 0; t < nt; t++) out[t] = hm_hsum256(acc[t]) - hm_hsum256(accm[t]);
}

HM_DOT_ENTRIES(q4_K_q8_K_avx2, hm_q4_K_rows_avx2)

/* Signed int8 x signed int8 products of 32 bytes, summed in adjacent pairs into 16 int16 lanes.
 * maddubs needs one unsigned side: |w| and x carrying w's sign. |w| <= 127 and |x| <= 127 keep
 * each pair sum within int16. */
static inline __m256i hm_dot_s8_pairs_avx2(__m256i w, __m256i x) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

/* The 32 4-bit codes of a 16-byte 32-block (low nibbles elements 0-15, high 16-31) as bytes. */
static inline __m256i hm_nibbles32_avx2(const uint8_t *qs) {
    const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    const __m256i b = _mm256_srlv_epi64(q, _mm256_set_epi64x(4, 4, 0, 0));
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

/* Q5_K: as Q4_K, with the 5th bit of sub-block j's element l in bit j of qh[l]. */
static inline __attribute__((always_inline)) void
hm_q5_K_rows_avx2(int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {
    const hm_block_q5_K *w = vw;
    const __m256i low4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
    __m256 acc[4], accm[4]; /* accm: the mins' term */
    for (int t = 0; t < nt; t++) acc[t] = accm[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        const hm_block_q8_K *x[4];
        __m128i sc;
        const float wd =
            hm_k4_block_start(w + i, w[i].d, w[i].dmin, w[i].scales, vx, i, nt, &sc, x, accm);
        __m256i sumi[4];
        for (int t = 0; t < nt; t++) sumi[t] = _mm256_setzero_si256();
        /* the 8 scales as int16 in both 128-bit lanes (hm_k4_pair_dots_avx2) */
        const __m256i sc16 = _mm256_broadcastsi128_si256(sc);
        /* qh shifted right by 2j for chunk j: bits 0 and 1 of every byte are then the 5th bits of
         * sub-blocks 2j and 2j + 1 (16-bit shifts move bits across bytes only into the top bits) */
        __m256i qh = _mm256_loadu_si256((const __m256i *)w[i].qh);
        for (int j = 0; j < 4; j++) {
            const __m256i q4 = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * j));
            const __m256i hlo = _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4);
            const __m256i hhi = _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4);
            qh = _mm256_srli_epi16(qh, 2);
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(q4, low4), hlo);
            const __m256i hi =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4, 4), low4), hhi);
            hm_k4_pair_dots_avx2(lo, hi, sc16, j, x, nt, sumi);
        }
        hm_kfold_avx2(acc, sumi, x, wd, nt);
    }
    for (int t = 0; t < nt; t++) out[t] = hm_hsum256(acc[t]) - hm_hsum256(accm[t]);
}

HM_DOT_ENTRIES(q5_K_q8_K_avx2, hm_q5_K_rows_avx2)

/* Q6_K row times nt (1-4) Q8_K activation rows (each block unpacked once for all of them, as
 * hm_q4_K_rows_avx2): unsigned 6-bit codes u = q + 32 multiply the activations; the -32 is folded
 * in once per block as 32 * sum(scale[k] * bsums[k]). */
static inline __attribute__((always_inline)) void
hm_q6_K_rows_avx2(int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {
    const hm_block_q6_K *w = vw;
    const __m256i low4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    __m256 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        hm_prefetch_w((const char *)(w + i));
        hm_prefetch_w((const char *)(w + i) + 64);
        hm_prefetch_w((const char *)(w + i) + 128);
        hm_prefetch_w((const char *)(w + i) + 192);
        const float wd = hm_h2f(w[i].d);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)w[i].scales);
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        const hm_block_q8_K *x[4];
        __m256i sumi[4];
        for (int t = 0; t < nt; t++) {
            x[t] = (const hm_block_q8_K *)vx[t] + i;
            /* -32 * sum over the 16 groups of scale x bsum */
            const __m256i corr =
                _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)x[t]->bsums));
            sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
        }
        /* byte shuffle picking scale k for bytes 0-7 and k + 1 for bytes 8-15 */
        __m128i sidx = _mm_set_epi64x(0x0101010101010101, 0);
        const __m128i step = _mm_set1_epi8(2);
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(w[i].ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(w[i].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(w[i].qh + 32 * h));
            __m256i u[4];
            u[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4),
                                   _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
            u[1] = _mm256_or_si256(
                _mm256_and_si256(ql1, low4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
            u[2] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
            u[3] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
            for (int p = 0; p < 4; p++) {
                const __m256i s16 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, sidx));
                sidx = _mm_add_epi8(sidx, step);
                for (int t = 0; t < nt; t++) {
                    const __m256i y =
                        _mm256_loadu_si256((const __m256i *)(x[t]->qs + 128 * h + 32 * p));
                    const __m256i p16 = _mm256_maddubs_epi16(u[p], y); /* |63*127*2| fits int16 */
                    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p16, s16));
                }
            }
        }
        hm_kfold_avx2(acc, sumi, x, wd, nt);
    }
    for (int t = 0; t < nt; t++) out[t] = hm_hsum256(acc[t]);
}

HM_DOT_ENTRIES(q6_K_q8_K_avx2, hm_q6_K_rows_avx2)

/* The int16 lanes of a 256-bit vector that take sub-block k's (lower 128 bits) and k + 1's
 * (upper) value from 16-bit entries 0-7 of both halves of `tab` (a byte shuffle per half). */
static inline __m256i hm_pick16_pair_avx2(__m256i tab, int k) {
    return _mm256_shuffle_epi8(tab,
                               _mm256_setr_m128i(_mm_set1_epi16((short)(0x0100 + 0x0202 * k)),
                                                 _mm_set1_epi16((short)(0x0302 + 0x0202 * k))));
}

/* Q2_K / Q3_K: sumi[t] += the products of one 2-bit plane's 32 codes (plane p of half h,
 * unsigned bytes, at most 7) with token t's activations, times their two sub-blocks' scales
 * (s16, as from hm_pick16_pair_avx2); |2 * 7 * 128| fits int16 */
static inline __attribute__((always_inline)) void hm_k23_plane_avx2(__m256i qp, __m256i s16,
                                                                    const hm_block_q8_K *const x[4],
                                                                    int h, int p, int nt,
                                                                    __m256i sumi[4]) {
    for (int t = 0; t < nt; t++) {
        const __m256i y = _mm256_loadu_si256((const __m256i *)(x[t]->qs + 128 * h + 32 * p));
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(qp, y), s16));
    }
}

/* Q2_K row times nt (1-4) Q8_K activation rows. Element 128h + 32p + l is bits 2p..2p+1 of
 * qs[32h + l]; sub-block (of 16) s = 8h + 2p + l / 16 has scale scales[s] & 15 and min
 * scales[s] >> 4: x.d * (d * sum_s sc_s * (q . y)_s - dmin * sum_s m_s * bsums_s). */
static inline __attribute__((always_inline)) void
hm_q2_K_rows_avx2(int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {
    const hm_block_q2_K *w = vw;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m15 = _mm_set1_epi8(0x0F);
    __m256 acc[4], accm[4];
    for (int t = 0; t < nt; t++) acc[t] = accm[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        hm_prefetch_w((const char *)(w + i));
        hm_prefetch_w((const char *)(w + i) + 64);
        const __m128i sm = _mm_loadu_si128((const __m128i *)w[i].scales);
        const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sm, m15));
        const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), m15));
        /* scales 0-7 / 8-15 as int16 in both 128-bit halves */
        const __m256i sc_a = _mm256_permute2x128_si256(sc16, sc16, 0x00);
        const __m256i sc_b = _mm256_permute2x128_si256(sc16, sc16, 0x11);
        const float wd = hm_h2f(w[i].d), wdmin = hm_h2f(w[i].dmin);
        const hm_block_q8_K *x[4];
        __m256i sumi[4];
        for (int t = 0; t < nt; t++) {
            x[t] = (const hm_block_q8_K *)vx[t] + i;
            const __m256i mp =
                _mm256_madd_epi16(mn16, _mm256_loadu_si256((const __m256i *)x[t]->bsums));
            accm[t] =
                _mm256_fmadd_ps(_mm256_set1_ps(x[t]->d * wdmin), _mm256_cvtepi32_ps(mp), accm[t]);
            sumi[t] = _mm256_setzero_si256();
        }
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * h));
            for (int p = 0; p < 4; p++) {
                const __m256i qp = _mm256_and_si256(_mm256_srli_epi16(q, 2 * p), m3);
                hm_k23_plane_avx2(qp, hm_pick16_pair_avx2(h ? sc_b : sc_a, 2 * p), x, h, p, nt,
                                  sumi);
            }
        }
        hm_kfold_avx2(acc, sumi, x, wd, nt);
    }
    for (int t = 0; t < nt; t++) out[t] = hm_hsum256(_mm256_sub_ps(acc[t], accm[t]));
}

HM_DOT_ENTRIES(q2_K_q8_K_avx2, hm_q2_K_rows_avx2)

/* Q3_K's 16 scales (6 bits, stored + 32) as signed bytes: scale j's low 4 bits are nibble j / 8
 * of byte j % 8, its top 2 bits bits 2(j / 4)..+1 of byte 8 + j % 4. */
static inline __m128i hm_q3_K_scales_vec(const uint8_t *s) {
    const __m128i a = _mm_loadl_epi64((const __m128i *)s);
    int32_t b;
    memcpy(&b, s + 8, sizeof b);
    const __m128i lo =
        _mm_and_si128(_mm_unpacklo_epi64(a, _mm_srli_epi16(a, 4)), _mm_set1_epi8(0x0F));
    const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(b), _mm_setr_epi32(0, 2, 4, 6)),
                                     _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
}

/* Q3_K row times nt (1-4) Q8_K activation rows. Element 128h + 32p + l: low bits 2p..2p+1 of
 * qs[32h + l], value lo - 4 unless bit 4h + p of hmask[l] is set (then lo); sub-block (of 16)
 * s = 8h + 2p + l / 16. The codes go in as q + 4 in 0..7 (unsigned, for VPMADDUBSW) and
 * 4 * sum_s sc_s * bsums_s comes off. */
static inline __attribute__((always_inline)) void
hm_q3_K_rows_avx2(int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {
    const hm_block_q3_K *w = vw;
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
    __m256 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        hm_prefetch_w((const char *)(w + i));
        hm_prefetch_w((const char *)(w + i) + 64);
        const __m256i sc16 = _mm256_cvtepi8_epi16(hm_q3_K_scales_vec(w[i].scales));
        const __m256i sc_a = _mm256_permute2x128_si256(sc16, sc16, 0x00);
        const __m256i sc_b = _mm256_permute2x128_si256(sc16, sc16, 0x11);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)w[i].hmask);
        const float wd = hm_h2f(w[i].d);
        const hm_block_q8_K *x[4];
        __m256i sumi[4];
        for (int t = 0; t < nt; t++) {
            x[t] = (const hm_block_q8_K *)vx[t] + i;
            const __m256i corr =
                _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)x[t]->bsums));
            sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 2));
        }
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * h));
            for (int p = 0; p < 4; p++) {
                const int k = 4 * h + p; /* the hmask bit, moved to bit 2 */
                const __m256i hb =
                    k >= 2 ? _mm256_srli_epi16(hm, k - 2) : _mm256_slli_epi16(hm, 2 - k);
                const __m256i qp = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(q, 2 * p), m3), _mm256_and_si256(hb, m4));
                hm_k23_plane_avx2(qp, hm_pick16_pair_avx2(h ? sc_b : sc_a, 2 * p), x, h, p, nt,
                                  sumi);
            }
        }
        hm_kfold_avx2(acc, sumi, x, wd, nt);
    }
    for (int t = 0; t < nt; t++) out[t] = hm_hsum256(acc[t]);
}

HM_DOT_ENTRIES(q3_K_q8_K_avx2, hm_q3_K_rows_avx2)

/* 32-blocks of 4-bit codes with a code book (IQ4_NL, MXFP4): codes to int8 by one byte shuffle
 * of the 16-entry table. */
static inline __m256i hm_lut4_s8_avx2(const uint8_t *qs, __m256i table) {
    return _mm256_shuffle_epi8(table, hm_nibbles32_avx2(qs));
}

static inline __m256i hm_table16_avx2(const int8_t t[16]) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)t));
}

/* One 32-block: sum of w x y as 8 float lanes (integer exact before the conversion). */
static inline __m256 hm_dot32_s8_avx2(__m256i w, const int8_t *y) {
    const __m256i p16 = hm_dot_s8_pairs_avx2(w, _mm256_loadu_si256((const __m256i *)y));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

/* The scales of four Q8_0 blocks. */
static inline __m128 hm_q8_0_d4(const hm_block_q8_0 *x) {
    return _mm_cvtph_ps(
        _mm_set_epi16(0, 0, 0, 0, (short)x[3].d, (short)x[2].d, (short)x[1].d, (short)x[0].d));
}

/* hm_e8m0_to_f32_half of four MXFP4 blocks: (e - 1) << 23, or 0x00200000 << e for e < 2. */
static inline __m128 hm_mxfp4_d4(const hm_block_mxfp4 *w) {
    const __m128i e = _mm_set_epi32(w[3].e, w[2].e, w[1].e, w[0].e);
    const __m128i bits = _mm_blendv_epi8(_mm_slli_epi32(_mm_sub_epi32(e, _mm_set1_epi32(1)), 23),
                                         _mm_sllv_epi32(_mm_set1_epi32(0x00200000), e),
                                         _mm_cmplt_epi32(e, _mm_set1_epi32(2)));
    return _mm_castsi128_ps(bits);
}

/* Products of four f16 weight scales with the scales of four Q8_0 blocks (one conversion). */
static inline __m128 hm_scale_f16_quad(hm_half w0, hm_half w1, hm_half w2, hm_half w3,
                                       const hm_block_q8_0 *x) {
    const __m256 f =
        _mm256_cvtph_ps(_mm_set_epi16((short)x[3].d, (short)x[2].d, (short)x[1].d, (short)x[0].d,
                                      (short)w3, (short)w2, (short)w1, (short)w0));
    return _mm_mul_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
}

/* acc += d[k] * p_k for four 32-blocks (two accumulators). */
static inline void hm_fmadd4_avx2(__m128 d, __m256 p0, __m256 p1, __m256 p2, __m256 p3,
                                  __m256 *acc0, __m256 *acc1) {
    const __m256 dd = _mm256_set_m128(d, d);
    *acc0 = _mm256_fmadd_ps(_mm256_permute_ps(dd, 0x00), p0, *acc0);
    *acc1 = _mm256_fmadd_ps(_mm256_permute_ps(dd, 0x55), p1, *acc1);
    *acc0 = _mm256_fmadd_ps(_mm256_permute_ps(dd, 0xaa), p2, *acc0);
    *acc1 = _mm256_fmadd_ps(_mm256_permute_ps(dd, 0xff), p3, *acc1);
}

/* The 32 high bits of a Q5_0 block (bit j of the little-endian qh = element j) as byte masks:
 * 0xFF where the bit is set. */
static inline __m256i hm_q5_0_hmask_avx2(const uint8_t qh[4]) {
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)h),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bits), bits);
}

/* a Q5_0 / Q5_1 block's unsigned 5-bit codes: the nibble plus 16 where the 5th bit is set */
static inline __m256i hm_q5_u8_avx2(const uint8_t qs[16], const uint8_t qh[4]) {
    return _mm256_or_si256(hm_nibbles32_avx2(qs),
                           _mm256_and_si256(hm_q5_0_hmask_avx2(qh), _mm256_set1_epi8(16)));
}

/* Q5_0 code minus 16 = nibble where the 5th bit is set, nibble - 16 (nibble | 0xF0) where not. */
static inline __m256i hm_q5_0_s8_avx2(const hm_block_q5_0 *b) {
    return _mm256_or_si256(hm_nibbles32_avx2(b->qs),
                           _mm256_andnot_si256(hm_q5_0_hmask_avx2(b->qh), _mm256_set1_epi8(-16)));
}

/* 32-blocks with 4- or 5-bit codes and one scale per block, as int8 weights against Q8_0
 * activations: IQ4_NL and MXFP4 (code books), Q4_0 and Q5_0 (codes minus 8 or 16), and, on AVX2
 * only, Q4_1 and Q5_1 (unsigned codes and a min per block: m x.d x the block's activation sum is
 * added). */
enum { HM_B32_IQ4_NL, HM_B32_MXFP4, HM_B32_Q4_0, HM_B32_Q5_0, HM_B32_Q4_1, HM_B32_Q5_1 };

static inline size_t hm_b32_bytes(int kind) {
    return kind == HM_B32_IQ4_NL  ? sizeof(hm_block_iq4_nl)
           : kind == HM_B32_MXFP4 ? sizeof(hm_block_mxfp4)
           : kind == HM_B32_Q4_0  ? sizeof(hm_block_q4_0)
           : kind == HM_B32_Q5_0  ? sizeof(hm_block_q5_0)
           : kind == HM_B32_Q4_1  ? sizeof(hm_block_q4_1)
                                  : sizeof(hm_block_q5_1);
}

/* the signed weights of block i (table: the code book of IQ4_NL / MXFP4) */
static inline __attribute__((always_inline)) __m256i hm_b32_codes_avx2(int kind, const void *vw,
                                                                       int64_t i, __m256i table) {
    switch (kind) {
    case HM_B32_IQ4_NL:
        return hm_lut4_s8_avx2(((const hm_block_iq4_nl *)vw)[i].qs, table);
    case HM_B32_MXFP4:
        return hm_lut4_s8_avx2(((const hm_block_mxfp4 *)vw)[i].qs, table);
    case HM_B32_Q4_0:
        return _mm256_sub_epi8(hm_nibbles32_avx2(((const hm_block_q4_0 *)vw)[i].qs),
                               _mm256_set1_epi8(8));
    case HM_B32_Q5_0:
        return hm_q5_0_s8_avx2((const hm_block_q5_0 *)vw + i);
    case HM_B32_Q4_1:
        return hm_nibbles32_avx2(((const hm_block_q4_1 *)vw)[i].qs);
    default: { /* Q5_1 */
        const hm_block_q5_1 *b = (const hm_block_q5_1 *)vw + i;
        return hm_q5_u8_avx2(b->qs, b->qh);
    }
    }
}

/* the unsigned codes of block i of Q4_0 (0-15), Q5_0 (0-31), Q4_1 or Q5_1 */
static inline __attribute__((always_inline)) __m256i hm_b32_ucodes_avx2(int kind, const void *vw,
                                                                        int64_t i) {
    switch (kind) {
    case HM_B32_Q4_0:
        return hm_nibbles32_avx2(((const hm_block_q4_0 *)vw)[i].qs);
    case HM_B32_Q4_1:
        return hm_nibbles32_avx2(((const hm_block_q4_1 *)vw)[i].qs);
    case HM_B32_Q5_0: {
        const hm_block_q5_0 *b = (const hm_block_q5_0 *)vw + i;
        return hm_q5_u8_avx2(b->qs, b->qh);
    }
    default:
        return hm_b32_codes_avx2(kind, vw, i, _mm256_setzero_si256()); /* Q5_1 */
    }
}

/* the mins of blocks i .. i + 3 of Q4_1 / Q5_1 (cnt < 4: the first cnt, the others 0; m is the
 * second half of both blocks) */
static inline __m128 hm_b32_m4(int kind, const void *vw, int64_t i, int cnt) {
    const size_t bb = hm_b32_bytes(kind);
    const uint8_t *b = (const uint8_t *)vw + (size_t)i * bb + sizeof(hm_half);
    hm_half h[4] = {0, 0, 0, 0};
    for (int k = 0; k < cnt; k++) memcpy(&h[k], b + (size_t)k * bb, sizeof(hm_half));
    return _mm_cvtph_ps(
        _mm_set_epi16(0, 0, 0, 0, (short)h[3], (short)h[2], (short)h[1], (short)h[0]));
}

/* the sum of a Q8_0 block's 32 codes, in 8 int32 lanes, as floats */
static inline __m256 hm_q8_0_sum_avx2(const hm_block_q8_0 *x) {
    const __m256i y = _mm256_loadu_si256((const __m256i *)x->qs);
    return _mm256_cvtepi32_ps(
        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), y), _mm256_set1_epi16(1)));
}

/* the weight scales of blocks i .. i + 3 (cnt < 4: the first cnt, the others 0) */
static inline __attribute__((always_inline)) __m128 hm_b32_d4(int kind, const void *vw, int64_t i,
                                                              int cnt) {
    if (kind == HM_B32_MXFP4) {
        const hm_block_mxfp4 *w = (const hm_block_mxfp4 *)vw + i;
        if (cnt == 4) return hm_mxfp4_d4(w);
        float d[4] = {0, 0, 0, 0};
        for (int k = 0; k < cnt; k++) d[k] = hm_e8m0_to_f32_half(w[k].e);
        return _mm_loadu_ps(d);
    }
    const uint8_t *b = (const uint8_t *)vw + (size_t)i * hm_b32_bytes(kind);
    const size_t bb = hm_b32_bytes(kind);
    hm_half h[4] = {0, 0, 0, 0}; /* d is every block's first field */
    for (int k = 0; k < cnt; k++) memcpy(&h[k], b + (size_t)k * bb, sizeof(hm_half));
    return _mm_cvtph_ps(
        _mm_set_epi16(0, 0, 0, 0, (short)h[3], (short)h[2], (short)h[1], (short)h[0]));
}

/* A kind's row times nt (1-4) Q8_0 activation rows, four blocks per step: the weights' codes and
 * their absolute values once for all tokens; per token its codes carrying the weights' signs,
 * the pair products summed to int32 and converted, times the four scale products (two
 * accumulators). The last 0-3 blocks one at a time. The same operations whatever nt. */
static inline __attribute__((always_inline)) void hm_b32_rows_avx2(int kind, int64_t n,
                                                                   const void *vw,
                                                                   const void *const *vx,
                                                                   const int nt, float *out) {
    const size_t bb = hm_b32_bytes(kind);
    const __m256i table =
        hm_table16_avx2(kind == HM_B32_MXFP4 ? hm_kvalues_mxfp4 : hm_kvalues_iq4nl);
    const __m256i ones = _mm256_set1_epi16(1);
    /* codes stored with an offset (Q4_0, Q5_0) or unsigned (Q4_1, Q5_1) multiply as unsigned
     * bytes; the offset times the activations' pair sums is taken off in int16 */
    const bool uns =
        kind == HM_B32_Q4_0 || kind == HM_B32_Q5_0 || kind == HM_B32_Q4_1 || kind == HM_B32_Q5_1;
    const int off = kind == HM_B32_Q4_0 ? 8 : kind == HM_B32_Q5_0 ? 16 : 0;
    const __m256i voff = _mm256_set1_epi8((char)off);
    const uint8_t *wb = vw;
    __m256 acc0[4], acc1[4];
    for (int t = 0; t < nt; t++) acc0[t] = acc1[t] = _mm256_setzero_ps();
    const int64_t nb = n / 32;
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        hm_prefetch_w((const char *)(wb + (size_t)i * bb));
        hm_prefetch_w((const char *)(wb + (size_t)i * bb) + 64);
        __m256i wq[4], aw[4];
        for (int k = 0; k < 4; k++) {
            if (uns) {
                aw[k] = hm_b32_ucodes_avx2(kind, vw, i + k);
            } else {
                wq[k] = hm_b32_codes_avx2(kind, vw, i + k, table);
                aw[k] = _mm256_sign_epi8(wq[k], wq[k]);
            }
        }
        const __m128 wd = hm_b32_d4(kind, vw, i, 4);
        const __m128 wm = kind == HM_B32_Q4_1 || kind == HM_B32_Q5_1 ? hm_b32_m4(kind, vw, i, 4)
                                                                     : _mm_setzero_ps();
        for (int t = 0; t < nt; t++) {
            const hm_block_q8_0 *x = (const hm_block_q8_0 *)vx[t] + i;
            __m256 p[4];
            for (int k = 0; k < 4; k++) { /* |w|, |x| <= 127: pair sums fit int16 */
                const __m256i xq = _mm256_loadu_si256((const __m256i *)x[k].qs);
                __m256i pr;
                if (uns) { /* codes 0-31, minus the offset times the activations */
                    pr = _mm256_maddubs_epi16(aw[k], xq);
                    if (off) pr = _mm256_sub_epi16(pr, _mm256_maddubs_epi16(voff, xq));
                } else {
                    pr = _mm256_maddubs_epi16(aw[k], _mm256_sign_epi8(xq, wq[k]));
                }
                p[k] = _mm256_cvtepi32_ps(_mm256_madd_epi16(pr, ones));
            }
            const __m128 xd = hm_q8_0_d4(x);
            hm_fmadd4_avx2(_mm_mul_ps(wd, xd), p[0], p[1], p[2], p[3], &acc0[t], &acc1[t]);
            if (kind == HM_B32_Q4_1 || kind == HM_B32_Q5_1)
                hm_fmadd4_avx2(_mm_mul_ps(wm, xd), hm_q8_0_sum_avx2(&x[0]), hm_q8_0_sum_avx2(&x[1]),
                               hm_q8_0_sum_avx2(&x[2]), hm_q8_0_sum_avx2(&x[3]), &acc0[t],
                               &acc1[t]);
        }
    }
    if (i < nb) {
        const int cnt = (int)(nb - i);
        float wdf[4], wmf[4];
        _mm_storeu_ps(wdf, hm_b32_d4(kind, vw, i, cnt));
        _mm_storeu_ps(wmf, kind == HM_B32_Q4_1 || kind == HM_B32_Q5_1 ? hm_b32_m4(kind, vw, i, cnt)
                                                                      : _mm_setzero_ps());
        for (int k = 0; k < cnt; k++) {
            const __m256i wq = hm_b32_codes_avx2(kind, vw, i + k, table);
            for (int t = 0; t < nt; t++) {
                const hm_block_q8_0 *x = (const hm_block_q8_0 *)vx[t] + i + k;
                const __m256 p = hm_dot32_s8_avx2(wq, x->qs);
                const float xd = hm_h2f(x->d);
                acc0[t] = _mm256_fmadd_ps(_mm256_set1_ps(wdf[k] * xd), p, acc0[t]);
                if (kind == HM_B32_Q4_1 || kind == HM_B32_Q5_1)
                    acc0[t] =
                        _mm256_fmadd_ps(_mm256_set1_ps(wmf[k] * xd), hm_q8_0_sum_avx2(x), acc0[t]);
            }
        }
    }
    for (int t = 0; t < nt; t++) out[t] = hm_hsum256(_mm256_add_ps(acc0[t], acc1[t]));
}

#define HM_B32_ROWS_AVX2(NAME, KIND)                                                               \
    static inline __attribute__((always_inline)) void hm_##NAME##_rows_avx2(                       \
        int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {              \
        hm_b32_rows_avx2(KIND, n, vw, vx, nt, out);                                                \
    }                                                                                              \
    HM_DOT_ENTRIES(NAME##_q8_0_avx2, hm_##NAME##_rows_avx2)
HM_B32_ROWS_AVX2(iq4_nl, HM_B32_IQ4_NL)
HM_B32_ROWS_AVX2(mxfp4, HM_B32_MXFP4)
HM_B32_ROWS_AVX2(q4_0, HM_B32_Q4_0)
HM_B32_ROWS_AVX2(q5_0, HM_B32_Q5_0)
HM_B32_ROWS_AVX2(q4_1, HM_B32_Q4_1)
HM_B32_ROWS_AVX2(q5_1, HM_B32_Q5_1)
#undef HM_B32_ROWS_AVX2

static inline __attribute__((always_inline)) void
hm_iq4_xs_rows_avx2(int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {
    const hm_block_iq4_xs *w = vw;
    const __m256i table = hm_table16_avx2(hm_kvalues_iq4nl);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        hm_prefetch_w((const char *)(w + i));
        hm_prefetch_w((const char *)(w + i) + 64);
        hm_prefetch_w((const char *)(w + i) + 128);
        const hm_block_q8_K *x[4];
        __m256i sumi[4];
        for (int t = 0; t < nt; t++)
            x[t] = (const hm_block_q8_K *)vx[t] + i, sumi[t] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j += 2) { /* 32 bytes: sub-block j in lane 0, j + 1 in lane 1 */
            const __m256i q = _mm256_loadu_si256((const __m256i *)(w[i].qs + 16 * j));
            const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(q, low4));
            const __m256i hi =
                _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), low4));
            const __m256i w0 = _mm256_permute2x128_si256(lo, hi, 0x20);
            const __m256i w1 = _mm256_permute2x128_si256(lo, hi, 0x31);
            const __m256i s0 = _mm256_set1_epi16((short)hm_iq4_xs_scale(&w[i], j)),
                          s1 = _mm256_set1_epi16((short)hm_iq4_xs_scale(&w[i], j + 1));
            /* signed x signed: |w| once, y takes w's sign per token */
            const __m256i a0 = _mm256_sign_epi8(w0, w0), a1 = _mm256_sign_epi8(w1, w1);
            for (int t = 0; t < nt; t++) {
                const __m256i y0 = _mm256_loadu_si256((const __m256i *)(x[t]->qs + 32 * j));
                const __m256i y1 = _mm256_loadu_si256((const __m256i *)(x[t]->qs + 32 * j + 32));
                const __m256i p0 =
                    _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(y0, w0)), s0);
                const __m256i p1 =
                    _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(y1, w1)), s1);
                sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(p0, p1));
            }
        }
        const float wd = hm_h2f(w[i].d);
        hm_kfold_avx2(acc, sumi, x, wd, nt);
    }
    for (int t = 0; t < nt; t++) out[t] = hm_hsum256(acc[t]);
}

HM_DOT_ENTRIES(iq4_xs_q8_K_avx2, hm_iq4_xs_rows_avx2)

/* Q8_0 row times nt (1-4) Q8_0 activation rows, each weight block loaded once (same per-token
 * operations whatever nt, as hm_q4_K_rows_avx2). */
static inline __attribute__((always_inline)) void
hm_q8_0_rows_avx2(int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {
    const hm_block_q8_0 *w = vw;
    const hm_block_q8_0 *x[4];
    __m256 acc0[4], acc1[4];
    const __m256i ones = _mm256_set1_epi16(1);
    for (int t = 0; t < nt; t++) acc0[t] = acc1[t] = _mm256_setzero_ps(), x[t] = vx[t];
    int64_t nb = n / HM_QK8_0, i = 0;
    for (; i < nb; i++) {
        hm_prefetch_w((const char *)(w + i));
        const __m256i a = _mm256_loadu_si256((const __m256i *)w[i].qs);
        /* u8 x s8 product needs one unsigned side: |a| and b carrying a's sign */
        const __m256i ua = _mm256_sign_epi8(a, a);
        const float wd = hm_h2f(w[i].d);
        for (int t = 0; t < nt; t++) {
            const __m256i b = _mm256_loadu_si256((const __m256i *)x[t][i].qs);
            const __m256i p16 = _mm256_maddubs_epi16(ua, _mm256_sign_epi8(b, a));
            const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
            const __m256 d = _mm256_set1_ps(wd * hm_h2f(x[t][i].d));
            if (i & 1)
                acc1[t] = _mm256_fmadd_ps(d, p, acc1[t]);
            else
                acc0[t] = _mm256_fmadd_ps(d, p, acc0[t]);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = hm_hsum256(_mm256_add_ps(acc0[t], acc1[t]));
}

HM_DOT_ENTRIES(q8_0_q8_0_avx2, hm_q8_0_rows_avx2)

/* 8 FP8 E4M3 codes as floats divided by 256: sign to bit 15 and the 7 exponent and mantissa bits
 * to bits 7-13 make a half of value fp8 / 256 (E4M3 subnormals become half normals of the same
 * grid), 0x7f / 0xff (NaN) get an all-ones exponent; the 256 goes into the block scale. */
static inline __m256 hm_fp8x8_avx2(const uint8_t *q) {
    const __m128i v = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)q));
    const __m128i mag = _mm_and_si128(v, _mm_set1_epi16(0x7f));
    const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(v, _mm_set1_epi16(0x80)), 8),
                                   _mm_slli_epi16(mag, 7));
    const __m128i nan =
        _mm_and_si128(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f)), _mm_set1_epi16(0x7e00));
    return _mm256_cvtph_ps(_mm_or_si128(h, nan));
}

/* FP8_B128 row times nt (1-4) float activation rows, the codes of each 32-value step converted
 * once for all of them (same per-token operations whatever nt, as hm_q4_K_rows_avx2) */
static inline __attribute__((always_inline)) void
hm_fp8_rows_avx2(int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {
    const hm_block_fp8_b128 *w = vw;
    __m256 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_FP8_TILE; i++) {
        hm_prefetch_w((const char *)(w + i));
        hm_prefetch_w((const char *)(w + i) + 64);
        hm_prefetch_w((const char *)(w + i) + 128);
        __m256 b[4][4];
        for (int t = 0; t < nt; t++) b[t][0] = b[t][1] = b[t][2] = b[t][3] = _mm256_setzero_ps();
        for (int j = 0; j < HM_FP8_TILE; j += 32) {
            const __m256 f0 = hm_fp8x8_avx2(w[i].qs + j), f1 = hm_fp8x8_avx2(w[i].qs + j + 8),
                         f2 = hm_fp8x8_avx2(w[i].qs + j + 16), f3 = hm_fp8x8_avx2(w[i].qs + j + 24);
            for (int t = 0; t < nt; t++) {
                const float *x = (const float *)vx[t] + i * HM_FP8_TILE + j;
                b[t][0] = _mm256_fmadd_ps(f0, _mm256_loadu_ps(x), b[t][0]);
                b[t][1] = _mm256_fmadd_ps(f1, _mm256_loadu_ps(x + 8), b[t][1]);
                b[t][2] = _mm256_fmadd_ps(f2, _mm256_loadu_ps(x + 16), b[t][2]);
                b[t][3] = _mm256_fmadd_ps(f3, _mm256_loadu_ps(x + 24), b[t][3]);
            }
        }
        const __m256 d = _mm256_set1_ps(w[i].d * 256.0f);
        for (int t = 0; t < nt; t++)
            acc[t] = _mm256_fmadd_ps(
                _mm256_add_ps(_mm256_add_ps(b[t][0], b[t][1]), _mm256_add_ps(b[t][2], b[t][3])), d,
                acc[t]);
    }
    for (int t = 0; t < nt; t++) out[t] = hm_hsum256(acc[t]);
}

HM_DOT_ENTRIES(fp8_b128_f32_avx2, hm_fp8_rows_avx2)

/* Float weights (F32, BF16, F16) against float activations, one row and NT (1-4) activation
 * rows: two accumulators per activation row over 16-element steps (sixteen registers hold four
 * rows' sums and the weights), an 8-element step into the first, then a scalar tail; each weight
 * vector is loaded and converted once for all NT. One template for every NT, so a row's result
 * does not depend on NT. */
#define HM_FLOAT_ROWS_AVX2(NAME, WT, LOADW, SCALARW)                                               \
    static inline __attribute__((always_inline)) void NAME(                                        \
        int64_t n, const void *vw, const void *const *vx, int nt, float *out) {                    \
        const WT *w = vw;                                                                          \
        const float *x[4];                                                                         \
        __m256 a[4][2];                                                                            \
        for (int t = 0; t < nt; t++) {                                                             \
            x[t] = vx[t];                                                                          \
            a[t][0] = a[t][1] = _mm256_setzero_ps();                                               \
        }                                                                                          \
        int64_t i = 0;                                                                             \
        for (; i + 16 <= n; i += 16) {                                                             \
            hm_prefetch_w((const char *)(w + i));                                                  \
            const __m256 w0 = LOADW(w + i), w1 = LOADW(w + i + 8);                                 \
            for (int t = 0; t < nt; t++) {                                                         \
                a[t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + i), a[t][0]);                 \
                a[t][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[t] + i + 8), a[t][1]);             \
            }                                                                                      \
        }                                                                                          \
        if (i + 8 <= n) {                                                                          \
            const __m256 w0 = LOADW(w + i);                                                        \
            for (int t = 0; t < nt; t++)                                                           \
                a[t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + i), a[t][0]);                 \
            i += 8;                                                                                \
        }                                                                                          \
        for (int t = 0; t < nt; t++) {                                                             \
            float s = hm_hsum256(_mm256_add_ps(a[t][0], a[t][1]));                                 \
            for (int64_t k = i; k < n; k++) s += SCALARW(w[k]) * x[t][k];                          \
            out[t] = s;                                                                            \
        }                                                                                          \
    }

#define HM_LOADW_F32_AVX2(p) _mm256_loadu_ps(p)
#define HM_SCALAR_F32(v)     (v)
#define HM_LOADW_BF16_AVX2(p)                                                                      \
    _mm256_castsi256_ps(                                                                           \
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define HM_LOADW_F16_AVX2(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))

HM_FLOAT_ROWS_AVX2(hm_f32_rows_avx2, float, HM_LOADW_F32_AVX2, HM_SCALAR_F32)
HM_FLOAT_ROWS_AVX2(hm_bf16_rows_avx2, uint16_t, HM_LOADW_BF16_AVX2, hm_bf16_to_f32)
HM_FLOAT_ROWS_AVX2(hm_f16_rows_avx2, uint16_t, HM_LOADW_F16_AVX2, _cvtsh_ss)
#undef HM_FLOAT_ROWS_AVX2

/* Four rows by six tokens (hm_vec_dot_46_fn): blocks of two rows by three tokens, each with both
 * of the one-row kernel's accumulators (the 8-value halves of every 16-value step; then the first
 * takes the 8-value step, as there) in registers, 12 of them; then the same sum, horizontal sum
 * and scalar tail per row and token. */
#define HM_FLOAT_46_AVX2(NAME, WT, LOADW, SCALARW)                                                 \
    static inline void NAME(int64_t n, const void *vw, size_t row_bytes, const void *const *vx,    \
                            float *out) {                                                          \
        const int64_t n16 = n / 16 * 16, n8 = n16 + 8 <= n ? n16 + 8 : n16;                        \
        for (int rp = 0; rp < 4; rp += 2)                                                          \
            for (int tp = 0; tp < 6; tp += 3) {                                                    \
                const WT *w0 = (const WT *)((const char *)vw + (size_t)rp * row_bytes),            \
                         *w1 = (const WT *)((const char *)w0 + row_bytes);                         \
                const float *x0 = vx[tp], *x1 = vx[tp + 1], *x2 = vx[tp + 2];                      \
                __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a10 = a00, a11 = a00,      \
                       a12 = a00, b00 = a00, b01 = a00, b02 = a00, b10 = a00, b11 = a00,           \
                       b12 = a00; /* a: accumulator 0, b: 1; [row][token] */                       \
                /* the 16-value steps (both halves), then the 8-value step at n16 (the first) */   \
                for (int64_t i = 0; i < n8; i += 16) {                                             \
                    const __m256 u0 = LOADW(w0 + i), u1 = LOADW(w1 + i);                           \
                    __m256 xv = _mm256_loadu_ps(x0 + i);                                           \
                    a00 = _mm256_fmadd_ps(u0, xv, a00), a10 = _mm256_fmadd_ps(u1, xv, a10);        \
                    xv = _mm256_loadu_ps(x1 + i);                                                  \
                    a01 = _mm256_fmadd_ps(u0, xv, a01), a11 = _mm256_fmadd_ps(u1, xv, a11);        \
                    xv = _mm256_loadu_ps(x2 + i);                                                  \
                    a02 = _mm256_fmadd_ps(u0, xv, a02), a12 = _mm256_fmadd_ps(u1, xv, a12);        \
                    if (i == n16) break;                                                           \
                    /* the second half's weights once the first's are dead: 15 registers */        \
                    const __m256 v0 = LOADW(w0 + i + 8), v1 = LOADW(w1 + i + 8);                   \
                    xv = _mm256_loadu_ps(x0 + i + 8);                                              \
                    b00 = _mm256_fmadd_ps(v0, xv, b00), b10 = _mm256_fmadd_ps(v1, xv, b10);        \
                    xv = _mm256_loadu_ps(x1 + i + 8);                                              \
                    b01 = _mm256_fmadd_ps(v0, xv, b01), b11 = _mm256_fmadd_ps(v1, xv, b11);        \
                    xv = _mm256_loadu_ps(x2 + i + 8);                                              \
                    b02 = _mm256_fmadd_ps(v0, xv, b02), b12 = _mm256_fmadd_ps(v1, xv, b12);        \
                }                                                                                  \
                const __m256 acc[2][3][2] = {{{a00, b00}, {a01, b01}, {a02, b02}},                 \
                                             {{a10, b10}, {a11, b11}, {a12, b12}}};                \
                for (int r = 0; r < 2; r++) {                                                      \
                    const WT *wr = r ? w1 : w0;                                                    \
                    for (int t = 0; t < 3; t++) {                                                  \
                        const float *xt = vx[tp + t];                                              \
                        float s = hm_hsum256(_mm256_add_ps(acc[r][t][0], acc[r][t][1]));           \
                        for (int64_t k = n8; k < n; k++) s += SCALARW(wr[k]) * xt[k];              \
                        out[(tp + t) * 4 + rp + r] = s;                                            \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
    }

HM_FLOAT_46_AVX2(hm_dot46_f32_f32_avx2, float, HM_LOADW_F32_AVX2, HM_SCALAR_F32)
HM_FLOAT_46_AVX2(hm_dot46_bf16_f32_avx2, uint16_t, HM_LOADW_BF16_AVX2, hm_bf16_to_f32)
HM_FLOAT_46_AVX2(hm_dot46_f16_f32_avx2, uint16_t, HM_LOADW_F16_AVX2, _cvtsh_ss)
#undef HM_FLOAT_46_AVX2
#undef HM_LOADW_F32_AVX2
#undef HM_SCALAR_F32
#undef HM_LOADW_BF16_AVX2
#undef HM_LOADW_F16_AVX2

HM_DOT_ENTRIES(f32_f32_avx2, hm_f32_rows_avx2)
HM_DOT_ENTRIES(bf16_f32_avx2, hm_bf16_rows_avx2)
HM_DOT_ENTRIES(f16_f32_avx2, hm_f16_rows_avx2)

/* y += a * x */
static inline void hm_axpy_f32_avx2(int64_t n, float a, const float *x, float *y) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

/* 8 16-bit values (BF16 or IEEE half) widened to floats */
static inline __m256 hm_load_h8_avx2(const uint16_t *p, bool bf16) {
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    return bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                : _mm256_cvtph_ps(h);
}

static inline void hm_axpy_h_avx2(int64_t n, float a, const uint16_t *x, bool bf16, float *y) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(va, hm_load_h8_avx2(x + i, bf16), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(a, bf16 ? hm_bf16_to_f32(x[i]) : hm_f16_to_f32(x[i]), y[i]);
}

/* ops.h's gemv_t_h: every column's sum in increasing r, as plain C's. Up to 4096 columns (y in
 * L1) the rows stream in memory order, four at a time into y (about 1.5x the rate of column
 * blocks, which jump a row's length every 128 bytes, on the development machine); wider ones 64
 * columns at a time in eight accumulators, then 8, then one. */
static inline void hm_gemv_t_h_avx2(int64_t rows, int64_t cols, const float *x, const uint16_t *w,
                                    bool bf16, float *y) {
    if (cols <= 4096 && cols % 8 == 0) {
        for (int64_t c = 0; c < cols; c++) y[c] = 0.0f;
        int64_t r = 0;
        for (; r + 4 <= rows; r += 4) {
            const __m256 x0 = _mm256_set1_ps(x[r]), x1 = _mm256_set1_ps(x[r + 1]),
                         x2 = _mm256_set1_ps(x[r + 2]), x3 = _mm256_set1_ps(x[r + 3]);
            const uint16_t *w0 = w + r * cols;
            for (int64_t c = 0; c < cols; c += 8) {
                __m256 a = _mm256_loadu_ps(y + c);
                a = _mm256_fmadd_ps(x0, hm_load_h8_avx2(w0 + c, bf16), a);
                a = _mm256_fmadd_ps(x1, hm_load_h8_avx2(w0 + cols + c, bf16), a);
                a = _mm256_fmadd_ps(x2, hm_load_h8_avx2(w0 + 2 * cols + c, bf16), a);
                a = _mm256_fmadd_ps(x3, hm_load_h8_avx2(w0 + 3 * cols + c, bf16), a);
                _mm256_storeu_ps(y + c, a);
            }
        }
        for (; r < rows; r++) {
            const __m256 xv = _mm256_set1_ps(x[r]);
            for (int64_t c = 0; c < cols; c += 8)
                _mm256_storeu_ps(y + c, _mm256_fmadd_ps(xv, hm_load_h8_avx2(w + r * cols + c, bf16),
                                                        _mm256_loadu_ps(y + c)));
        }
        return;
    }
    int64_t c0 = 0;
    for (; c0 + 64 <= cols; c0 += 64) {
        __m256 acc[8];
        for (int v = 0; v < 8; v++) acc[v] = _mm256_setzero_ps();
        for (int64_t r = 0; r < rows; r++) {
            const __m256 xv = _mm256_set1_ps(x[r]);
            const uint16_t *wr = w + r * cols + c0;
            for (int v = 0; v < 8; v++)
                acc[v] = _mm256_fmadd_ps(xv, hm_load_h8_avx2(wr + 8 * v, bf16), acc[v]);
        }
        for (int v = 0; v < 8; v++) _mm256_storeu_ps(y + c0 + 8 * v, acc[v]);
    }
    for (; c0 + 8 <= cols; c0 += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t r = 0; r < rows; r++)
            acc = _mm256_fmadd_ps(_mm256_set1_ps(x[r]), hm_load_h8_avx2(w + r * cols + c0, bf16),
                                  acc);
        _mm256_storeu_ps(y + c0, acc);
    }
    for (; c0 < cols; c0++) {
        float s = 0.0f;
        for (int64_t r = 0; r < rows; r++) {
            const uint16_t h = w[r * cols + c0];
            s = fmaf(x[r], bf16 ? hm_bf16_to_f32(h) : hm_f16_to_f32(h), s);
        }
        y[c0] = s;
    }
}

/* e^x as hm_exp_ps_avx512, with 2^k built in the exponent bits (k in [-126, 128] after the
 * clamp: 2^128 overflows to inf only where e^x does too, at x > 88.7 clamped to 88.7 -> finite) */
static inline __m256 hm_exp_ps_avx2(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* 2^k as two factors 2^(k/2) 2^(k - k/2), each a valid normal float for |k| <= 128 */
    const __m256i ki = _mm256_cvtps_epi32(k), k1 = _mm256_srai_epi32(ki, 1),
                  k2 = _mm256_sub_epi32(ki, k1);
    const __m256 s1 = _mm256_castsi256_ps(
                     _mm256_slli_epi32(_mm256_add_epi32(k1, _mm256_set1_epi32(127)), 23)),
                 s2 = _mm256_castsi256_ps(
                     _mm256_slli_epi32(_mm256_add_epi32(k2, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

static inline void hm_silu_mul_f32_avx2(int64_t n, float *g, const float *u) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 e = hm_exp_ps_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x));
        _mm256_storeu_ps(
            g + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* attention blocks of 16 keys (hm_cpu_ops.qk_block16 / pv_block16) */
static inline void hm_qk_block16_avx2(const float *q, int nq, int hd, const float *kt, float scale,
                                      float *s, size_t s_stride) {
    const __m256 sc = _mm256_set1_ps(scale);
    int i = 0;
    for (; i + 2 <= nq; i += 2) {
        const float *q0 = q + (size_t)i * hd;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
        for (int d = 0; d < hd; d++) {
            const __m256 k0 = _mm256_loadu_ps(kt + d * 16), k1 = _mm256_loadu_ps(kt + d * 16 + 8);
            const __m256 x = _mm256_set1_ps(q0[d]), y = _mm256_set1_ps(q0[hd + d]);
            a0 = _mm256_fmadd_ps(x, k0, a0);
            a1 = _mm256_fmadd_ps(x, k1, a1);
            b0 = _mm256_fmadd_ps(y, k0, b0);
            b1 = _mm256_fmadd_ps(y, k1, b1);
        }
        float *s0 = s + (size_t)i * s_stride, *s1 = s0 + s_stride;
        _mm256_storeu_ps(s0, _mm256_mul_ps(a0, sc));
        _mm256_storeu_ps(s0 + 8, _mm256_mul_ps(a1, sc));
        _mm256_storeu_ps(s1, _mm256_mul_ps(b0, sc));
        _mm256_storeu_ps(s1 + 8, _mm256_mul_ps(b1, sc));
    }
    for (; i < nq; i++) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        for (int d = 0; d < hd; d++) {
            const __m256 x = _mm256_set1_ps(q[(size_t)i * hd + d]);
            a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(kt + d * 16), a0);
            a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(kt + d * 16 + 8), a1);
        }
        _mm256_storeu_ps(s + (size_t)i * s_stride, _mm256_mul_ps(a0, sc));
        _mm256_storeu_ps(s + (size_t)i * s_stride + 8, _mm256_mul_ps(a1, sc));
    }
}

/* as hm_pv_block16_avx512: NC independent 8-wide accumulators per row, j in order */
#define HM_PV8_CHUNKS(NC)                                                                          \
    do {                                                                                           \
        __m256 acc[NC];                                                                            \
        _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) acc[c] =                              \
            _mm256_loadu_ps(oi + d0 + 8 * c);                                                      \
        for (int j = 0; j < 16; j++) {                                                             \
            const __m256 pb = _mm256_set1_ps(pi[j]);                                               \
            const float *vj = v + (size_t)j * v_stride + d0;                                       \
            _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) acc[c] =                          \
                _mm256_fmadd_ps(pb, _mm256_loadu_ps(vj + 8 * c), acc[c]);                          \
        }                                                                                          \
        _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++)                                       \
            _mm256_storeu_ps(oi + d0 + 8 * c, acc[c]);                                             \
    } while (0)

static inline void hm_pv_block16_avx2(const float *p, size_t p_stride, int nq, const float *v,
                                      size_t v_stride, int hd, float *o, size_t o_stride) {
    for (int i = 0; i < nq; i++) {
        const float *pi = p + (size_t)i * p_stride;
        float *oi = o + (size_t)i * o_stride;
        int d0 = 0;
        for (; d0 + 64 <= hd; d0 += 64) HM_PV8_CHUNKS(8);
        for (; d0 + 32 <= hd; d0 += 32) HM_PV8_CHUNKS(4);
        for (; d0 + 8 <= hd; d0 += 8) HM_PV8_CHUNKS(1);
        for (; d0 < hd; d0++)
            for (int j = 0; j < 16; j++) oi[d0] += pi[j] * v[(size_t)j * v_stride + d0];
    }
}
#undef HM_PV8_CHUNKS

/* hm_cpu_ops.qk_rows16: each key row against up to 4 queries at a time (the one-row kernel) */
static inline void hm_qk_rows16_avx2(const float *q, size_t q_stride, int nq, const float *k,
                                     size_t k_stride, int nk, int hd, float scale, float *s,
                                     size_t s_stride) {
    for (int j = 0; j < nk; j++)
        for (int i0 = 0; i0 < nq; i0 += 4) {
            const int n = nq - i0 < 4 ? nq - i0 : 4;
            const void *x[4];
            float d[4];
            for (int i = 0; i < n; i++) x[i] = q + (size_t)(i0 + i) * q_stride;
            hm_dotn_f32_f32_avx2(hd, k + (size_t)j * k_stride, x, n, d);
            for (int i = 0; i < n; i++) s[(size_t)(i0 + i) * s_stride + j] = d[i] * scale;
        }
}

/* x[i] = e^(x[i] - m) for i < n; returns their sum */
static inline float hm_expsum_f32_avx2(int64_t n, float *x, float m) {
    const __m256 vm = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = hm_exp_ps_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    _Alignas(32) float t[8];
    _mm256_store_ps(t, sum);
    float z = ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
    for (; i < n; i++) z += (x[i] = expf(x[i] - m));
    return z;
}

/* max of x[0..n) and -FLT_MAX, NaNs skipped (max_ps returns its second operand when the first
 * is NaN) */
static inline float hm_max_f32_avx2(int64_t n, const float *x) {
    __m256 m = _mm256_set1_ps(-FLT_MAX), nan = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        m = _mm256_max_ps(v, m); /* a NaN in v leaves m: tracked apart */
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    _Alignas(32) float t[8];
    _mm256_store_ps(t, m);
    float r = -FLT_MAX;
    bool any_nan = _mm256_movemask_ps(nan) != 0;
    for (int j = 0; j < 8; j++) r = t[j] > r ? t[j] : r;
    for (; i < n; i++) r = x[i] > r ? x[i] : r, any_nan |= x[i] != x[i];
    return any_nan ? NAN : r;
}

static inline void hm_scale_f32_avx2(int64_t n, float a, float *x) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), va));
    for (; i < n; i++) x[i] *= a;
}

/* IEEE half <-> float (F16C), 8 at a time; the tails through the same instructions on a copy */
static inline void hm_f16_to_f32_avx2(int64_t n, const uint16_t *x, float *y) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    if (i < n) {
        _Alignas(32) uint16_t t[8] = {0};
        _Alignas(32) float o[8];
        memcpy(t, x + i, (size_t)(n - i) * sizeof *t);
        _mm256_store_ps(o, _mm256_cvtph_ps(_mm_load_si128((const __m128i *)t)));
        memcpy(y + i, o, (size_t)(n - i) * sizeof *o);
    }
}

static inline void hm_f32_to_f16_avx2(int64_t n, const float *x, uint16_t *y) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) {
        _Alignas(32) float t[8] = {0};
        _Alignas(32) uint16_t o[8];
        memcpy(t, x + i, (size_t)(n - i) * sizeof *t);
        _mm_store_si128((__m128i *)o,
                        _mm256_cvtps_ph(_mm256_load_ps(t), _MM_FROUND_TO_NEAREST_INT));
        memcpy(y + i, o, (size_t)(n - i) * sizeof *o);
    }
}

/* Activation quantizers (hm_cpu_ops.quant_q8_0 / quant_q8_K), bit for bit the reference ones
 * in ref.c: the same float operations on every value, the conversion rounding to nearest even as
 * lrintf does, codes clamped to [-128, 127], a NaN coded 0 */
static inline float hm_hmax256(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* 8 floats times s to int32 codes, a NaN product coded 0 */
static inline __m256i hm_quant8_avx2(const float *x, __m256 s) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x), s);
    return _mm256_and_si256(_mm256_cvtps_epi32(v),
                            _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_ORD_Q)));
}

/* 32 floats times s to 32 int8 codes in order (saturating packs: the clamp) */
static inline __m256i hm_quant32_avx2(const float *x, __m256 s) {
    const __m256i q0 = hm_quant8_avx2(x, s), q1 = hm_quant8_avx2(x + 8, s),
                  q2 = hm_quant8_avx2(x + 16, s), q3 = hm_quant8_avx2(x + 24, s);
    /* the packs interleave 128-bit lanes: dword j of lane 0 holds x[4j..4j+4), of lane 1
     * x[4j+4..4j+8) for j = 0..3 (one per source) */
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* max |x| over 8 * nv floats, NaNs skipped (MAXPS returns its second operand for a NaN) */
static inline float hm_absmax_avx2(const float *x, int nv) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < nv; j++)
        m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * j)), m);
    return hm_hmax256(m);
}

static inline void hm_quant_q8_0_avx2(const float *x, void *vy, int64_t n) {
    hm_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / HM_QK8_0; i++, x += HM_QK8_0) {
        const float amax = hm_absmax_avx2(x, 4);
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        y[i].d = hm_f32_to_f16(d);
        _mm256_storeu_si256((__m256i *)y[i].qs, hm_quant32_avx2(x, _mm256_set1_ps(id)));
    }
}

static inline void hm_quant_q8_K_avx2(const float *x, void *vy, int64_t n) {
    hm_block_q8_K *y = vy;
    const __m256i ones8 = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / HM_QK_K; i++, x += HM_QK_K) {
        const float amax = hm_absmax_avx2(x, HM_QK_K / 8);
        if (amax == 0) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* the value of largest magnitude that comes first, with its sign */
        float max = amax;
        const __m256 va = _mm256_set1_ps(amax);
        for (int j = 0; j < HM_QK_K / 8; j++) {
            const int k = _mm256_movemask_ps(
                _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * j)), va, _CMP_EQ_OQ));
            if (k) {
                max = x[8 * j + __builtin_ctz((unsigned)k)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 s = _mm256_set1_ps(iscale);
        for (int j = 0; j < HM_QK_K / 32; j++) {
            const __m256i q = hm_quant32_avx2(x + 32 * j, s);
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * j), q);
            /* the two 16-code sums: bytes to pair sums to quad sums, then two hadds */
            __m256i t = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
            t = _mm256_hadd_epi32(t, t);
            t = _mm256_hadd_epi32(t, t);
            y[i].bsums[2 * j] = (int16_t)_mm256_extract_epi32(t, 0);
            y[i].bsums[2 * j + 1] = (int16_t)_mm256_extract_epi32(t, 4);
        }
        y[i].d = 1.0f / iscale;
    }
}

/* kernel table entries of this ISA (hm_cpu_ops.vec_dot), shared by the variants using it */
#define HM_VEC_DOTS_AVX2                                                                           \
    [HM_TYPE_F32] = hm_dot_f32_f32_avx2, [HM_TYPE_F16] = hm_dot_f16_f32_avx2,                      \
    [HM_TYPE_Q4_K] = hm_dot_q4_K_q8_K_avx2, [HM_TYPE_Q8_0] = hm_dot_q8_0_q8_0_avx2,                \
    [HM_TYPE_BF16] = hm_dot_bf16_f32_avx2, [HM_TYPE_Q6_K] = hm_dot_q6_K_q8_K_avx2,                 \
    [HM_TYPE_MXFP4] = hm_dot_mxfp4_q8_0_avx2, [HM_TYPE_IQ4_XS] = hm_dot_iq4_xs_q8_K_avx2,          \
    [HM_TYPE_Q5_K] = hm_dot_q5_K_q8_K_avx2, [HM_TYPE_Q4_0] = hm_dot_q4_0_q8_0_avx2,                \
    [HM_TYPE_IQ4_NL] = hm_dot_iq4_nl_q8_0_avx2, [HM_TYPE_Q5_0] = hm_dot_q5_0_q8_0_avx2,            \
    [HM_TYPE_FP8_B128] = hm_dot_fp8_b128_f32_avx2, [HM_TYPE_Q2_K] = hm_dot_q2_K_q8_K_avx2,         \
    [HM_TYPE_Q3_K] = hm_dot_q3_K_q8_K_avx2, [HM_TYPE_Q4_1] = hm_dot_q4_1_q8_0_avx2,                \
    [HM_TYPE_Q5_1] = hm_dot_q5_1_q8_0_avx2

/* multi-token dot products (hm_cpu_ops.vec_dot_n) of the AVX2 kernels */
#define HM_VEC_DOTNS_AVX2                                                                          \
    [HM_TYPE_Q4_K] = hm_dotn_q4_K_q8_K_avx2, [HM_TYPE_Q8_0] = hm_dotn_q8_0_q8_0_avx2,              \
    [HM_TYPE_Q6_K] = hm_dotn_q6_K_q8_K_avx2, [HM_TYPE_Q5_K] = hm_dotn_q5_K_q8_K_avx2,              \
    [HM_TYPE_IQ4_XS] = hm_dotn_iq4_xs_q8_K_avx2, [HM_TYPE_FP8_B128] = hm_dotn_fp8_b128_f32_avx2,   \
    [HM_TYPE_F32] = hm_dotn_f32_f32_avx2, [HM_TYPE_BF16] = hm_dotn_bf16_f32_avx2,                  \
    [HM_TYPE_F16] = hm_dotn_f16_f32_avx2, [HM_TYPE_Q2_K] = hm_dotn_q2_K_q8_K_avx2,                 \
    [HM_TYPE_IQ4_NL] = hm_dotn_iq4_nl_q8_0_avx2, [HM_TYPE_MXFP4] = hm_dotn_mxfp4_q8_0_avx2,        \
    [HM_TYPE_Q4_0] = hm_dotn_q4_0_q8_0_avx2, [HM_TYPE_Q5_0] = hm_dotn_q5_0_q8_0_avx2,              \
    [HM_TYPE_Q3_K] = hm_dotn_q3_K_q8_K_avx2, [HM_TYPE_Q4_1] = hm_dotn_q4_1_q8_0_avx2,              \
    [HM_TYPE_Q5_1] = hm_dotn_q5_1_q8_0_avx2

#endif
