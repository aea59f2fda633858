/* kq_avx2.h - AVX2 dot products shared by the avx2, avx512 and amx variants (include only from
 * files compiled with at least -mavx2 -mfma -mf16c). */
#ifndef HM_CPU_X86_KQ_AVX2_H
#define HM_CPU_X86_KQ_AVX2_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "quant/blocks.h"

#ifndef HM_PREFETCH_BYTES
#define HM_PREFETCH_BYTES 4096 /* software prefetch distance for weight streams */
#endif

static inline float hm_hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hm_h2f(hm_half h) {
    return _cvtsh_ss(h);
}

/* Unpacks the 12 scale bytes of a Q4_K/Q5_K block: out[0..7] scales, out[8..15] mins (6-bit). */
static inline void hm_k4_unpack_scales(const uint8_t q[12], uint32_t out[4]) {
    uint32_t w0, w1, w2;
    memcpy(&w0, q, 4);
    memcpy(&w1, q + 4, 4);
    memcpy(&w2, q + 8, 4);
    const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
    out[0] = w0 & m6;                                    /* scales 0..3 */
    out[1] = (w2 & m4) | (((w0 >> 6) & m2) << 4);        /* scales 4..7 */
    out[2] = w1 & m6;                                    /* mins 0..3 */
    out[3] = ((w2 >> 4) & m4) | (((w1 >> 6) & m2) << 4); /* mins 4..7 */
}

static inline float hm_dot_q4_K_q8_K_avx2(int64_t n, const void *vw, const void *vx) {
    const hm_block_q4_K *w = vw;
    const hm_block_q8_K *x = vx;
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    float summs = 0;
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        /* stream ahead: rows are contiguous, so this also covers the next row */
        _mm_prefetch((const char *)(w + i) + HM_PREFETCH_BYTES, _MM_HINT_T0);
        _mm_prefetch((const char *)(w + i) + HM_PREFETCH_BYTES + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)(w + i) + HM_PREFETCH_BYTES + 128, _MM_HINT_T0);
        uint32_t sm[4];
        hm_k4_unpack_scales(w[i].scales, sm);
        const float d = x[i].d * hm_h2f(w[i].d);
        const float dmin = x[i].d * hm_h2f(w[i].dmin);
        /* mins x (sums of 32 activations): bsums pairs via madd with the mins as int16 */
        const __m128i mins16 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)sm[3], (int)sm[2]));
        const __m256i bs = _mm256_loadu_si256((const __m256i *)x[i].bsums);
        const __m128i bsum32 =
            _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        const __m128i prod = _mm_madd_epi16(mins16, bsum32);
        __m128i t = _mm_add_epi32(prod, _mm_shuffle_epi32(prod, 0x4e));
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
        summs += dmin * (float)_mm_cvtsi128_si32(t);

        const uint8_t *sc = (const uint8_t *)sm;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i q4 = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * j));
            const __m256i lo = _mm256_and_si256(q4, low4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), low4);
            const __m256i ylo = _mm256_loadu_si256((const __m256i *)(x[i].qs + 64 * j));
            const __m256i yhi = _mm256_loadu_si256((const __m256i *)(x[i].qs + 64 * j + 32));
            __m256i plo = _mm256_maddubs_epi16(lo, ylo); /* |15*127*2| fits int16 */
            __m256i phi = _mm256_maddubs_epi16(hi, yhi);
            plo = _mm256_madd_epi16(plo, _mm256_set1_epi16(sc[2 * j]));
            phi = _mm256_madd_epi16(phi, _mm256_set1_epi16(sc[2 * j + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(plo, phi));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hm_hsum256(acc) - summs;
}

static inline float hm_dot_q8_0_q8_0_avx2(int64_t n, const void *vw, const void *vx) {
    const hm_block_q8_0 *w = vw, *x = vx;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    int64_t nb = n / HM_QK8_0, i = 0;
    for (; i < nb; i++) {
        _mm_prefetch((const char *)(w + i) + HM_PREFETCH_BYTES, _MM_HINT_T0);
        const __m256i a = _mm256_loadu_si256((const __m256i *)w[i].qs);
        const __m256i b = _mm256_loadu_si256((const __m256i *)x[i].qs);
        /* u8 x s8 product needs one unsigned side: |a| and b carrying a's sign */
        const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
        const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
        const __m256 d = _mm256_set1_ps(hm_h2f(w[i].d) * hm_h2f(x[i].d));
        if (i & 1)
            acc1 = _mm256_fmadd_ps(d, p, acc1);
        else
            acc0 = _mm256_fmadd_ps(d, p, acc0);
    }
    return hm_hsum256(_mm256_add_ps(acc0, acc1));
}

static inline float hm_dot_bf16_f32_avx2(int64_t n, const void *vw, const void *vx) {
    const uint16_t *w = vw;
    const float *x = vx;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm_prefetch((const char *)(w + i) + HM_PREFETCH_BYTES, _MM_HINT_T0);
#define BF(k)                                                                                      \
    _mm256_castsi256_ps(_mm256_slli_epi32(                                                         \
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(w + i + k))), 16))
        a0 = _mm256_fmadd_ps(BF(0), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(BF(8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(BF(16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(BF(24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(BF(0), _mm256_loadu_ps(x + i), a0);
#undef BF
    float s = hm_hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) {
        uint32_t u = (uint32_t)w[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        s += f * x[i];
    }
    return s;
}

#endif
