/* ref.c - plain-C reference kernels: the oracle for every ISA variant. */
#include "cpu/ops.h"

static uint64_t sum_u64_ref(const uint64_t *p, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) s += p[i];
    return s;
}

const hm_cpu_ops hm_ops_ref = {
    .isa = HM_ISA_REF,
    .name = "ref",
    .sum_u64 = sum_u64_ref,
};
