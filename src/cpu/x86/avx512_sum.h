/* avx512_sum.h - AVX-512 streaming sum shared by the avx512 and amx variants; include only from
 * files compiled with AVX-512 flags. */
#ifndef HM_CPU_X86_AVX512_SUM_H
#define HM_CPU_X86_AVX512_SUM_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

static inline uint64_t hm_sum_u64_avx512(const uint64_t *p, size_t n) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    __m512i a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) { /* 512 bytes per iteration, 8 independent chains */
        const uint64_t *q = p + i;
        a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(q + 0));
        a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(q + 8));
        a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(q + 16));
        a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(q + 24));
        a4 = _mm512_add_epi64(a4, _mm512_loadu_si512(q + 32));
        a5 = _mm512_add_epi64(a5, _mm512_loadu_si512(q + 40));
        a6 = _mm512_add_epi64(a6, _mm512_loadu_si512(q + 48));
        a7 = _mm512_add_epi64(a7, _mm512_loadu_si512(q + 56));
    }
    if (i < n) { /* tail: masked loads, never past p[n-1] */
        for (; i < n; i += 8) {
            size_t left = n - i;
            __mmask8 m = left >= 8 ? (__mmask8)0xff : (__mmask8)((1u << left) - 1);
            a0 = _mm512_add_epi64(a0, _mm512_maskz_loadu_epi64(m, p + i));
        }
    }
    a0 = _mm512_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)),
                          _mm512_add_epi64(_mm512_add_epi64(a4, a5), _mm512_add_epi64(a6, a7)));
    uint64_t lane[8]; /* not _mm512_reduce_add_epi64: gcc's version adds as signed (UB on wrap) */
    _mm512_storeu_si512(lane, a0);
    uint64_t s = 0;
    for (int k = 0; k < 8; k++) s += lane[k];
    return s;
}

#endif
