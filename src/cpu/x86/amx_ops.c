/* amx_ops.c - the AMX kernel variant's table: the AVX-512 dot kernels compiled with GFNI and VBMI
 * (every AMX CPU has them) and amx.c's tile kernels. */
#include "cpu/ops.h"
#include "cpu/x86/kernels_avx512.h"

const hm_cpu_ops hm_ops_amx = {
    .isa = HM_ISA_AMX,
    .name = "amx",
    HM_OPS_AVX512_COMMON,
    .i8_matmul = hm_amx_matmul,
    .i8_matmul_packed = hm_amx_matmul_packed,
    .i8_matmul_packed_rt = hm_amx_matmul_packed_rt,
    .i8_glu_packed_rt = hm_amx_glu_packed_rt,
    .i8_down_acc = hm_amx_down_acc,
    .peak_ops = hm_amx_peak_ops,
    .peak_names = {[HM_PEAK_I8] = "TDPBSSD, AMX INT8 tiles",
                   [HM_PEAK_BF16] = "TDPBF16PS, AMX BF16 tiles",
                   [HM_PEAK_F32] = "FMA on 512-bit vectors"},
};
