/* blocks.h - block layouts of the quantized formats, defined once for C and CUDA, byte-compatible
 * with ggml (ggml-common.h) so GGUF tensor data is used in place. Sizes are checked below. */
#ifndef HM_QUANT_BLOCKS_H
#define HM_QUANT_BLOCKS_H

#include <stdint.h>

#ifdef __cplusplus
#define HM_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define HM_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

typedef uint16_t hm_half; /* IEEE binary16 bits */
typedef uint16_t hm_bf16; /* bfloat16 bits */

#define HM_QK4_0    32
#define HM_QK8_0    32
#define HM_QK_K     256 /* super-block of the K-quants and IQ4_XS */
#define HM_QK4_NL   32
#define HM_QK_MXFP4 32

typedef struct {
    hm_half d;
    uint8_t qs[16];
} hm_block_q4_0; /* (q - 8) * d */
typedef struct {
    hm_half d, m;
    uint8_t qs[16];
} hm_block_q4_1; /* q * d + m */
typedef struct {
    hm_half d;
    uint8_t qh[4];
    uint8_t qs[16];
} hm_block_q5_0; /* (q - 16) * d */
typedef struct {
    hm_half d, m;
    uint8_t qh[4];
    uint8_t qs[16];
} hm_block_q5_1;
typedef struct {
    hm_half d;
    int8_t qs[32];
} hm_block_q8_0; /* q * d */
typedef struct {
    hm_half d, s;
    int8_t qs[32];
} hm_block_q8_1; /* s = d * sum(q) */

/* K-quants: 256 values in 8 (or 16) sub-blocks with 6-bit (or 4-bit) scales and mins */
typedef struct {
    uint8_t scales[16]; /* low 4 bits scale, high 4 bits min, per 16 values */
    uint8_t qs[64];     /* 2-bit quants */
    hm_half d, dmin;
} hm_block_q2_K;
typedef struct {
    uint8_t hmask[32];  /* high bit of the 3-bit quants */
    uint8_t qs[64];     /* low 2 bits */
    uint8_t scales[12]; /* 16 x 6-bit scales, stored - 32 */
    hm_half d;
} hm_block_q3_K;
typedef struct {
    hm_half d, dmin;
    uint8_t scales[12]; /* 8 x (6-bit scale, 6-bit min) */
    uint8_t qs[128];    /* 4-bit quants */
} hm_block_q4_K;
typedef struct {
    hm_half d, dmin;
    uint8_t scales[12];
    uint8_t qh[32]; /* 5th bit */
    uint8_t qs[128];
} hm_block_q5_K;
typedef struct {
    uint8_t ql[128]; /* low 4 bits */
    uint8_t qh[64];  /* high 2 bits */
    int8_t scales[16];
    hm_half d;
} hm_block_q6_K;
typedef struct {
    float d;
    int8_t qs[256];
    int16_t bsums[16]; /* sums of groups of 16 qs */
} hm_block_q8_K;

/* non-linear 4-bit: codes index hm_kvalues_iq4nl */
typedef struct {
    hm_half d;
    uint8_t qs[16];
} hm_block_iq4_nl;
typedef struct {
    hm_half d;
    uint16_t scales_h;   /* high 2 bits of 8 x 6-bit scales */
    uint8_t scales_l[4]; /* low 4 bits */
    uint8_t qs[128];
} hm_block_iq4_xs;

/* OCP MX FP4: E8M0 shared exponent + 32 E2M1 values (ggml stores them like IQ4_NL) */
typedef struct {
    uint8_t e;
    uint8_t qs[16];
} hm_block_mxfp4;

HM_STATIC_ASSERT(sizeof(hm_block_q4_0) == 18, "q4_0");
HM_STATIC_ASSERT(sizeof(hm_block_q4_1) == 20, "q4_1");
HM_STATIC_ASSERT(sizeof(hm_block_q5_0) == 22, "q5_0");
HM_STATIC_ASSERT(sizeof(hm_block_q5_1) == 24, "q5_1");
HM_STATIC_ASSERT(sizeof(hm_block_q8_0) == 34, "q8_0");
HM_STATIC_ASSERT(sizeof(hm_block_q8_1) == 36, "q8_1");
HM_STATIC_ASSERT(sizeof(hm_block_q2_K) == 84, "q2_K");
HM_STATIC_ASSERT(sizeof(hm_block_q3_K) == 110, "q3_K");
HM_STATIC_ASSERT(sizeof(hm_block_q4_K) == 144, "q4_K");
HM_STATIC_ASSERT(sizeof(hm_block_q5_K) == 176, "q5_K");
HM_STATIC_ASSERT(sizeof(hm_block_q6_K) == 210, "q6_K");
HM_STATIC_ASSERT(sizeof(hm_block_q8_K) == 292, "q8_K");
HM_STATIC_ASSERT(sizeof(hm_block_iq4_nl) == 18, "iq4_nl");
HM_STATIC_ASSERT(sizeof(hm_block_iq4_xs) == 136, "iq4_xs");
HM_STATIC_ASSERT(sizeof(hm_block_mxfp4) == 17, "mxfp4");

/* IQ4_NL / IQ4_XS code book */
static const int8_t hm_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
/* MXFP4 (E2M1) values doubled, as ggml stores them; the scale is 2^(e - 128) (half of E8M0) */
static const int8_t hm_kvalues_mxfp4[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

/* FP8 E4M3 (float8_e4m3fn: no infinities, 0x7f/0xff are NaN) weights with DeepSeek-V3-style
 * scales: one float per 128 x 128 tile (weight_scale_inv), or per output channel. Data is plain
 * bytes [rows x cols]; scales are a separate tensor. */
typedef uint8_t hm_fp8_e4m3;
#define HM_FP8_TILE 128

/* FP8_B128 (hmoe's layout, not a ggml type): 128 FP8 E4M3 values along a row with their float
 * scale, y[j] = d * fp8(qs[j]). A checkpoint's 128 x 128 tile scale (or its row's channel scale)
 * is copied next to the values at load, so a row is a plain sequence of blocks like any ggml
 * format and every kernel sees one scale per block. */
typedef struct {
    float d;
    hm_fp8_e4m3 qs[HM_FP8_TILE];
} hm_block_fp8_b128;
HM_STATIC_ASSERT(sizeof(hm_block_fp8_b128) == 132, "fp8_b128");

/* Q8_0X4 (hmoe's activation layout for the AVX-512 Q8_0 kernels, not a ggml type): Q8_0
 * activations (the same codes and scales) rearranged so that a kernel reads them without
 * shuffles. Blocks of 32 values in groups of 4 (the last group may have k = 1-3), each group
 * 36 k bytes: the codes plus 128 as unsigned bytes, a pair of blocks (2p, 2p + 1) interleaved in
 * 4-byte runs (byte 8m + 4q + r of the pair's 64 = value 4m + r of block 2p + q), a lone last
 * block as its 32 bytes, then the k scales as floats. src/quant/README.md has the reason. */
#define HM_Q8_0X4_GROUP 144 /* bytes of a whole group: 4 x 32 codes + 4 floats */

/* Q8_KX (hmoe's activation layout for the AVX-512 K-quant kernels, not a ggml type): a row of nb
 * Q8_K blocks as they are, then 8 floats per block, sum j = d * (float)(bsums[2j] +
 * bsums[2j + 1]) (the block's 32-value sums, scaled): the mins' term of Q4_K is then one FMA per
 * token and block. 324 bytes per 256 values. */
#define HM_Q8_KX_SUMS 8

#endif
