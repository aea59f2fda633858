/* avx512.c - AVX-512 F/BW/VL/DQ (+VNNI, BF16) kernel variant, compiled with those flags only. */
#include "cpu/ops.h"
#include "cpu/x86/kernels_avx512.h"

const hm_cpu_ops hm_ops_avx512 = {
    .isa = HM_ISA_AVX512,
    .name = "avx512",
    HM_OPS_AVX512_COMMON,
    .i8_matmul = hm_vnni_matmul,
    .i8_matmul_packed = hm_vnni_matmul_packed,
    .peak_ops = hm_peak_ops_avx512,
    .peak_names = {[HM_PEAK_I8] = "VPDPBUSD, AVX-512 VNNI",
                   [HM_PEAK_BF16] = "FMA on 512-bit vectors",
                   [HM_PEAK_F32] = "FMA on 512-bit vectors"},
};
