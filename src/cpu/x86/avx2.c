/* avx2.c - AVX2+FMA+F16C kernel variant (compiled with -mavx2 -mfma -mf16c only). */
#include <immintrin.h>

#include "cpu/ops.h"
#include "cpu/x86/kernels_avx2.h"

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

/* hm_cpu_ops.peak_ops: the int8 dot step of the AVX2 kernels (VPMADDUBSW, VPMADDWD to 32
 * bits, VPADDD) on 6 chains, or FMA on 10 (latency 4-5 cycles, 2 per cycle) */
static double peak_ops_avx2(hm_peak_kind kind, int64_t iters) {
    double ops;
    if (kind == HM_PEAK_I8) {
        __m256i a0 = _mm256_set1_epi8(1), a1 = _mm256_set1_epi8(2), a2 = _mm256_set1_epi8(3);
        __m256i a3 = _mm256_set1_epi8(4), a4 = _mm256_set1_epi8(5), a5 = _mm256_set1_epi8(6);
        const __m256i b = _mm256_set1_epi8(-7), one = _mm256_set1_epi16(1);
        __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0;
        for (int64_t i = 0; i < iters; i++) {
            /* the codes opaque: their products are not hoisted out of the loop */
            __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5));
            s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_maddubs_epi16(a0, b), one));
            s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_maddubs_epi16(a1, b), one));
            s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(_mm256_maddubs_epi16(a2, b), one));
            s3 = _mm256_add_epi32(s3, _mm256_madd_epi16(_mm256_maddubs_epi16(a3, b), one));
            s4 = _mm256_add_epi32(s4, _mm256_madd_epi16(_mm256_maddubs_epi16(a4, b), one));
            s5 = _mm256_add_epi32(s5, _mm256_madd_epi16(_mm256_maddubs_epi16(a5, b), one));
        }
        const __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(s0, s1), s2),
                                           _mm256_add_epi32(_mm256_add_epi32(s3, s4), s5));
        volatile int sink = _mm256_extract_epi32(s, 0);
        (void)sink;
        ops = 2.0 * 6 * 32 * (double)iters;
    } else {
        const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-3f);
        __m256 c[10];
        for (int j = 0; j < 10; j++) c[j] = _mm256_set1_ps((float)j);
        for (int64_t i = 0; i < iters; i++)
            for (int j = 0; j < 10; j++) c[j] = _mm256_fmadd_ps(c[j], x, y);
        __m256 s = c[0];
        for (int j = 1; j < 10; j++) s = _mm256_add_ps(s, c[j]);
        volatile float sink = _mm256_cvtss_f32(s);
        (void)sink;
        ops = 2.0 * 10 * 8 * (double)iters;
    }
    return ops;
}

const hm_cpu_ops hm_ops_avx2 = {
    .isa = HM_ISA_AVX2,
    .name = "avx2",
    .sum_u64 = sum_u64_avx2,
    .vec_dot = {HM_VEC_DOTS_AVX2},
    .vec_dot_n = {HM_VEC_DOTNS_AVX2},
    .vec_dot_46 = {[HM_TYPE_F32] = hm_dot46_f32_f32_avx2,
                   [HM_TYPE_BF16] = hm_dot46_bf16_f32_avx2,
                   [HM_TYPE_F16] = hm_dot46_f16_f32_avx2},
    .axpy_f32 = hm_axpy_f32_avx2,
    .axpy_h = hm_axpy_h_avx2,
    .gemv_t_h = hm_gemv_t_h_avx2,
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
    .qk_rows16 = hm_qk_rows16_avx2,
    .peak_ops = peak_ops_avx2,
    .peak_names = {[HM_PEAK_I8] = "VPMADDUBSW + VPMADDWD + VPADDD, AVX2",
                   [HM_PEAK_BF16] = "FMA on 256-bit vectors",
                   [HM_PEAK_F32] = "FMA on 256-bit vectors"},
};
