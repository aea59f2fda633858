/* ref.h - plain-C reference (de)quantization of every weight format we read: the oracle that the
 * SIMD and CUDA kernels are tested against, and the writer's quantizers. Dequantization follows
 * ggml's formulas operation for operation (same float products, same order), so results equal
 * ggml's and the gguf package's bit for bit. Kernels own no memory and no threads; layouts are in
 * blocks.h and README.md. */
#ifndef HM_QUANT_REF_H
#define HM_QUANT_REF_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "quant/blocks.h"
#include "quant/fp16.h"

/* ---- dequantization: n elements (a whole number of blocks) of `type` at src -> dst ---------- */

bool hm_dequantize_supported(uint32_t type);
/* HM_ERR_INVALID_ARG when n is negative or not a whole number of blocks, HM_ERR_UNSUPPORTED for
 * types without a dequantizer (both messages name the type). */
hm_status hm_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Per-type kernels; k must be a whole number of blocks (not checked). */
void hm_dequantize_row_f32(const float *x, float *y, int64_t k);
void hm_dequantize_row_f16(const hm_half *x, float *y, int64_t k);
void hm_dequantize_row_bf16(const hm_bf16 *x, float *y, int64_t k);
void hm_dequantize_row_q4_0(const hm_block_q4_0 *x, float *y, int64_t k);
void hm_dequantize_row_q4_1(const hm_block_q4_1 *x, float *y, int64_t k);
void hm_dequantize_row_q5_0(const hm_block_q5_0 *x, float *y, int64_t k);
void hm_dequantize_row_q5_1(const hm_block_q5_1 *x, float *y, int64_t k);
void hm_dequantize_row_q8_0(const hm_block_q8_0 *x, float *y, int64_t k);
void hm_dequantize_row_q8_1(const hm_block_q8_1 *x, float *y, int64_t k);
void hm_dequantize_row_q2_K(const hm_block_q2_K *x, float *y, int64_t k);
void hm_dequantize_row_q3_K(const hm_block_q3_K *x, float *y, int64_t k);
void hm_dequantize_row_q4_K(const hm_block_q4_K *x, float *y, int64_t k);
void hm_dequantize_row_q5_K(const hm_block_q5_K *x, float *y, int64_t k);
void hm_dequantize_row_q6_K(const hm_block_q6_K *x, float *y, int64_t k);
void hm_dequantize_row_q8_K(const hm_block_q8_K *x, float *y, int64_t k);
void hm_dequantize_row_iq4_nl(const hm_block_iq4_nl *x, float *y, int64_t k);
void hm_dequantize_row_iq4_xs(const hm_block_iq4_xs *x, float *y, int64_t k);
void hm_dequantize_row_mxfp4(const hm_block_mxfp4 *x, float *y, int64_t k);

/* 6-bit scale and min j (0..7) of a Q4_K/Q5_K super-block (the 12-byte packing in README.md). */
static inline void hm_k4_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Q3_K scale j (0..15), stored + 32: low 4 bits from byte j % 8 (nibble j / 8), high 2 bits from
 * byte 8 + j % 4 (bit pair j / 4). Returns it minus 32. */
static inline int hm_q3_scale(const uint8_t *s, int j) {
    const int lo = (s[j % 8] >> (4 * (j / 8))) & 0xF, hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* IQ4_XS sub-block j's 6-bit scale minus 32: nibble j % 2 of scales_l[j / 2] | bits 2j..2j+1 of
 * scales_h << 4. */
static inline int hm_iq4_xs_scale(const hm_block_iq4_xs *b, int j) {
    const int lo = (b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF, hi = (b->scales_h >> (2 * j)) & 3;
    return (lo | hi << 4) - 32;
}

/* MXFP4 block scale: 2^(e - 128) as a float, i.e. half of the E8M0 value (hm_kvalues_mxfp4 are
 * doubled); e = 0 and 1 give the subnormals 2^-128 and 2^-127, like ggml. */
static inline float hm_e8m0_to_f32_half(uint8_t e) {
    return hm_bits_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

/* ---- int8 decomposition (the matmul kernels' common form) -----------------------------------
 * Integer formats as w = sc[b] * q + bi[b] with int8 q and one float scale (and, for formats with
 * mins, one float bias) per block of hm_i8_block(type) values (32; 16 for Q2_K/Q3_K/Q6_K whose
 * scales are per 16). The float ops are dequantize's, so sc * q + bi equals hm_dequantize_row
 * bit for bit (bi = -(dmin * m), and x + -y == x - y). Not used by a kernel yet: the AMX path
 * re-quantizes per 256 values instead (amx.c); this exact form is meant for an AVX-512 VNNI
 * matmul that keeps GGUF's block scales. */

/* Block length of the decomposition, 0 for types without one (floats, Q8_1, Q8_K). */
int hm_i8_block(uint32_t type);
/* Whether the type has a per-block bias (Q4_1, Q5_1, Q4_K, Q5_K, Q2_K). */
bool hm_i8_has_bias(uint32_t type);
/* One row of cols values (whole blocks of the type): q[0..cols), sc[b * st] and (when bi is not
 * NULL) bi[b * st] for block b. Types without a decomposition write nothing. */
void hm_i8_split_row(uint32_t type, const void *row, int64_t cols, int8_t *q, float *sc, size_t st,
                     float *bi);

/* ---- FP8 E4M3 (float8_e4m3fn) ---------------------------------------------------------------- */

/* Exact; 0x7f and 0xff are NaN (there are no infinities). */
float hm_fp8_e4m3_to_f32(uint8_t v);
/* Round to nearest, ties to even; magnitudes above 448 (and infinities) saturate to +-448; NaN
 * gives 0x7f with the sign of the input. */
uint8_t hm_f32_to_fp8_e4m3(float f);
/* DeepSeek-V3 block scales: w is [rows x cols] row-major, scale_inv is
 * [ceil(rows/tile) x ceil(cols/tile)] row-major, out[r][c] = fp8(w[r][c]) *
 * scale_inv[r/tile][c/tile]. HM_ERR_INVALID_ARG for negative sizes or tile < 1. */
hm_status hm_dequantize_fp8_tiles(const uint8_t *w, const float *scale_inv, int64_t rows,
                                  int64_t cols, int tile, float *out);
/* One scale per output channel (row): out[r][c] = fp8(w[r][c]) * scale[r]. */
hm_status hm_dequantize_fp8_channel(const uint8_t *w, const float *scale, int64_t rows,
                                    int64_t cols, float *out);
/* The same weights as FP8_B128 rows (rows x cols / 128 blocks, cols a multiple of 128): each
 * block keeps its 128 codes and takes the scale of its tile (tile 128) or of its row. Dequantized,
 * the result equals hm_dequantize_fp8_tiles / _channel bit for bit. HM_ERR_INVALID_ARG for other
 * shapes. */
hm_status hm_fp8_to_b128_tiles(const uint8_t *w, const float *scale_inv, int64_t rows, int64_t cols,
                               void *out);
hm_status hm_fp8_to_b128_channel(const uint8_t *w, const float *scale, int64_t rows, int64_t cols,
                                 void *out);

/* MXFP4 as the OCP MX checkpoints store it (gpt-oss on Hugging Face: "*_blocks" of 16 bytes per
 * 32 values, values 2j and 2j + 1 in the low and high nibbles of byte j, and the E8M0 exponents
 * apart in "*_scales") -> nb GGUF MXFP4 blocks (the exponent, then values j and j + 16 in byte j).
 * A bit-exact repack: no value changes. */
void hm_mxfp4_from_ocp(const uint8_t *qs, const uint8_t *e, int64_t nb, hm_block_mxfp4 *out);

/* ---- quantization (weights; the activation quantizers are in src/cpu) ------------------------ */

bool hm_quantize_supported(uint32_t type);
/* n floats -> blocks of `type` at dst. HM_ERR_INVALID_ARG (naming the type) when n is negative or
 * not a whole number of blocks, or a value is not finite (naming its index); HM_ERR_UNSUPPORTED
 * for types without a quantizer. Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 equal ggml's reference
 * quantizers and gguf.quants.quantize byte for byte (except the sign of Q4_1/Q5_1's m when a block
 * is +0 and -0 only: numpy's min() of signed zeros varies); the K-quants and IQ4 formats search
 * scales to minimise the squared error. */
hm_status hm_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* Per-type quantizers; k a whole number of blocks and every value finite (neither is checked). */

void hm_quantize_row_q4_0(const float *x, hm_block_q4_0 *y, int64_t k);
void hm_quantize_row_q4_1(const float *x, hm_block_q4_1 *y, int64_t k);
void hm_quantize_row_q5_0(const float *x, hm_block_q5_0 *y, int64_t k);
void hm_quantize_row_q5_1(const float *x, hm_block_q5_1 *y, int64_t k);
void hm_quantize_row_q8_0(const float *x, hm_block_q8_0 *y, int64_t k);
void hm_quantize_row_q4_K(const float *x, hm_block_q4_K *y, int64_t k);
void hm_quantize_row_q5_K(const float *x, hm_block_q5_K *y, int64_t k);
void hm_quantize_row_q6_K(const float *x, hm_block_q6_K *y, int64_t k);
void hm_quantize_row_iq4_nl(const float *x, hm_block_iq4_nl *y, int64_t k);
void hm_quantize_row_iq4_xs(const float *x, hm_block_iq4_xs *y, int64_t k);

#endif
