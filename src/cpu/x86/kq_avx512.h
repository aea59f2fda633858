/* kq_avx512.h - AVX-512 (BW/VL/VNNI) dot products shared by the avx512 and amx variants; include
 * only from files compiled with AVX-512 flags. */
#ifndef HM_CPU_X86_KQ_AVX512_H
#define HM_CPU_X86_KQ_AVX512_H

#include "cpu/x86/kq_avx2.h"

static inline float hm_dot_q4_K_q8_K_avx512(int64_t n, const void *vw, const void *vx) {
    const hm_block_q4_K *w = vw;
    const hm_block_q8_K *x = vx;
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    /* both halves hold the same 32 code bytes: low nibbles in the lower half, high in the upper */
    const __m512i nib_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    /* int16 lanes 0-15 take scale 2j, lanes 16-31 scale 2j+1 */
    const __m512i sidx0 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(1), 1);
    const __m512i two = _mm512_set1_epi16(2);
    __m512 acc = _mm512_setzero_ps();
    float summs = 0;
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        _mm_prefetch((const char *)(w + i) + HM_PREFETCH_BYTES, _MM_HINT_T0);
        _mm_prefetch((const char *)(w + i) + HM_PREFETCH_BYTES + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)(w + i) + HM_PREFETCH_BYTES + 128, _MM_HINT_T0);
        uint32_t sm[4];
        hm_k4_unpack_scales(w[i].scales, sm);
        const float d = x[i].d * hm_h2f(w[i].d);
        const float dmin = x[i].d * hm_h2f(w[i].dmin);
        const __m128i mins16 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)sm[3], (int)sm[2]));
        const __m256i bs = _mm256_loadu_si256((const __m256i *)x[i].bsums);
        const __m128i bsum32 =
            _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        const __m128i prod = _mm_madd_epi16(mins16, bsum32);
        __m128i t = _mm_add_epi32(prod, _mm_shuffle_epi32(prod, 0x4e));
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
        summs += dmin * (float)_mm_cvtsi128_si32(t);

        const __m512i sc =
            _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)sm[1], (int)sm[0])));
        __m512i sidx = sidx0;
        __m512i sumi = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            const __m512i q2 =
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * j)));
            const __m512i q = _mm512_and_si512(_mm512_srlv_epi16(q2, nib_shift), low4);
            const __m512i y = _mm512_loadu_si512(x[i].qs + 64 * j);
            const __m512i s16 = _mm512_permutexvar_epi16(sidx, sc);
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(_mm512_maddubs_epi16(q, y), s16));
            sidx = _mm512_add_epi16(sidx, two);
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    return _mm512_reduce_add_ps(acc) - summs;
}

static inline float hm_dot_q8_0_q8_0_avx512(int64_t n, const void *vw, const void *vx) {
    const hm_block_q8_0 *w = vw, *x = vx;
    __m512 acc = _mm512_setzero_ps();
    int64_t nb = n / HM_QK8_0, i = 0;
    for (; i + 2 <= nb; i += 2) { /* two blocks per register: lanes 0-7 block i, 8-15 block i+1 */
        _mm_prefetch((const char *)(w + i) + HM_PREFETCH_BYTES, _MM_HINT_T0);
        _mm_prefetch((const char *)(w + i) + HM_PREFETCH_BYTES + 64, _MM_HINT_T0);
        const __m512i a =
            _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)w[i].qs)),
                               _mm256_loadu_si256((const __m256i *)w[i + 1].qs), 1);
        const __m512i b =
            _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x[i].qs)),
                               _mm256_loadu_si256((const __m256i *)x[i + 1].qs), 1);
        const __m512i ua = _mm512_abs_epi8(a);
        /* b carrying a's sign: negate where a < 0 */
        const __m512i sb =
            _mm512_mask_sub_epi8(b, _mm512_movepi8_mask(a), _mm512_setzero_si512(), b);
        const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ua, sb);
        const __m512 d =
            _mm512_insertf32x8(_mm512_set1_ps(hm_h2f(w[i].d) * hm_h2f(x[i].d)),
                               _mm256_set1_ps(hm_h2f(w[i + 1].d) * hm_h2f(x[i + 1].d)), 1);
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc);
    }
    float s = _mm512_reduce_add_ps(acc);
    if (i < nb) s += hm_dot_q8_0_q8_0_avx2(HM_QK8_0, &w[i], &x[i]);
    return s;
}

static inline float hm_dot_bf16_f32_avx512(int64_t n, const void *vw, const void *vx) {
    const uint16_t *w = vw;
    const float *x = vx;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
#define BF(k)                                                                                      \
    _mm512_castsi512_ps(_mm512_slli_epi32(                                                         \
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(w + i + k))), 16))
    for (; i + 64 <= n; i += 64) {
        _mm_prefetch((const char *)(w + i) + HM_PREFETCH_BYTES, _MM_HINT_T0);
        _mm_prefetch((const char *)(w + i) + HM_PREFETCH_BYTES + 64, _MM_HINT_T0);
        a0 = _mm512_fmadd_ps(BF(0), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(BF(16), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(BF(32), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(BF(48), _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(BF(0), _mm512_loadu_ps(x + i), a0);
#undef BF
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    if (i < n) s += hm_dot_bf16_f32_avx2(n - i, w + i, x + i);
    return s;
}

#endif
