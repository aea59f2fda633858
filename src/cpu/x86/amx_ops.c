/* amx_ops.c - the AMX kernel variant's table: the AVX-512 dot kernels compiled with GFNI and VBMI
 * (every AMX CPU has them) and amx.c's tile kernels. */
#include "cpu/ops.h"
#include "cpu/x86/avx512_sum.h"
#include "cpu/x86/kq_avx512.h"

static uint64_t sum_u64_amx(const uint64_t *p, size_t n) {
    return hm_sum_u64_avx512(p, n);
}

const hm_cpu_ops hm_ops_amx = {
    .isa = HM_ISA_AMX,
    .name = "amx",
    .sum_u64 = sum_u64_amx,
    .vec_dot = {HM_VEC_DOTS_AVX512},
    .vec_dot_n = {HM_VEC_DOTNS_AVX512},
    .axpy_f32 = hm_axpy_f32_avx512,
    .silu_mul_f32 = hm_silu_mul_f32_avx512,
    .expsum_f32 = hm_expsum_f32_avx512,
    .max_f32 = hm_max_f32_avx512,
    .scale_f32 = hm_scale_f32_avx512,
    .f16_to_f32 = hm_f16_to_f32_avx512,
    .f32_to_f16 = hm_f32_to_f16_avx512,
    .quant_q8_0 = hm_quant_q8_0_avx512,
    .quant_q8_K = hm_quant_q8_K_avx512,
    .rmsnorm_f32 = hm_rmsnorm_f32_avx512,
    .i8_matmul = hm_amx_matmul,
    .i8_matmul_packed = hm_amx_matmul_packed,
    .i8_matmul_packed_rt = hm_amx_matmul_packed_rt,
    .i8_glu_packed_rt = hm_amx_glu_packed_rt,
    .i8_down_acc = hm_amx_down_acc,
    .qk_block16 = hm_qk_block16_avx512,
    .pv_block16 = hm_pv_block16_avx512,
};

