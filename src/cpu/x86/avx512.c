/* avx512.c - AVX-512 F/BW/VL/DQ (+VNNI, BF16) kernel variant, compiled with those flags only. */
#include "cpu/ops.h"
#include "cpu/x86/avx512_sum.h"
#include "cpu/x86/kq_avx512.h"

static uint64_t sum_u64_avx512(const uint64_t *p, size_t n) {
    return hm_sum_u64_avx512(p, n);
}

static float dot_q4_K(int64_t n, const void *w, const void *x) {
    return hm_dot_q4_K_q8_K_avx512(n, w, x);
}
static float dot_q8_0(int64_t n, const void *w, const void *x) {
    return hm_dot_q8_0_q8_0_avx512(n, w, x);
}
static float dot_bf16(int64_t n, const void *w, const void *x) {
    return hm_dot_bf16_f32_avx512(n, w, x);
}
static float dot_q6_K(int64_t n, const void *w, const void *x) {
    return hm_dot_q6_K_q8_K_avx512(n, w, x);
}
static float dot_mxfp4(int64_t n, const void *w, const void *x) {
    return hm_dot_mxfp4_q8_0_avx512(n, w, x);
}
static float dot_iq4_xs(int64_t n, const void *w, const void *x) {
    return hm_dot_iq4_xs_q8_K_avx512(n, w, x);
}
static float dot_q5_K(int64_t n, const void *w, const void *x) {
    return hm_dot_q5_K_q8_K_avx512(n, w, x);
}
static float dot_q4_0(int64_t n, const void *w, const void *x) {
    return hm_dot_q4_0_q8_0_avx512(n, w, x);
}
static float dot_iq4_nl(int64_t n, const void *w, const void *x) {
    return hm_dot_iq4_nl_q8_0_avx512(n, w, x);
}
static float dot_q5_0(int64_t n, const void *w, const void *x) {
    return hm_dot_q5_0_q8_0_avx512(n, w, x);
}

const hm_cpu_ops hm_ops_avx512 = {
    .isa = HM_ISA_AVX512,
    .name = "avx512",
    .sum_u64 = sum_u64_avx512,
    .vec_dot =
        {
            [HM_TYPE_Q4_K] = dot_q4_K,
            [HM_TYPE_Q8_0] = dot_q8_0,
            [HM_TYPE_BF16] = dot_bf16,
            [HM_TYPE_Q6_K] = dot_q6_K,
            [HM_TYPE_MXFP4] = dot_mxfp4,
            [HM_TYPE_IQ4_XS] = dot_iq4_xs,
            [HM_TYPE_Q5_K] = dot_q5_K,
            [HM_TYPE_Q4_0] = dot_q4_0,
            [HM_TYPE_IQ4_NL] = dot_iq4_nl,
            [HM_TYPE_Q5_0] = dot_q5_0,
        },
};
