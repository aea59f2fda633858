/* avx2.c - AVX2+FMA+F16C kernel variant (compiled with -mavx2 -mfma -mf16c only). */
#include <immintrin.h>

#include "cpu/ops.h"
#include "cpu/x86/kq_avx2.h"

static uint64_t sum_u64_avx2(const uint64_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    __m256i a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) { /* 256 bytes per iteration, 8 independent chains */
        const __m256i *v = (const __m256i *)(p + i);
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(v + 0));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(v + 1));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(v + 2));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(v + 3));
        a4 = _mm256_add_epi64(a4, _mm256_loadu_si256(v + 4));
        a5 = _mm256_add_epi64(a5, _mm256_loadu_si256(v + 5));
        a6 = _mm256_add_epi64(a6, _mm256_loadu_si256(v + 6));
        a7 = _mm256_add_epi64(a7, _mm256_loadu_si256(v + 7));
    }
    for (; i + 4 <= n; i += 4)
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + i)));
    a0 = _mm256_add_epi64(_mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)),
                          _mm256_add_epi64(_mm256_add_epi64(a4, a5), _mm256_add_epi64(a6, a7)));
    uint64_t lane[4];
    _mm256_storeu_si256((__m256i *)lane, a0);
    uint64_t s = lane[0] + lane[1] + lane[2] + lane[3];
    for (; i < n; i++) s += p[i];
    return s;
}

const hm_cpu_ops hm_ops_avx2 = {
    .isa = HM_ISA_AVX2,
    .name = "avx2",
    .sum_u64 = sum_u64_avx2,
    .vec_dot = {HM_VEC_DOTS_AVX2},
    .vec_dot_n = {HM_VEC_DOTNS_AVX2},
    .axpy_f32 = hm_axpy_f32_avx2,
    .silu_mul_f32 = hm_silu_mul_f32_avx2,
    .expsum_f32 = hm_expsum_f32_avx2,
    .max_f32 = hm_max_f32_avx2,
    .scale_f32 = hm_scale_f32_avx2,
    .f16_to_f32 = hm_f16_to_f32_avx2,
    .f32_to_f16 = hm_f32_to_f16_avx2,
    .quant_q8_0 = hm_quant_q8_0_avx2,
    .quant_q8_K = hm_quant_q8_K_avx2,
    .qk_block16 = hm_qk_block16_avx2,
    .pv_block16 = hm_pv_block16_avx2,
};
