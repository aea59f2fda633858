/* types.c - the ggml type table (ids, names, block geometry) as ggml-common.h defines them, then
 * hmoe's own layouts. */
#include "quant/types.h"

#include <strings.h>

static const hm_type_info g_types[HM_TYPE_COUNT] = {
    [HM_TYPE_F32] = {"F32", 1, 4},
    [HM_TYPE_F16] = {"F16", 1, 2},
    [HM_TYPE_Q4_0] = {"Q4_0", 32, 18},
    [HM_TYPE_Q4_1] = {"Q4_1", 32, 20},
    [HM_TYPE_Q5_0] = {"Q5_0", 32, 22},
    [HM_TYPE_Q5_1] = {"Q5_1", 32, 24},
    [HM_TYPE_Q8_0] = {"Q8_0", 32, 34},
    [HM_TYPE_Q8_1] = {"Q8_1", 32, 36}, /* half d, half s, 32 x int8 (gguf-py says 40: stale) */
    [HM_TYPE_Q2_K] = {"Q2_K", 256, 84},
    [HM_TYPE_Q3_K] = {"Q3_K", 256, 110},
    [HM_TYPE_Q4_K] = {"Q4_K", 256, 144},
    [HM_TYPE_Q5_K] = {"Q5_K", 256, 176},
    [HM_TYPE_Q6_K] = {"Q6_K", 256, 210},
    [HM_TYPE_Q8_K] = {"Q8_K", 256, 292},
    [HM_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [HM_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74},
    [HM_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [HM_TYPE_IQ1_S] = {"IQ1_S", 256, 50},
    [HM_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18},
    [HM_TYPE_IQ3_S] = {"IQ3_S", 256, 110},
    [HM_TYPE_IQ2_S] = {"IQ2_S", 256, 82},
    [HM_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136},
    [HM_TYPE_I8] = {"I8", 1, 1},
    [HM_TYPE_I16] = {"I16", 1, 2},
    [HM_TYPE_I32] = {"I32", 1, 4},
    [HM_TYPE_I64] = {"I64", 1, 8},
    [HM_TYPE_F64] = {"F64", 1, 8},
    [HM_TYPE_IQ1_M] = {"IQ1_M", 256, 56},
    [HM_TYPE_BF16] = {"BF16", 1, 2},
    [HM_TYPE_TQ1_0] = {"TQ1_0", 256, 54},
    [HM_TYPE_TQ2_0] = {"TQ2_0", 256, 66},
    [HM_TYPE_MXFP4] = {"MXFP4", 32, 17},
    [HM_TYPE_NVFP4] = {"NVFP4", 64, 36},
    [HM_TYPE_Q1_0] = {"Q1_0", 128, 18},
    [HM_TYPE_FP8_B128] = {"FP8_B128", 128, 132},
    [HM_TYPE_Q8_0X4] = {"Q8_0X4", 32, 36},
    [HM_TYPE_Q8_KX] = {"Q8_KX", 256, 324},
};

const hm_type_info *hm_type_get(uint32_t id) {
    if (id >= HM_TYPE_COUNT || !g_types[id].name) return NULL;
    return &g_types[id];
}

const char *hm_type_name(uint32_t id) {
    const hm_type_info *t = hm_type_get(id);
    return t ? t->name : "?";
}

int hm_type_from_name(const char *name) {
    for (int i = 0; name && i < HM_TYPE_COUNT; i++)
        if (g_types[i].name && strcasecmp(g_types[i].name, name) == 0) return i;
    return -1;
}

bool hm_type_row_bytes(uint32_t id, uint64_t n, uint64_t *out) {
    const hm_type_info *t = hm_type_get(id);
    if (!t || n % t->block) return false;
    return !__builtin_mul_overflow(n / t->block, (uint64_t)t->bytes, out);
}
