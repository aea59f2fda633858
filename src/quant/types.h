/* types.h - the ggml tensor type ids as GGUF stores them: name, block size (elements), bytes per
 * block. Every id llama.cpp has defined is here, so files with types we cannot compute yet still
 * open; whether we can compute a type is a separate question asked when a tensor is used. */
#ifndef HM_QUANT_TYPES_H
#define HM_QUANT_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum hm_type {
    HM_TYPE_F32 = 0,
    HM_TYPE_F16 = 1,
    HM_TYPE_Q4_0 = 2,
    HM_TYPE_Q4_1 = 3,
    /* 4, 5: Q4_2, Q4_3 (removed from ggml) */
    HM_TYPE_Q5_0 = 6,
    HM_TYPE_Q5_1 = 7,
    HM_TYPE_Q8_0 = 8,
    HM_TYPE_Q8_1 = 9,
    HM_TYPE_Q2_K = 10,
    HM_TYPE_Q3_K = 11,
    HM_TYPE_Q4_K = 12,
    HM_TYPE_Q5_K = 13,
    HM_TYPE_Q6_K = 14,
    HM_TYPE_Q8_K = 15,
    HM_TYPE_IQ2_XXS = 16,
    HM_TYPE_IQ2_XS = 17,
    HM_TYPE_IQ3_XXS = 18,
    HM_TYPE_IQ1_S = 19,
    HM_TYPE_IQ4_NL = 20,
    HM_TYPE_IQ3_S = 21,
    HM_TYPE_IQ2_S = 22,
    HM_TYPE_IQ4_XS = 23,
    HM_TYPE_I8 = 24,
    HM_TYPE_I16 = 25,
    HM_TYPE_I32 = 26,
    HM_TYPE_I64 = 27,
    HM_TYPE_F64 = 28,
    HM_TYPE_IQ1_M = 29,
    HM_TYPE_BF16 = 30,
    /* 31-33: Q4_0_4_4, Q4_0_4_8, Q4_0_8_8 (removed: now repacked at load time) */
    HM_TYPE_TQ1_0 = 34,
    HM_TYPE_TQ2_0 = 35,
    /* 36-38: IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8 (removed) */
    HM_TYPE_MXFP4 = 39,
    HM_TYPE_NVFP4 = 40,
    HM_TYPE_Q1_0 = 41,
    /* hmoe's own layouts from here on: never read from or written to GGUF files (ggml may give
     * these ids to new types; the GGUF reader and writer reject them) */
    HM_TYPE_FP8_B128 = 42, /* FP8 E4M3 in blocks of 128 with a float scale (blocks.h) */
    /* Q8_0 activations for the AVX-512 kernels (blocks.h): never weights */
    HM_TYPE_Q8_0X4 = 43,
    /* Q8_K activations for the AVX-512 K-quant kernels (blocks.h): never weights */
    HM_TYPE_Q8_KX = 44,
    HM_TYPE_FIRST_INTERNAL = HM_TYPE_FP8_B128,
    HM_TYPE_COUNT = 45
} hm_type;

typedef struct hm_type_info {
    const char *name; /* "Q4_K"; NULL for ids that ggml removed */
    uint32_t block;   /* elements per block */
    uint32_t bytes;   /* bytes per block */
} hm_type_info;

/* NULL for ids outside the table or removed from ggml. */
const hm_type_info *hm_type_get(uint32_t id);
const char *hm_type_name(uint32_t id); /* "?" when unknown */
/* Case-insensitive lookup of a name ("q4_k", "BF16"); -1 when unknown. */
int hm_type_from_name(const char *name);

/* Bytes of a row of n elements; false when n is not a whole number of blocks, the type is unknown,
 * or the size overflows. */
bool hm_type_row_bytes(uint32_t id, uint64_t n, uint64_t *out);

#endif
