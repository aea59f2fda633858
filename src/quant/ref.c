/* ref.c - plain-C reference (de)quantization. Dequantizers compute exactly ggml's float products in
 * ggml's order (one rounding per operation), which is what makes them bit-identical to ggml and to
 * gguf-py. The legacy quantizers (Q4_0 ... Q8_0) reproduce ggml's reference ones, float for float;
 * the K-quant and IQ4 quantizers are our own scale searches (least squares + local search over the
 * quantized scales), judged by squared error. */
#include "quant/ref.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "quant/types.h"

/* x*d + m must stay two roundings (ggml and numpy never fuse); GCC keeps them apart in ISO C mode
 * (-std=c11 implies -ffp-contract=off), clang needs telling. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ================================================================ dequantization */

void hm_dequantize_row_f32(const float *x, float *y, int64_t k) {
    memmove(y, x, (size_t)k * sizeof(float));
}

/* F16 and BF16 rows are read through memcpy: a safetensors file may put a tensor at any byte
 * offset (the copy compiles to plain unaligned loads) */
void hm_dequantize_row_f16(const hm_half *x, float *y, int64_t k) {
    const unsigned char *b = (const unsigned char *)x;
    for (int64_t i = 0; i < k; i++) {
        hm_half h;
        memcpy(&h, b + 2 * i, sizeof h);
        y[i] = hm_f16_to_f32(h);
    }
}

void hm_dequantize_row_bf16(const hm_bf16 *x, float *y, int64_t k) {
    const unsigned char *b = (const unsigned char *)x;
    for (int64_t i = 0; i < k; i++) {
        hm_bf16 h;
        memcpy(&h, b + 2 * i, sizeof h);
        y[i] = hm_bf16_to_f32(h);
    }
}

/* Low nibbles hold elements 0..15 of a 32-block, high ones 16..31 (Q4_*, Q5_*, IQ4_NL, MXFP4). */
static inline int nib(const uint8_t *qs, int j) {
    return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
}

void hm_dequantize_row_q4_0(const hm_block_q4_0 *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / HM_QK4_0; i++, y += HM_QK4_0) {
        const float d = hm_f16_to_f32(x[i].d);
        for (int j = 0; j < HM_QK4_0; j++) y[j] = (float)(nib(x[i].qs, j) - 8) * d;
    }
}

void hm_dequantize_row_q4_1(const hm_block_q4_1 *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / HM_QK4_0; i++, y += HM_QK4_0) {
        const float d = hm_f16_to_f32(x[i].d), m = hm_f16_to_f32(x[i].m);
        for (int j = 0; j < HM_QK4_0; j++) y[j] = (float)nib(x[i].qs, j) * d + m;
    }
}

/* 5-bit code j of a Q5_0/Q5_1 block: nibble plus bit j of the little-endian 32-bit qh */
static inline int q5_code(const uint8_t *qh, const uint8_t *qs, int j) {
    uint32_t h;
    memcpy(&h, qh, 4);
    return nib(qs, j) | (int)((h >> j) & 1) << 4;
}

void hm_dequantize_row_q5_0(const hm_block_q5_0 *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / HM_QK4_0; i++, y += HM_QK4_0) {
        const float d = hm_f16_to_f32(x[i].d);
        for (int j = 0; j < HM_QK4_0; j++) y[j] = (float)(q5_code(x[i].qh, x[i].qs, j) - 16) * d;
    }
}

void hm_dequantize_row_q5_1(const hm_block_q5_1 *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / HM_QK4_0; i++, y += HM_QK4_0) {
        const float d = hm_f16_to_f32(x[i].d), m = hm_f16_to_f32(x[i].m);
        for (int j = 0; j < HM_QK4_0; j++) y[j] = (float)q5_code(x[i].qh, x[i].qs, j) * d + m;
    }
}

void hm_dequantize_row_q8_0(const hm_block_q8_0 *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / HM_QK8_0; i++, y += HM_QK8_0) {
        const float d = hm_f16_to_f32(x[i].d);
        for (int j = 0; j < HM_QK8_0; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

void hm_dequantize_row_q8_1(const hm_block_q8_1 *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / HM_QK8_0; i++, y += HM_QK8_0) {
        const float d = hm_f16_to_f32(x[i].d);
        for (int j = 0; j < HM_QK8_0; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

/* Q2_K and Q3_K: element v of a super-block sits in half h = v/128, 2-bit plane p = (v%128)/32,
 * byte l = v%32 of that half's 32 qs bytes; its scale is number v/16. */
void hm_dequantize_row_q2_K(const hm_block_q2_K *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / HM_QK_K; i++, y += HM_QK_K) {
        const float d = hm_f16_to_f32(x[i].d), dmin = hm_f16_to_f32(x[i].dmin);
        for (int v = 0; v < HM_QK_K; v++) {
            const uint8_t sc = x[i].scales[v / 16];
            const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
            const int q = (x[i].qs[32 * (v / 128) + v % 32] >> (2 * ((v % 128) / 32))) & 3;
            y[v] = dl * (float)q - ml;
        }
    }
}

void hm_dequantize_row_q3_K(const hm_block_q3_K *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / HM_QK_K; i++, y += HM_QK_K) {
        const float d = hm_f16_to_f32(x[i].d);
        for (int v = 0; v < HM_QK_K; v++) {
            const int h = v / 128, p = (v % 128) / 32, l = v % 32;
            const int lo = (x[i].qs[32 * h + l] >> (2 * p)) & 3;
            const int hbit = (x[i].hmask[l] >> (4 * h + p)) & 1; /* set: +0, clear: -4 */
            const float dl = d * (float)hm_q3_scale(x[i].scales, v / 16);
            y[v] = dl * (float)(lo - (hbit ? 0 : 4));
        }
    }
}

/* Q4_K/Q5_K: element v is in 64-chunk c = v/64; the 32 qs bytes of chunk c hold sub-block 2c in
 * their low nibbles and 2c+1 in their high ones. */
void hm_dequantize_row_q4_K(const hm_block_q4_K *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / HM_QK_K; i++, y += HM_QK_K) {
        const float d = hm_f16_to_f32(x[i].d), dmin = hm_f16_to_f32(x[i].dmin);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            hm_k4_scale_min(x[i].scales, j, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            for (int l = 0; l < 32; l++) {
                const int v = (j & 1) ? q[l] >> 4 : q[l] & 0xF;
                y[32 * j + l] = d1 * (float)v - m1;
            }
        }
    }
}

void hm_dequantize_row_q5_K(const hm_block_q5_K *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / HM_QK_K; i++, y += HM_QK_K) {
        const float d = hm_f16_to_f32(x[i].d), dmin = hm_f16_to_f32(x[i].dmin);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            hm_k4_scale_min(x[i].scales, j, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            for (int l = 0; l < 32; l++) {
                int v = (j & 1) ? q[l] >> 4 : q[l] & 0xF;
                v |= ((x[i].qh[l] >> j) & 1) << 4; /* bit j of qh[l]: 5th bit of sub-block j */
                y[32 * j + l] = d1 * (float)v - m1;
            }
        }
    }
}

/* Q6_K: in half h, element 128h + 32p + l takes its low nibble from ql[64h + l + 32(p&1)] (low
 * nibble for p < 2, high for p >= 2) and its high 2 bits from qh[32h + l] bits 2p..2p+1. */
static inline int q6_code(const hm_block_q6_K *b, int v) {
    const int h = v / 128, p = (v % 128) / 32, l = v % 32;
    const uint8_t lq = b->ql[64 * h + l + 32 * (p & 1)];
    const int lo = p < 2 ? lq & 0xF : lq >> 4, hi = (b->qh[32 * h + l] >> (2 * p)) & 3;
    return (lo | hi << 4) - 32;
}

void hm_dequantize_row_q6_K(const hm_block_q6_K *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / HM_QK_K; i++, y += HM_QK_K) {
        const float d = hm_f16_to_f32(x[i].d);
        for (int v = 0; v < HM_QK_K; v++)
            y[v] = d * (float)x[i].scales[v / 16] * (float)q6_code(&x[i], v);
    }
}

void hm_dequantize_row_q8_K(const hm_block_q8_K *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / HM_QK_K; i++, y += HM_QK_K)
        for (int v = 0; v < HM_QK_K; v++) y[v] = x[i].d * (float)x[i].qs[v];
}

void hm_dequantize_row_iq4_nl(const hm_block_iq4_nl *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / HM_QK4_NL; i++, y += HM_QK4_NL) {
        const float d = hm_f16_to_f32(x[i].d);
        for (int j = 0; j < HM_QK4_NL; j++) y[j] = d * (float)hm_kvalues_iq4nl[nib(x[i].qs, j)];
    }
}

void hm_dequantize_row_iq4_xs(const hm_block_iq4_xs *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / HM_QK_K; i++, y += HM_QK_K) {
        const float d = hm_f16_to_f32(x[i].d);
        for (int j = 0; j < 8; j++) {
            const float dl = d * (float)hm_iq4_xs_scale(&x[i], j);
            for (int l = 0; l < 32; l++)
                y[32 * j + l] = dl * (float)hm_kvalues_iq4nl[nib(x[i].qs + 16 * j, l)];
        }
    }
}

void hm_dequantize_row_mxfp4(const hm_block_mxfp4 *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / HM_QK_MXFP4; i++, y += HM_QK_MXFP4) {
        const float d = hm_e8m0_to_f32_half(x[i].e);
        for (int j = 0; j < HM_QK_MXFP4; j++) y[j] = d * (float)hm_kvalues_mxfp4[nib(x[i].qs, j)];
    }
}

void hm_mxfp4_from_ocp(const uint8_t *qs, const uint8_t *e, int64_t nb, hm_block_mxfp4 *out) {
    for (int64_t b = 0; b < nb; b++, qs += 16) {
        out[b].e = e[b];
        for (int j = 0; j < 16; j++) { /* value j: nibble j % 2 of byte j / 2; j + 16 likewise */
            const uint8_t lo = (uint8_t)((qs[j >> 1] >> ((j & 1) * 4)) & 15);
            const uint8_t hi = (uint8_t)((qs[(j + 16) >> 1] >> ((j & 1) * 4)) & 15);
            out[b].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

/* ================================================================ FP8 E4M3 */

float hm_fp8_e4m3_to_f32(uint8_t v) {
    const uint32_t sign = (uint32_t)(v & 0x80) << 24, e = (v >> 3) & 0xF, m = v & 7;
    if (e == 15 && m == 7) return hm_bits_f32(sign | 0x7fc00000u);
    if (e == 0) { /* subnormal: m * 2^-9, exact in float */
        const float f = (float)m * (1.0f / 512.0f);
        return sign ? -f : f;
    }
    return hm_bits_f32(sign | (e + 120) << 23 | m << 20); /* rebias 7 -> 127 */
}

uint8_t hm_f32_to_fp8_e4m3(float f) {
    const uint32_t x = hm_f32_bits(f);
    const uint8_t sign = (uint8_t)((x >> 24) & 0x80);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7f;
    if (ax >= 0x43e00000u) return sign | 0x7e;    /* >= 448 (and inf): saturate */
    if (ax < 0x3c800000u) {                       /* below 2^-6: subnormal grid of 2^-9 */
        const float v = hm_bits_f32(ax) * 512.0f; /* exact: power-of-two scaling */
        uint32_t r = (uint32_t)v;
        const float frac = v - (float)r;
        if (frac > 0.5f || (frac == 0.5f && (r & 1))) r++;
        return sign | (uint8_t)r; /* r == 8 is the smallest normal's code, as wanted */
    }
    /* normal: keep 3 mantissa bits, round the 20 dropped ones to nearest even; a carry into the
     * exponent is the correct next binade, and ax < 448 cannot round past 448 (0x7e) */
    uint32_t code = ((ax >> 23) - 120) << 3 | ((ax >> 20) & 7);
    const uint32_t rest = ax & 0xfffff;
    if (rest > 0x80000 || (rest == 0x80000 && (code & 1))) code++;
    return sign | (uint8_t)code;
}

/* FP8_B128 rows: y = d * fp8(q) */
static void deq_fp8_b128(const void *vx, float *y, int64_t k) {
    const hm_block_fp8_b128 *x = vx;
    for (int64_t i = 0; i < k / HM_FP8_TILE; i++, y += HM_FP8_TILE)
        for (int j = 0; j < HM_FP8_TILE; j++) y[j] = hm_fp8_e4m3_to_f32(x[i].qs[j]) * x[i].d;
}

/* scale max |x| / 448 per block, codes rounded to nearest even (a block of zeros: d = 0) */
static void qnt_fp8_b128(const float *x, void *vy, int64_t k) {
    hm_block_fp8_b128 *y = vy;
    for (int64_t i = 0; i < k / HM_FP8_TILE; i++, x += HM_FP8_TILE) {
        float amax = 0.0f;
        for (int j = 0; j < HM_FP8_TILE; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 448.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        y[i].d = d;
        for (int j = 0; j < HM_FP8_TILE; j++) y[i].qs[j] = hm_f32_to_fp8_e4m3(x[j] * id);
    }
}

static hm_status fp8_check(const char *what, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0)
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: negative shape %lld x %lld", what,
                         (long long)rows, (long long)cols);
    return HM_OK;
}

hm_status hm_dequantize_fp8_tiles(const uint8_t *w, const float *scale_inv, int64_t rows,
                                  int64_t cols, int tile, float *out) {
    hm_status st = fp8_check("fp8 tiles", rows, cols);
    if (st) return st;
    if (tile < 1) return hm_errorf(HM_ERR_INVALID_ARG, "fp8 tiles: tile size %d < 1", tile);
    const int64_t tiles_per_row = (cols + tile - 1) / tile;
    for (int64_t r = 0; r < rows; r++) {
        const float *srow = scale_inv + (r / tile) * tiles_per_row;
        for (int64_t c = 0; c < cols; c++)
            out[r * cols + c] = hm_fp8_e4m3_to_f32(w[r * cols + c]) * srow[c / tile];
    }
    return HM_OK;
}

hm_status hm_dequantize_fp8_channel(const uint8_t *w, const float *scale, int64_t rows,
                                    int64_t cols, float *out) {
    hm_status st = fp8_check("fp8 channel", rows, cols);
    if (st) return st;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            out[r * cols + c] = hm_fp8_e4m3_to_f32(w[r * cols + c]) * scale[r];
    return HM_OK;
}

/* rows x cols FP8 into FP8_B128 blocks; the scale of row r's block b is
 * scale[(r / rg) * rs + b * bs] (tiles: rg 128, rs blocks per row, bs 1; channels: rg 1, rs 1,
 * bs 0) */
static hm_status fp8_to_b128(const char *what, const uint8_t *w, const float *scale, int64_t rg,
                             size_t rs, size_t bs, int64_t rows, int64_t cols, void *out) {
    hm_status st = fp8_check(what, rows, cols);
    if (st) return st;
    if (cols % HM_FP8_TILE)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "%s: %lld columns is not a multiple of %d (FP8_B128 block)", what,
                         (long long)cols, HM_FP8_TILE);
    hm_block_fp8_b128 *o = out;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < cols / HM_FP8_TILE; b++, o++) {
            o->d = scale[(size_t)(r / rg) * rs + (size_t)b * bs];
            memcpy(o->qs, w + r * cols + b * HM_FP8_TILE, HM_FP8_TILE);
        }
    return HM_OK;
}

hm_status hm_fp8_to_b128_tiles(const uint8_t *w, const float *scale_inv, int64_t rows, int64_t cols,
                               void *out) {
    return fp8_to_b128("fp8 tiles to FP8_B128", w, scale_inv, HM_FP8_TILE,
                       (size_t)(cols / HM_FP8_TILE), 1, rows, cols, out);
}

hm_status hm_fp8_to_b128_channel(const uint8_t *w, const float *scale, int64_t rows, int64_t cols,
                                 void *out) {
    return fp8_to_b128("fp8 channels to FP8_B128", w, scale, 1, 1, 0, rows, cols, out);
}

/* ================================================================ legacy quantizers (exact) */

/* Values are rounded in float and clamped before the integer conversion (no undefined casts). */
static inline int clamp_round(float v, int lo, int hi) { /* roundf: ties away from zero */
    if (!(v > (float)lo)) return lo;
    return v >= (float)hi ? hi : (int)roundf(v);
}

/* The legacy formats' code rounding. In a block so tiny that 1/d overflows, x/d is inf or NaN:
 * gguf-py's numpy casts those to code 0 (on x86), and so do we; f16(d) is 0 there, so the codes
 * change no value. */
static inline int legacy_trunc(float v, int hi) { /* trunc toward zero into [0, hi] */
    if (!(v > 0) || isinf(v)) return 0;
    return v >= (float)hi ? hi : (int)v;
}

static inline int legacy_round(float v, int lo, int hi) {
    return isfinite(v) ? clamp_round(v, lo, hi) : 0;
}

static void put_nibbles(uint8_t *qs, const uint8_t *q) { /* 32 codes -> 16 bytes */
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
}

static void put_q5_high(uint8_t *qh, const uint8_t *q) { /* 5th bits -> little-endian u32 */
    uint32_t h = 0;
    for (int j = 0; j < 32; j++) h |= (uint32_t)(q[j] >> 4) << j;
    memcpy(qh, &h, 4);
}

void hm_quantize_row_q8_0(const float *x, hm_block_q8_0 *y, int64_t k) {
    for (int64_t i = 0; i < k / HM_QK8_0; i++, x += HM_QK8_0) {
        float amax = 0;
        for (int j = 0; j < HM_QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = hm_f32_to_f16(d);
        for (int j = 0; j < HM_QK8_0; j++) y[i].qs[j] = (int8_t)legacy_round(x[j] * id, -127, 127);
    }
}

/* The element of largest magnitude, with its sign; the first one on ties (numpy's argmax). */
static float signed_absmax(const float *x, int n) {
    int imax = 0;
    for (int j = 1; j < n; j++)
        if (fabsf(x[j]) > fabsf(x[imax])) imax = j;
    return x[imax];
}

void hm_quantize_row_q4_0(const float *x, hm_block_q4_0 *y, int64_t k) {
    uint8_t q[32];
    for (int64_t i = 0; i < k / HM_QK4_0; i++, x += HM_QK4_0) {
        const float d = signed_absmax(x, HM_QK4_0) / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = hm_f32_to_f16(d);
        for (int j = 0; j < HM_QK4_0; j++) q[j] = (uint8_t)legacy_trunc(x[j] * id + 8.5f, 15);
        put_nibbles(y[i].qs, q);
    }
}

void hm_quantize_row_q5_0(const float *x, hm_block_q5_0 *y, int64_t k) {
    uint8_t q[32];
    for (int64_t i = 0; i < k / HM_QK4_0; i++, x += HM_QK4_0) {
        const float d = signed_absmax(x, HM_QK4_0) / -16.0f, id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = hm_f32_to_f16(d);
        for (int j = 0; j < HM_QK4_0; j++) q[j] = (uint8_t)legacy_trunc(x[j] * id + 16.5f, 31);
        put_q5_high(y[i].qh, q);
        for (int j = 0; j < HM_QK4_0; j++) q[j] &= 15;
        put_nibbles(y[i].qs, q);
    }
}

static void min_max(const float *x, int n, float *mn, float *mx) {
    *mn = *mx = x[0];
    for (int j = 1; j < n; j++) {
        if (x[j] < *mn) *mn = x[j];
        if (x[j] > *mx) *mx = x[j];
    }
}

/* Q4_1/Q5_1: codes = trunc((x - min) / d + 0.5) with d = (max - min) / nmax. */
static float affine_codes(const float *x, int nmax, uint8_t *q, float *min_out) {
    float mn, mx;
    min_max(x, 32, &mn, &mx);
    const float d = (mx - mn) / (float)nmax, id = d != 0 ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) q[j] = (uint8_t)legacy_trunc((x[j] - mn) * id + 0.5f, nmax);
    *min_out = mn;
    return d;
}

void hm_quantize_row_q4_1(const float *x, hm_block_q4_1 *y, int64_t k) {
    uint8_t q[32];
    for (int64_t i = 0; i < k / HM_QK4_0; i++, x += HM_QK4_0) {
        float mn;
        y[i].d = hm_f32_to_f16(affine_codes(x, 15, q, &mn));
        y[i].m = hm_f32_to_f16(mn);
        put_nibbles(y[i].qs, q);
    }
}

void hm_quantize_row_q5_1(const float *x, hm_block_q5_1 *y, int64_t k) {
    uint8_t q[32];
    for (int64_t i = 0; i < k / HM_QK4_0; i++, x += HM_QK4_0) {
        float mn;
        y[i].d = hm_f32_to_f16(affine_codes(x, 31, q, &mn));
        y[i].m = hm_f32_to_f16(mn);
        put_q5_high(y[i].qh, q);
        for (int j = 0; j < 32; j++) q[j] &= 15;
        put_nibbles(y[i].qs, q);
    }
}

/* ================================================================ K-quant / IQ4 quantizers
 *
 * Two stages, both minimising the plain squared error of the dequantized values:
 * 1. per sub-block, a continuous scale (and min) from a sweep of starting scales, each refined by
 *    alternating "nearest codes for this scale" and "least-squares scale for these codes";
 * 2. per super-block, the f16 super-scale(s) from a few candidates around max/levels, and for each
 *    sub-block the best of the neighbouring quantized scale codes, with codes re-chosen for the
 *    exact dequantized scale (d * ls computed as the dequantizer computes it). */

#define KQ_MAXN 32 /* largest sub-block */

/* f16 value nearest v, clamped to the finite range so a huge block still gets a usable scale */
static float f16_round(float v) {
    if (v > 65504.0f) v = 65504.0f;
    if (v < -65504.0f) v = -65504.0f;
    return hm_f16_to_f32(hm_f32_to_f16(v));
}

/* ---- affine sub-blocks (Q4_K, Q5_K): x ~ s*q - m, q in [0, nmax], s >= 0, m >= 0 ---- */

/* Least-squares s, m for fixed codes (m clamped to >= 0, s to >= 0); returns the squared error. */
static double affine_fit(const float *x, const uint8_t *q, int n, float *s, float *m) {
    double sl = 0, sl2 = 0, sx = 0, sxl = 0;
    for (int i = 0; i < n; i++) {
        sl += q[i], sl2 += (double)q[i] * q[i], sx += x[i], sxl += (double)x[i] * q[i];
    }
    const double det = n * sl2 - sl * sl;
    double a = det > 0 ? (n * sxl - sx * sl) / det : 0, b = (sx - a * sl) / n;
    if (b > 0) b = 0, a = sl2 > 0 ? sxl / sl2 : 0;
    if (a < 0) a = 0, b = fmin(sx / n, 0);
    *s = (float)a, *m = (float)-b;
    double err = 0;
    for (int i = 0; i < n; i++) {
        const double e = a * q[i] + b - x[i];
        err += e * e;
    }
    return err;
}

/* Search effort of the Q4_K / Q5_K quantizers. Measured on uniform+sine data (relative RMSE,
 * values/s on one core of the 2-core dev VM): the exhaustive setting (starts -10..10 step 1,
 * 4 refits, 8 super-scale candidates) reached 0.05696 at 0.4 M/s -- 13 core-hours for the experts
 * of a 30B model; this one reaches 0.05742 at 2.5 M/s. */
enum { AFF_T = 10, AFF_STEP = 2, AFF_IT = 2, K4_ND = 1 };

/* Nearest codes for (s, m); returns whether any changed. */
static bool affine_codes_for(const float *x, int n, int nmax, float s, float m, uint8_t *q) {
    bool changed = false;
    for (int i = 0; i < n; i++) {
        const uint8_t c = (uint8_t)(s > 0 ? clamp_round((x[i] + m) / s, 0, nmax) : 0);
        changed |= c != q[i];
        q[i] = c;
    }
    return changed;
}

static void affine_search(const float *x, int n, int nmax, float *s_out, float *m_out) {
    float lo, hi;
    min_max(x, n, &lo, &hi);
    lo = fminf(lo, 0);
    *s_out = 0, *m_out = -lo;
    if (!(hi > lo)) return; /* constant block at or below zero: exactly -m */
    double best = INFINITY;
    uint8_t q[KQ_MAXN];
    for (int t = -AFF_T; t <= AFF_T; t += AFF_STEP) { /* starting scales around (hi - lo) / nmax */
        const float is = ((float)nmax + 0.1f * (float)t) / (hi - lo);
        for (int i = 0; i < n; i++) q[i] = (uint8_t)clamp_round((x[i] - lo) * is, 0, nmax);
        for (int it = 0; it < AFF_IT; it++) {
            float s, m;
            const double err = affine_fit(x, q, n, &s, &m);
            if (err < best) best = err, *s_out = s, *m_out = m;
            if (!affine_codes_for(x, n, nmax, s, m, q)) break;
        }
    }
}

/* Squared error of one sub-block at the exact dequantized (sc, mn); codes to q. */
static double affine_eval(const float *x, int n, int nmax, float sc, float mn, uint8_t *q) {
    double err = 0;
    memset(q, 0, (size_t)n);
    affine_codes_for(x, n, nmax, sc, mn, q);
    for (int i = 0; i < n; i++) {
        const double e = (double)(sc * (float)q[i] - mn) - x[i];
        err += e * e;
    }
    return err;
}

typedef struct {
    int nmax;             /* 15 (Q4_K) or 31 (Q5_K) */
    float d, dmin;        /* f16-exact super-scales */
    uint8_t ls[8], lm[8]; /* 6-bit scale and min codes */
    uint8_t q[HM_QK_K];   /* codes */
} k4_plan;

/* For given super-scales: the best neighbouring (ls, lm) per sub-block; returns the total error. */
static double k4_assign(const float *x, const float *s, const float *m, k4_plan *p) {
    double total = 0;
    uint8_t q[32];
    for (int j = 0; j < 8; j++) {
        const int ls0 = p->d > 0 ? clamp_round(s[j] / p->d, 0, 63) : 0;
        const int lm0 = p->dmin > 0 ? clamp_round(m[j] / p->dmin, 0, 63) : 0;
        double best = INFINITY;
        for (int ls = ls0 - 1; ls <= ls0 + 1; ls++)
            for (int lm = lm0 - 1; lm <= lm0 + 1; lm++) {
                if (ls < 0 || ls > 63 || lm < 0 || lm > 63) continue;
                const float sc = p->d * (float)ls, mn = p->dmin * (float)lm;
                const double e = affine_eval(x + 32 * j, 32, p->nmax, sc, mn, q);
                if (e < best) {
                    best = e, p->ls[j] = (uint8_t)ls, p->lm[j] = (uint8_t)lm;
                    memcpy(p->q + 32 * j, q, 32);
                }
            }
        total += best;
    }
    return total;
}

static float max8(const float *v) {
    float mx = 0;
    for (int j = 0; j < 8; j++) mx = fmaxf(mx, v[j]);
    return mx;
}

/* Super-scale candidates: max/63 and slightly finer or coarser grids; first d, then dmin. */
static void k4_plan_block(const float *x, int nmax, k4_plan *p) {
    float s[8], m[8];
    for (int j = 0; j < 8; j++) affine_search(x + 32 * j, 32, nmax, &s[j], &m[j]);
    const float smax = max8(s), mmax = max8(m);
    static const float div[] = {63.0f, 62.0f, 63.5f, 61.0f, 64.0f, 62.5f, 60.0f, 58.0f};
    const int nd = K4_ND;
    k4_plan cur = {.nmax = nmax, .d = f16_round(smax / div[0]), .dmin = f16_round(mmax / 63.0f)};
    double best_err = k4_assign(x, s, m, &cur);
    *p = cur;
    for (int pass = 0; pass < 2; pass++)
        for (int c = 1; c < nd; c++) {
            cur.d = pass == 0 ? f16_round(smax / div[c]) : p->d;
            cur.dmin = f16_round(mmax / (pass == 0 ? 63.0f : div[c]));
            const double e = k4_assign(x, s, m, &cur);
            if (e < best_err) best_err = e, *p = cur;
        }
}

static void k4_pack_scales(uint8_t *out, const uint8_t *ls, const uint8_t *lm) {
    memset(out, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            out[j] |= ls[j] & 63;
            out[j + 4] |= lm[j] & 63;
        } else {
            out[j + 4] = (uint8_t)((ls[j] & 0xF) | (lm[j] & 0xF) << 4);
            out[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            out[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* Low nibbles of the codes of sub-blocks 2c and 2c+1 into 32 bytes per 64-chunk. */
static void k4_pack_nibbles(uint8_t *qs, const uint8_t *q) {
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            qs[32 * c + l] = (uint8_t)((q[64 * c + l] & 0xF) | (q[64 * c + 32 + l] & 0xF) << 4);
}

void hm_quantize_row_q4_K(const float *x, hm_block_q4_K *y, int64_t k) {
    k4_plan p;
    for (int64_t i = 0; i < k / HM_QK_K; i++, x += HM_QK_K) {
        k4_plan_block(x, 15, &p);
        y[i].d = hm_f32_to_f16(p.d), y[i].dmin = hm_f32_to_f16(p.dmin);
        k4_pack_scales(y[i].scales, p.ls, p.lm);
        k4_pack_nibbles(y[i].qs, p.q);
    }
}

void hm_quantize_row_q5_K(const float *x, hm_block_q5_K *y, int64_t k) {
    k4_plan p;
    for (int64_t i = 0; i < k / HM_QK_K; i++, x += HM_QK_K) {
        k4_plan_block(x, 31, &p);
        y[i].d = hm_f32_to_f16(p.d), y[i].dmin = hm_f32_to_f16(p.dmin);
        k4_pack_scales(y[i].scales, p.ls, p.lm);
        k4_pack_nibbles(y[i].qs, p.q);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int j = 0; j < 8; j++) /* bit j of qh[l]: 5th bit of element l of sub-block j */
            for (int l = 0; l < 32; l++) y[i].qh[l] |= (uint8_t)((p.q[32 * j + l] >> 4) << j);
    }
}

/* ---- symmetric sub-blocks on a code book (Q6_K: integers -32..31; IQ4: hm_kvalues_iq4nl) ---- */

typedef struct {
    int n;            /* code book size */
    const float *val; /* ascending values; NULL: the integers base .. base + n - 1 */
    int base;
} codebook;

static const float g_nl_vals[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};
static const codebook g_q6_book = {64, NULL, -32}, g_nl_book = {16, g_nl_vals, 0};

static inline float book_val(const codebook *b, int i) {
    return b->val ? b->val[i] : (float)(b->base + i);
}

/* Index of the code book value nearest v (binary search; the lower one on an exact tie). */
static int book_nearest(const codebook *b, float v) {
    if (!b->val) return clamp_round(v, b->base, b->base + b->n - 1) - b->base;
    int lo = 0, hi = b->n - 1;
    if (!(v > b->val[0])) return 0;
    if (v >= b->val[hi]) return hi;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (b->val[mid] <= v)
            lo = mid;
        else
            hi = mid;
    }
    return v - b->val[lo] <= b->val[hi] - v ? lo : hi;
}

/* Nearest codes for scale s (the code of 0 when s == 0); returns whether any changed. */
static bool book_codes(const codebook *b, const float *x, int n, float s, uint8_t *q) {
    bool changed = false;
    const int zero = book_nearest(b, 0);
    for (int i = 0; i < n; i++) {
        const uint8_t c = (uint8_t)(s != 0 ? book_nearest(b, x[i] / s) : zero);
        changed |= c != q[i];
        q[i] = c;
    }
    return changed;
}

/* Least-squares scale for fixed codes; error to *err. */
static float book_fit(const codebook *b, const float *x, const uint8_t *q, int n, double *err) {
    double sxv = 0, sv2 = 0, sx2 = 0;
    for (int i = 0; i < n; i++) {
        const double v = book_val(b, q[i]);
        sxv += x[i] * v, sv2 += v * v, sx2 += (double)x[i] * x[i];
    }
    const double s = sv2 > 0 ? sxv / sv2 : 0;
    *err = fmax(sx2 - s * sxv, 0); /* minimum of sum (x - s v)^2 */
    return (float)s;
}

/* Best continuous (signed) scale: the largest-magnitude element is mapped near either end of the
 * code book, then codes and scale are alternated to a fixed point. */
static float book_search(const codebook *b, const float *x, int n) {
    const float vmax = signed_absmax(x, n);
    if (vmax == 0) return 0;
    const float ends[2] = {book_val(b, 0), book_val(b, b->n - 1)};
    const float step = (ends[1] - ends[0]) / (float)(b->n - 1) / 10.0f; /* 1/10 of a mean gap */
    double best = INFINITY;
    float best_s = 0;
    uint8_t q[KQ_MAXN] = {0};
    for (int e = 0; e < 2; e++)
        for (int t = -10; t <= 10; t++) {
            float s = vmax / (ends[e] + step * (float)t);
            book_codes(b, x, n, s, q);
            for (int it = 0; it < 4; it++) {
                double err;
                s = book_fit(b, x, q, n, &err);
                if (err < best) best = err, best_s = s;
                if (!book_codes(b, x, n, s, q)) break;
            }
        }
    return best_s;
}

/* Squared error of one sub-block at the exact dequantized scale sc; codes to q. */
static double book_eval(const codebook *b, const float *x, int n, float sc, uint8_t *q) {
    double err = 0;
    memset(q, 0, (size_t)n);
    book_codes(b, x, n, sc, q);
    for (int i = 0; i < n; i++) {
        const double e = (double)(sc * book_val(b, q[i])) - x[i];
        err += e * e;
    }
    return err;
}

typedef struct {
    const codebook *book;
    int sub, nsub;      /* sub-block size and count */
    int lmin, lmax;     /* range of the scale codes */
    float d;            /* f16-exact super-scale */
    int ls[16];         /* scale codes */
    uint8_t q[HM_QK_K]; /* code book indices */
} sym_plan;

/* For a given super-scale: the best neighbouring scale code per sub-block; the total error. */
static double sym_assign(const float *x, const float *s, sym_plan *p) {
    double total = 0;
    uint8_t q[KQ_MAXN];
    for (int j = 0; j < p->nsub; j++) {
        const int l0 = p->d != 0 ? clamp_round(s[j] / p->d, p->lmin, p->lmax) : 0;
        double best = INFINITY;
        for (int l = l0 - 1; l <= l0 + 1; l++) {
            if (l < p->lmin || l > p->lmax) continue;
            const float sc = p->d * (float)l;
            const double e = book_eval(p->book, x + p->sub * j, p->sub, sc, q);
            if (e < best) {
                best = e, p->ls[j] = l;
                memcpy(p->q + p->sub * j, q, (size_t)p->sub);
            }
        }
        total += best;
    }
    return total;
}

/* Super-scale candidates map the largest-magnitude sub-scale to codes near lmin (negative d) or
 * lmax, the two ends of the signed scale range. */
static void sym_plan_block(const float *x, sym_plan *p) {
    float s[16] = {0};
    for (int j = 0; j < p->nsub; j++) s[j] = book_search(p->book, x + p->sub * j, p->sub);
    const float smax = signed_absmax(s, p->nsub);
    static const float off[] = {0, 0.5f, 1, 1.5f, 2, 3, 4};
    const int noff = (int)(sizeof off / sizeof off[0]);
    sym_plan cur = *p;
    double best_err = INFINITY;
    for (int e = 0; e < 2; e++)
        for (int c = 0; c < noff; c++) {
            const float div = e ? (float)p->lmax - off[c] : (float)p->lmin + off[c];
            cur.d = f16_round(smax / div);
            const double err = sym_assign(x, s, &cur);
            if (err < best_err || (e == 0 && c == 0)) best_err = err, *p = cur;
        }
}

void hm_quantize_row_q6_K(const float *x, hm_block_q6_K *y, int64_t k) {
    sym_plan p = {.book = &g_q6_book, .sub = 16, .nsub = 16, .lmin = -128, .lmax = 127};
    for (int64_t i = 0; i < k / HM_QK_K; i++, x += HM_QK_K) {
        sym_plan_block(x, &p);
        y[i].d = hm_f32_to_f16(p.d);
        for (int j = 0; j < 16; j++) y[i].scales[j] = (int8_t)p.ls[j];
        for (int h = 0; h < 2; h++) /* layout of q6_code(), codes 0..63 = value + 32 */
            for (int l = 0; l < 32; l++) {
                const uint8_t *q = p.q + 128 * h + l;
                y[i].ql[64 * h + l] = (uint8_t)((q[0] & 0xF) | (q[64] & 0xF) << 4);
                y[i].ql[64 * h + l + 32] = (uint8_t)((q[32] & 0xF) | (q[96] & 0xF) << 4);
                y[i].qh[32 * h + l] = (uint8_t)(q[0] >> 4 | (q[32] >> 4) << 2 | (q[64] >> 4) << 4 |
                                                (q[96] >> 4) << 6);
            }
    }
}

void hm_quantize_row_iq4_xs(const float *x, hm_block_iq4_xs *y, int64_t k) {
    sym_plan p = {.book = &g_nl_book, .sub = 32, .nsub = 8, .lmin = -32, .lmax = 31};
    for (int64_t i = 0; i < k / HM_QK_K; i++, x += HM_QK_K) {
        sym_plan_block(x, &p);
        y[i].d = hm_f32_to_f16(p.d);
        y[i].scales_h = 0;
        memset(y[i].scales_l, 0, sizeof y[i].scales_l);
        for (int j = 0; j < 8; j++) {
            const int u = p.ls[j] + 32;
            y[i].scales_l[j / 2] |= (uint8_t)((u & 0xF) << (4 * (j % 2)));
            y[i].scales_h |= (uint16_t)((u >> 4) << (2 * j));
            put_nibbles(y[i].qs + 16 * j, p.q + 32 * j);
        }
    }
}

void hm_quantize_row_iq4_nl(const float *x, hm_block_iq4_nl *y, int64_t k) {
    uint8_t q[32] = {0};
    for (int64_t i = 0; i < k / HM_QK4_NL; i++, x += HM_QK4_NL) {
        const float d = f16_round(book_search(&g_nl_book, x, HM_QK4_NL));
        book_codes(&g_nl_book, x, HM_QK4_NL, d, q);
        y[i].d = hm_f32_to_f16(d);
        put_nibbles(y[i].qs, q);
    }
}

/* ================================================================ dispatch */

/* Type-erased wrappers: the table calls every kernel through one signature without casting
 * function pointers (calling through an incompatible pointer type is undefined). */
#define DEQ(name, T)                                                                               \
    static void deq_##name(const void *x, float *y, int64_t k) {                                   \
        hm_dequantize_row_##name((const T *)x, y, k);                                              \
    }
#define QNT(name, T)                                                                               \
    static void qnt_##name(const float *x, void *y, int64_t k) {                                   \
        hm_quantize_row_##name(x, (T *)y, k);                                                      \
    }
DEQ(f32, float)
DEQ(f16, hm_half)
DEQ(bf16, hm_bf16)
DEQ(q4_0, hm_block_q4_0)
DEQ(q4_1, hm_block_q4_1)
DEQ(q5_0, hm_block_q5_0)
DEQ(q5_1, hm_block_q5_1)
DEQ(q8_0, hm_block_q8_0)
DEQ(q8_1, hm_block_q8_1)
DEQ(q2_K, hm_block_q2_K)
DEQ(q3_K, hm_block_q3_K)
DEQ(q4_K, hm_block_q4_K)
DEQ(q5_K, hm_block_q5_K)
DEQ(q6_K, hm_block_q6_K)
DEQ(q8_K, hm_block_q8_K)
DEQ(iq4_nl, hm_block_iq4_nl)
DEQ(iq4_xs, hm_block_iq4_xs)
DEQ(mxfp4, hm_block_mxfp4)
QNT(q4_0, hm_block_q4_0)
QNT(q4_1, hm_block_q4_1)
QNT(q5_0, hm_block_q5_0)
QNT(q5_1, hm_block_q5_1)
QNT(q8_0, hm_block_q8_0)
QNT(q4_K, hm_block_q4_K)
QNT(q5_K, hm_block_q5_K)
QNT(q6_K, hm_block_q6_K)
QNT(iq4_nl, hm_block_iq4_nl)
QNT(iq4_xs, hm_block_iq4_xs)

static const struct {
    void (*dequant)(const void *x, float *y, int64_t k);
    void (*quant)(const float *x, void *y, int64_t k);
} g_rows[HM_TYPE_COUNT] = {
    [HM_TYPE_F32] = {deq_f32, NULL},
    [HM_TYPE_F16] = {deq_f16, NULL},
    [HM_TYPE_BF16] = {deq_bf16, NULL},
    [HM_TYPE_Q4_0] = {deq_q4_0, qnt_q4_0},
    [HM_TYPE_Q4_1] = {deq_q4_1, qnt_q4_1},
    [HM_TYPE_Q5_0] = {deq_q5_0, qnt_q5_0},
    [HM_TYPE_Q5_1] = {deq_q5_1, qnt_q5_1},
    [HM_TYPE_Q8_0] = {deq_q8_0, qnt_q8_0},
    [HM_TYPE_Q8_1] = {deq_q8_1, NULL},
    [HM_TYPE_Q2_K] = {deq_q2_K, NULL},
    [HM_TYPE_Q3_K] = {deq_q3_K, NULL},
    [HM_TYPE_Q4_K] = {deq_q4_K, qnt_q4_K},
    [HM_TYPE_Q5_K] = {deq_q5_K, qnt_q5_K},
    [HM_TYPE_Q6_K] = {deq_q6_K, qnt_q6_K},
    [HM_TYPE_Q8_K] = {deq_q8_K, NULL},
    [HM_TYPE_IQ4_NL] = {deq_iq4_nl, qnt_iq4_nl},
    [HM_TYPE_IQ4_XS] = {deq_iq4_xs, qnt_iq4_xs},
    [HM_TYPE_MXFP4] = {deq_mxfp4, NULL},
    [HM_TYPE_FP8_B128] = {deq_fp8_b128, qnt_fp8_b128},
};

bool hm_dequantize_supported(uint32_t type) {
    return type < HM_TYPE_COUNT && g_rows[type].dequant;
}

bool hm_quantize_supported(uint32_t type) {
    return type < HM_TYPE_COUNT && g_rows[type].quant;
}

/* Common argument checks of hm_dequantize_row / hm_quantize_row. */
static hm_status check_row(const char *what, uint32_t type, bool supported, int64_t n) {
    const hm_type_info *ti = hm_type_get(type);
    if (!ti) return hm_errorf(HM_ERR_UNSUPPORTED, "%s: unknown type id %u", what, type);
    if (!supported)
        return hm_errorf(HM_ERR_UNSUPPORTED, "%s: type %s is not supported", what, ti->name);
    if (n < 0 || n % ti->block)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "%s: %s: n = %lld is not a whole number of %u-element blocks", what,
                         ti->name, (long long)n, ti->block);
    return HM_OK;
}

hm_status hm_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n) {
    hm_status st = check_row("dequantize", type, hm_dequantize_supported(type), n);
    if (st) return st;
    g_rows[type].dequant(src, dst, n);
    return HM_OK;
}

hm_status hm_quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
    hm_status st = check_row("quantize", type, hm_quantize_supported(type), n);
    if (st) return st;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(src[i]))
            return hm_errorf(HM_ERR_INVALID_ARG, "quantize: %s: value %lld is %g (not finite)",
                             hm_type_name(type), (long long)i, (double)src[i]);
    g_rows[type].quant(src, dst, n);
    return HM_OK;
}

/* ================================================================ int8 decomposition */

int hm_i8_block(uint32_t type) {
    switch (type) {
    case HM_TYPE_Q8_0:
    case HM_TYPE_Q4_0:
    case HM_TYPE_Q4_1:
    case HM_TYPE_Q5_0:
    case HM_TYPE_Q5_1:
    case HM_TYPE_IQ4_NL:
    case HM_TYPE_MXFP4:
    case HM_TYPE_Q4_K:
    case HM_TYPE_Q5_K:
    case HM_TYPE_IQ4_XS:
        return 32;
    case HM_TYPE_Q2_K:
    case HM_TYPE_Q3_K:
    case HM_TYPE_Q6_K:
        return 16;
    default:
        return 0;
    }
}

bool hm_i8_has_bias(uint32_t type) {
    return type == HM_TYPE_Q4_1 || type == HM_TYPE_Q5_1 || type == HM_TYPE_Q4_K ||
           type == HM_TYPE_Q5_K || type == HM_TYPE_Q2_K;
}

/* One block's outputs: q[0..bs), sc[b * st], bi[b * st] (bi only for bias types). */
#define SPLIT_PUT(b, s, m)                                                                         \
    do {                                                                                           \
        sc[(size_t)(b)*st] = (s);                                                                  \
        if (bi) bi[(size_t)(b)*st] = (m);                                                          \
    } while (0)

void hm_i8_split_row(uint32_t type, const void *row, int64_t cols, int8_t *q, float *sc, size_t st,
                     float *bi) {
    const int64_t nb32 = cols / 32, nbk = cols / HM_QK_K;
    switch (type) {
    case HM_TYPE_Q8_0: {
        const hm_block_q8_0 *x = row;
        for (int64_t i = 0; i < nb32; i++) {
            memcpy(q + 32 * i, x[i].qs, 32);
            SPLIT_PUT(i, hm_f16_to_f32(x[i].d), 0.0f);
        }
        break;
    }
    case HM_TYPE_Q4_0: {
        const hm_block_q4_0 *x = row;
        for (int64_t i = 0; i < nb32; i++) {
            for (int j = 0; j < 32; j++) q[32 * i + j] = (int8_t)(nib(x[i].qs, j) - 8);
            SPLIT_PUT(i, hm_f16_to_f32(x[i].d), 0.0f);
        }
        break;
    }
    case HM_TYPE_Q4_1: {
        const hm_block_q4_1 *x = row;
        for (int64_t i = 0; i < nb32; i++) {
            for (int j = 0; j < 32; j++) q[32 * i + j] = (int8_t)nib(x[i].qs, j);
            SPLIT_PUT(i, hm_f16_to_f32(x[i].d), hm_f16_to_f32(x[i].m));
        }
        break;
    }
    case HM_TYPE_Q5_0: {
        const hm_block_q5_0 *x = row;
        for (int64_t i = 0; i < nb32; i++) {
            for (int j = 0; j < 32; j++)
                q[32 * i + j] = (int8_t)(q5_code(x[i].qh, x[i].qs, j) - 16);
            SPLIT_PUT(i, hm_f16_to_f32(x[i].d), 0.0f);
        }
        break;
    }
    case HM_TYPE_Q5_1: {
        const hm_block_q5_1 *x = row;
        for (int64_t i = 0; i < nb32; i++) {
            for (int j = 0; j < 32; j++) q[32 * i + j] = (int8_t)q5_code(x[i].qh, x[i].qs, j);
            SPLIT_PUT(i, hm_f16_to_f32(x[i].d), hm_f16_to_f32(x[i].m));
        }
        break;
    }
    case HM_TYPE_IQ4_NL: {
        const hm_block_iq4_nl *x = row;
        for (int64_t i = 0; i < nb32; i++) {
            for (int j = 0; j < 32; j++) q[32 * i + j] = hm_kvalues_iq4nl[nib(x[i].qs, j)];
            SPLIT_PUT(i, hm_f16_to_f32(x[i].d), 0.0f);
        }
        break;
    }
    case HM_TYPE_MXFP4: {
        const hm_block_mxfp4 *x = row;
        for (int64_t i = 0; i < nb32; i++) {
            for (int j = 0; j < 32; j++) q[32 * i + j] = hm_kvalues_mxfp4[nib(x[i].qs, j)];
            SPLIT_PUT(i, hm_e8m0_to_f32_half(x[i].e), 0.0f);
        }
        break;
    }
    case HM_TYPE_Q4_K:
    case HM_TYPE_Q5_K: {
        const bool q5 = type == HM_TYPE_Q5_K;
        const hm_block_q4_K *x4 = row;
        const hm_block_q5_K *x5 = row;
        for (int64_t i = 0; i < nbk; i++) {
            const uint8_t *scales = q5 ? x5[i].scales : x4[i].scales;
            const uint8_t *qs = q5 ? x5[i].qs : x4[i].qs;
            const float d = hm_f16_to_f32(q5 ? x5[i].d : x4[i].d);
            const float dmin = hm_f16_to_f32(q5 ? x5[i].dmin : x4[i].dmin);
            for (int j = 0; j < 8; j++) {
                uint8_t s, m;
                hm_k4_scale_min(scales, j, &s, &m);
                const uint8_t *qq = qs + 32 * (j / 2);
                int8_t *o = q + 256 * i + 32 * j;
                for (int l = 0; l < 32; l++) {
                    int v = (j & 1) ? qq[l] >> 4 : qq[l] & 0xF;
                    if (q5) v |= ((x5[i].qh[l] >> j) & 1) << 4;
                    o[l] = (int8_t)v;
                }
                SPLIT_PUT(8 * i + j, d * (float)s, -(dmin * (float)m));
            }
        }
        break;
    }
    case HM_TYPE_IQ4_XS: {
        const hm_block_iq4_xs *x = row;
        for (int64_t i = 0; i < nbk; i++) {
            const float d = hm_f16_to_f32(x[i].d);
            for (int j = 0; j < 8; j++) {
                for (int l = 0; l < 32; l++)
                    q[256 * i + 32 * j + l] = hm_kvalues_iq4nl[nib(x[i].qs + 16 * j, l)];
                SPLIT_PUT(8 * i + j, d * (float)hm_iq4_xs_scale(&x[i], j), 0.0f);
            }
        }
        break;
    }
    case HM_TYPE_Q6_K: {
        const hm_block_q6_K *x = row;
        for (int64_t i = 0; i < nbk; i++) {
            const float d = hm_f16_to_f32(x[i].d);
            for (int v = 0; v < 256; v++) q[256 * i + v] = (int8_t)q6_code(&x[i], v);
            for (int j = 0; j < 16; j++) SPLIT_PUT(16 * i + j, d * (float)x[i].scales[j], 0.0f);
        }
        break;
    }
    case HM_TYPE_Q3_K: {
        const hm_block_q3_K *x = row;
        for (int64_t i = 0; i < nbk; i++) {
            const float d = hm_f16_to_f32(x[i].d);
            for (int v = 0; v < 256; v++) {
                const int h = v / 128, p = (v % 128) / 32, l = v % 32;
                const int lo = (x[i].qs[32 * h + l] >> (2 * p)) & 3;
                const int hbit = (x[i].hmask[l] >> (4 * h + p)) & 1;
                q[256 * i + v] = (int8_t)(lo - (hbit ? 0 : 4));
            }
            for (int j = 0; j < 16; j++)
                SPLIT_PUT(16 * i + j, d * (float)hm_q3_scale(x[i].scales, j), 0.0f);
        }
        break;
    }
    case HM_TYPE_Q2_K: {
        const hm_block_q2_K *x = row;
        for (int64_t i = 0; i < nbk; i++) {
            const float d = hm_f16_to_f32(x[i].d), dmin = hm_f16_to_f32(x[i].dmin);
            for (int v = 0; v < 256; v++)
                q[256 * i + v] =
                    (int8_t)((x[i].qs[32 * (v / 128) + v % 32] >> (2 * ((v % 128) / 32))) & 3);
            for (int j = 0; j < 16; j++) {
                const uint8_t s = x[i].scales[j];
                SPLIT_PUT(16 * i + j, d * (float)(s & 0xF), -(dmin * (float)(s >> 4)));
            }
        }
        break;
    }
    default:
        break;
    }
}
#undef SPLIT_PUT
