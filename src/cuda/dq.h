/* dq.h - dequantization of 32 consecutive values of a weight row, one function per type, for C
 * and CUDA alike (host twins of the device code, tested against src/quant/ref.c on the CPU).
 *
 * Results equal hm_dequantize_row bit for bit: the same float operations in the same order, each
 * one rounded (on the device through __fmul_rn / __fadd_rn / __fsub_rn, which nvcc never fuses
 * into an FMA; in C, -std=c11 keeps a * b - c two roundings). Two device caveats: the GPU returns
 * its canonical NaN rather than an input's payload, and -ftz=true (--use_fast_math) would flush
 * the subnormals that tiny scales produce; compile these kernels without it.
 *
 * Lookup tables (IQ4_NL's code book, MXFP4's values) are packed into integer constants instead of
 * arrays: a host array cannot be read from device code and a __constant__ one cannot be read from
 * the host side of a __host__ __device__ function, while constants work in both and stay in
 * registers.
 *
 * Alignment on the device: rows are read through their natural types, so a row must start at a
 * multiple of 2 bytes (F16, BF16 and every block with a half scale), 4 (F32, FP8_B128) or 1
 * (MXFP4). The host side has no such requirement for F32/F16/BF16 (read through memcpy, like
 * ref.c; a safetensors tensor may sit at any offset). */
#ifndef HM_CUDA_DQ_H
#define HM_CUDA_DQ_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cuda/hd.h"
#include "quant/blocks.h"
#include "quant/types.h"

/* ---- scalar helpers ------------------------------------------------------------------------ */

HM_HD float hm_hd_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* a * b, a + b, a - b, each rounded once: never contracted into an FMA on the device */
HM_HD float hm_hd_fmul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
HM_HD float hm_hd_fadd(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
HM_HD float hm_hd_fsub(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

/* (float)v for a code |v| < 2^22, the same value: on the device as 1.5 * 2^23 + v's bits less
 * 1.5 * 2^23 (an integer add and a float subtract, both exact) instead of an int-to-float
 * conversion, which runs at a quarter of the float rate and bounded the dequantizing kernels */
HM_HD float hm_hd_code_f32(int v) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(__int_as_float(0x4B400000 + v), 12582912.0f);
#else
    return (float)v;
#endif
}

/* uint16 number i of p (2-byte aligned on the device) */
HM_HD uint16_t hm_hd_ld_u16(const void *p, int64_t i) {
#ifdef __CUDA_ARCH__
    return ((const uint16_t *)p)[i];
#else
    uint16_t v;
    memcpy(&v, (const unsigned char *)p + 2 * i, 2);
    return v;
#endif
}

/* hm_f16_to_f32 (quant/fp16.h), operation for operation */
HM_HD float hm_hd_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return hm_hd_bits_f32(sign | 0x7f800000u | (m << 13)); /* inf / nan */
    if (e == 0) {
        if (m == 0) return hm_hd_bits_f32(sign);
        const float v = hm_hd_fmul((float)m, 1.0f / 16777216.0f); /* subnormal: m * 2^-24 */
        return sign ? -v : v;
    }
    return hm_hd_bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

HM_HD float hm_hd_bf16_to_f32(uint16_t b) {
    return hm_hd_bits_f32((uint32_t)b << 16);
}

/* hm_fp8_e4m3_to_f32 (quant/ref.c): exact; 0x7f and 0xff are NaN */
HM_HD float hm_hd_fp8_e4m3_to_f32(uint8_t v) {
    const uint32_t sign = (uint32_t)(v & 0x80) << 24, e = (v >> 3) & 0xF, m = v & 7;
    if (e == 15 && m == 7) return hm_hd_bits_f32(sign | 0x7fc00000u);
    if (e == 0) { /* subnormal: m * 2^-9 */
        const float f = hm_hd_fmul((float)m, 1.0f / 512.0f);
        return sign ? -f : f;
    }
    return hm_hd_bits_f32(sign | (e + 120) << 23 | m << 20);
}

/* hm_e8m0_to_f32_half (quant/ref.h): 2^(e - 128) */
HM_HD float hm_hd_e8m0_to_f32_half(uint8_t e) {
    return hm_hd_bits_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

/* hm_kvalues_iq4nl[n] (n < 16): the code book + 128 as bytes, four per word */
HM_HD int hm_hd_iq4nl_value(int n) {
    const uint32_t w =
        n < 8 ? (n < 4 ? 0x3F2D1801u : 0x766A5D4Fu) : (n < 12 ? 0xA6998D81u : 0xF1D9C5B5u);
    return (int)((w >> (8 * (n & 3))) & 0xFF) - 128;
}

/* hm_kvalues_mxfp4[n] (n < 16): magnitudes 0 1 2 3 4 6 8 12 as bytes, bit 3 the sign */
HM_HD int hm_hd_mxfp4_value(int n) {
    const int v = (int)(((n & 4 ? 0x0C080604u : 0x03020100u) >> (8 * (n & 3))) & 0xFF);
    return n & 8 ? -v : v;
}

/* hm_k4_scale_min (quant/ref.h): 6-bit scale and min j (0..7) of a Q4_K/Q5_K super-block */
HM_HD void hm_hd_k4_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* hm_q3_scale (quant/ref.h): Q3_K scale j (0..15) minus 32 */
HM_HD int hm_hd_q3_scale(const uint8_t *s, int j) {
    const int lo = (s[j % 8] >> (4 * (j / 8))) & 0xF, hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* ---- 32 values of a row per call --------------------------------------------------------------
 * hm_dq32_<type>(row, c, out): the values [32c, 32c + 32) of the row starting at `row` (c >= 0
 * counts 32-value chunks from the row start). 256-value blocks (K-quants, IQ4_XS) hold 8 chunks,
 * FP8_B128's 128-value blocks 4: chunk c is part c % 8 (c % 4) of block c / 8 (c / 4). */

HM_HD void hm_dq32_f32(const void *row, int64_t c, float out[32]) {
    const float *x = (const float *)row + 32 * c;
#ifdef __CUDA_ARCH__
    if (((uintptr_t)x & 15) == 0) { /* eight 16-byte loads */
        HM_HD_UNROLL
        for (int l = 0; l < 8; l++) {
            const float4 v = ((const float4 *)x)[l];
            out[4 * l] = v.x, out[4 * l + 1] = v.y, out[4 * l + 2] = v.z, out[4 * l + 3] = v.w;
        }
        return;
    }
    HM_HD_UNROLL
    for (int l = 0; l < 32; l++) out[l] = x[l];
#else
    memcpy(out, x, 32 * sizeof(float));
#endif
}

/* F16, BF16: the 64 bytes as four 16-byte loads where they are 16-byte aligned */
#ifdef __CUDA_ARCH__
#define HM_DQ32_U16(row, c, out, conv)                                                             \
    do {                                                                                           \
        const uint16_t *h_ = (const uint16_t *)(row) + 32 * (c);                                   \
        if (((uintptr_t)h_ & 15) == 0) {                                                           \
            HM_HD_UNROLL                                                                           \
            for (int l = 0; l < 4; l++) {                                                          \
                const uint4 v = ((const uint4 *)h_)[l];                                            \
                const uint32_t w[4] = {v.x, v.y, v.z, v.w};                                        \
                HM_HD_UNROLL                                                                       \
                for (int e = 0; e < 8; e++)                                                        \
                    (out)[8 * l + e] = conv((uint16_t)(w[e >> 1] >> (16 * (e & 1))));              \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
    } while (0)
#else
#define HM_DQ32_U16(row, c, out, conv) ((void)0)
#endif

HM_HD void hm_dq32_f16(const void *row, int64_t c, float out[32]) {
    HM_DQ32_U16(row, c, out, hm_hd_f16_to_f32);
    HM_HD_UNROLL
    for (int l = 0; l < 32; l++) out[l] = hm_hd_f16_to_f32(hm_hd_ld_u16(row, 32 * c + l));
}

HM_HD void hm_dq32_bf16(const void *row, int64_t c, float out[32]) {
    HM_DQ32_U16(row, c, out, hm_hd_bf16_to_f32);
    HM_HD_UNROLL
    for (int l = 0; l < 32; l++) out[l] = hm_hd_bf16_to_f32(hm_hd_ld_u16(row, 32 * c + l));
}

/* Q4_0, Q4_1, Q5_*, IQ4_NL, MXFP4: byte l holds value l in its low nibble, l + 16 in its high */

HM_HD void hm_dq32_q4_0(const void *row, int64_t c, float out[32]) {
    const hm_block_q4_0 *b = (const hm_block_q4_0 *)row + c;
    const float d = hm_hd_f16_to_f32(b->d);
    HM_HD_UNROLL
    for (int l = 0; l < 16; l++) {
        const int q = b->qs[l];
        out[l] = hm_hd_fmul(hm_hd_code_f32((q & 0xF) - 8), d);
        out[l + 16] = hm_hd_fmul(hm_hd_code_f32((q >> 4) - 8), d);
    }
}

HM_HD void hm_dq32_q4_1(const void *row, int64_t c, float out[32]) {
    const hm_block_q4_1 *b = (const hm_block_q4_1 *)row + c;
    const float d = hm_hd_f16_to_f32(b->d), m = hm_hd_f16_to_f32(b->m);
    HM_HD_UNROLL
    for (int l = 0; l < 16; l++) {
        const int q = b->qs[l];
        out[l] = hm_hd_fadd(hm_hd_fmul(hm_hd_code_f32(q & 0xF), d), m);
        out[l + 16] = hm_hd_fadd(hm_hd_fmul(hm_hd_code_f32(q >> 4), d), m);
    }
}

/* the 5th bits of a Q5_0/Q5_1 block: bit l of the little-endian qh */
HM_HD uint32_t hm_hd_q5_high(const uint8_t *qh) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

HM_HD void hm_dq32_q5_0(const void *row, int64_t c, float out[32]) {
    const hm_block_q5_0 *b = (const hm_block_q5_0 *)row + c;
    const float d = hm_hd_f16_to_f32(b->d);
    const uint32_t h = hm_hd_q5_high(b->qh);
    HM_HD_UNROLL
    for (int l = 0; l < 16; l++) {
        const int q = b->qs[l];
        const int lo = (q & 0xF) | (int)((h >> l) & 1) << 4;
        const int hi = (q >> 4) | (int)((h >> (l + 16)) & 1) << 4;
        out[l] = hm_hd_fmul(hm_hd_code_f32(lo - 16), d);
        out[l + 16] = hm_hd_fmul(hm_hd_code_f32(hi - 16), d);
    }
}

HM_HD void hm_dq32_q5_1(const void *row, int64_t c, float out[32]) {
    const hm_block_q5_1 *b = (const hm_block_q5_1 *)row + c;
    const float d = hm_hd_f16_to_f32(b->d), m = hm_hd_f16_to_f32(b->m);
    const uint32_t h = hm_hd_q5_high(b->qh);
    HM_HD_UNROLL
    for (int l = 0; l < 16; l++) {
        const int q = b->qs[l];
        const int lo = (q & 0xF) | (int)((h >> l) & 1) << 4;
        const int hi = (q >> 4) | (int)((h >> (l + 16)) & 1) << 4;
        out[l] = hm_hd_fadd(hm_hd_fmul(hm_hd_code_f32(lo), d), m);
        out[l + 16] = hm_hd_fadd(hm_hd_fmul(hm_hd_code_f32(hi), d), m);
    }
}

HM_HD void hm_dq32_q8_0(const void *row, int64_t c, float out[32]) {
    const hm_block_q8_0 *b = (const hm_block_q8_0 *)row + c;
    const float d = hm_hd_f16_to_f32(b->d);
#ifdef __CUDA_ARCH__
    /* the codes as 16 two-byte loads (a block is 2-byte aligned): half the load instructions */
    const uint16_t *q2 = (const uint16_t *)b->qs;
    HM_HD_UNROLL
    for (int l = 0; l < 16; l++) {
        const uint16_t v = q2[l];
        out[2 * l] = hm_hd_fmul(hm_hd_code_f32((int8_t)(v & 0xFF)), d);
        out[2 * l + 1] = hm_hd_fmul(hm_hd_code_f32((int8_t)(v >> 8)), d);
    }
#else
    HM_HD_UNROLL
    for (int l = 0; l < 32; l++) out[l] = hm_hd_fmul((float)b->qs[l], d);
#endif
}

/* Q2_K, Q3_K, Q6_K: chunk p of a super-block is 2-bit plane p % 4 of the 32 bytes of half p / 4;
 * its two 16-value halves have scales 2p and 2p + 1. */

HM_HD void hm_dq32_q2_K(const void *row, int64_t c, float out[32]) {
    const hm_block_q2_K *b = (const hm_block_q2_K *)row + (c >> 3);
    const int p = (int)(c & 7), shift = 2 * (p & 3);
    const uint8_t *q = b->qs + 32 * (p >> 2);
    const float d = hm_hd_f16_to_f32(b->d), dmin = hm_hd_f16_to_f32(b->dmin);
    HM_HD_UNROLL
    for (int s = 0; s < 2; s++) {
        const int sc = b->scales[2 * p + s];
        const float dl = hm_hd_fmul(d, (float)(sc & 0xF)), ml = hm_hd_fmul(dmin, (float)(sc >> 4));
        HM_HD_UNROLL
        for (int l = 16 * s; l < 16 * s + 16; l++)
            out[l] = hm_hd_fsub(hm_hd_fmul(dl, hm_hd_code_f32((q[l] >> shift) & 3)), ml);
    }
}

HM_HD void hm_dq32_q3_K(const void *row, int64_t c, float out[32]) {
    const hm_block_q3_K *b = (const hm_block_q3_K *)row + (c >> 3);
    const int p = (int)(c & 7), shift = 2 * (p & 3);
    const uint8_t *q = b->qs + 32 * (p >> 2);
    const float d = hm_hd_f16_to_f32(b->d);
    HM_HD_UNROLL
    for (int s = 0; s < 2; s++) {
        const float dl = hm_hd_fmul(d, (float)hm_hd_q3_scale(b->scales, 2 * p + s));
        HM_HD_UNROLL
        for (int l = 16 * s; l < 16 * s + 16; l++) {
            const int lo = (q[l] >> shift) & 3, hbit = (b->hmask[l] >> p) & 1; /* clear: -4 */
            out[l] = hm_hd_fmul(dl, hm_hd_code_f32(lo - (hbit ? 0 : 4)));
        }
    }
}

/* Q4_K, Q5_K: chunk p is sub-block p, the low (p even) or high nibbles of qs[32 (p / 2) ...] */

HM_HD void hm_dq32_q4_K(const void *row, int64_t c, float out[32]) {
    const hm_block_q4_K *b = (const hm_block_q4_K *)row + (c >> 3);
    const int p = (int)(c & 7), shift = 4 * (p & 1);
    const uint8_t *q = b->qs + 32 * (p >> 1);
    const float d = hm_hd_f16_to_f32(b->d), dmin = hm_hd_f16_to_f32(b->dmin);
    int sc, m;
    hm_hd_k4_scale_min(b->scales, p, &sc, &m);
    const float d1 = hm_hd_fmul(d, (float)sc), m1 = hm_hd_fmul(dmin, (float)m);
#ifdef __CUDA_ARCH__
    /* the 32 code bytes as two 16-byte loads where the row is 16-byte aligned (a super-block is
     * 144 bytes, its codes at 16 + 32 k) */
    if (((uintptr_t)q & 15) == 0) {
        const uint4 w0 = ((const uint4 *)q)[0], w1 = ((const uint4 *)q)[1];
        const uint32_t w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
        HM_HD_UNROLL
        for (int l = 0; l < 32; l++)
            out[l] = hm_hd_fsub(
                hm_hd_fmul(d1, hm_hd_code_f32((int)((w[l >> 2] >> (8 * (l & 3) + shift)) & 0xF))),
                m1);
        return;
    }
#endif
    HM_HD_UNROLL
    for (int l = 0; l < 32; l++)
        out[l] = hm_hd_fsub(hm_hd_fmul(d1, hm_hd_code_f32((q[l] >> shift) & 0xF)), m1);
}

HM_HD void hm_dq32_q5_K(const void *row, int64_t c, float out[32]) {
    const hm_block_q5_K *b = (const hm_block_q5_K *)row + (c >> 3);
    const int p = (int)(c & 7), shift = 4 * (p & 1);
    const uint8_t *q = b->qs + 32 * (p >> 1);
    const float d = hm_hd_f16_to_f32(b->d), dmin = hm_hd_f16_to_f32(b->dmin);
    int sc, m;
    hm_hd_k4_scale_min(b->scales, p, &sc, &m);
    const float d1 = hm_hd_fmul(d, (float)sc), m1 = hm_hd_fmul(dmin, (float)m);
    HM_HD_UNROLL
    for (int l = 0; l < 32; l++) {
        const int v = ((q[l] >> shift) & 0xF) | ((b->qh[l] >> p) & 1) << 4;
        out[l] = hm_hd_fsub(hm_hd_fmul(d1, hm_hd_code_f32(v)), m1);
    }
}

/* Q6_K: low nibbles from ql[64 (p / 4) + 32 (p % 2) ...] (low for p % 4 < 2, high otherwise),
 * high 2 bits from qh[32 (p / 4) ...] bits 2 (p % 4) .. 2 (p % 4) + 1 */
HM_HD void hm_dq32_q6_K(const void *row, int64_t c, float out[32]) {
    const hm_block_q6_K *b = (const hm_block_q6_K *)row + (c >> 3);
    const int p = (int)(c & 7), plane = p & 3;
    const uint8_t *ql = b->ql + 64 * (p >> 2) + 32 * (plane & 1), *qh = b->qh + 32 * (p >> 2);
    const int lshift = 4 * (plane >> 1), hshift = 2 * plane;
    const float d = hm_hd_f16_to_f32(b->d);
    HM_HD_UNROLL
    for (int s = 0; s < 2; s++) {
        const float ds = hm_hd_fmul(d, (float)b->scales[2 * p + s]);
        HM_HD_UNROLL
        for (int l = 16 * s; l < 16 * s + 16; l++) {
            const int q = (((ql[l] >> lshift) & 0xF) | ((qh[l] >> hshift) & 3) << 4) - 32;
            out[l] = hm_hd_fmul(ds, hm_hd_code_f32(q));
        }
    }
}

HM_HD void hm_dq32_iq4_nl(const void *row, int64_t c, float out[32]) {
    const hm_block_iq4_nl *b = (const hm_block_iq4_nl *)row + c;
    const float d = hm_hd_f16_to_f32(b->d);
    HM_HD_UNROLL
    for (int l = 0; l < 16; l++) {
        const int q = b->qs[l];
        out[l] = hm_hd_fmul(d, hm_hd_code_f32(hm_hd_iq4nl_value(q & 0xF)));
        out[l + 16] = hm_hd_fmul(d, hm_hd_code_f32(hm_hd_iq4nl_value(q >> 4)));
    }
}

/* IQ4_XS: chunk p is sub-block p, nibbles of qs[16p ... 16p + 16) like IQ4_NL */
HM_HD void hm_dq32_iq4_xs(const void *row, int64_t c, float out[32]) {
    const hm_block_iq4_xs *b = (const hm_block_iq4_xs *)row + (c >> 3);
    const int p = (int)(c & 7);
    const int lo = (b->scales_l[p / 2] >> (4 * (p % 2))) & 0xF, hi = (b->scales_h >> (2 * p)) & 3;
    const float dl = hm_hd_fmul(hm_hd_f16_to_f32(b->d), (float)((lo | hi << 4) - 32));
    const uint8_t *qs = b->qs + 16 * p;
    HM_HD_UNROLL
    for (int l = 0; l < 16; l++) {
        const int q = qs[l];
        out[l] = hm_hd_fmul(dl, hm_hd_code_f32(hm_hd_iq4nl_value(q & 0xF)));
        out[l + 16] = hm_hd_fmul(dl, hm_hd_code_f32(hm_hd_iq4nl_value(q >> 4)));
    }
}

HM_HD void hm_dq32_mxfp4(const void *row, int64_t c, float out[32]) {
    const hm_block_mxfp4 *b = (const hm_block_mxfp4 *)row + c;
    const float d = hm_hd_e8m0_to_f32_half(b->e);
    HM_HD_UNROLL
    for (int l = 0; l < 16; l++) {
        const int q = b->qs[l];
        out[l] = hm_hd_fmul(d, hm_hd_code_f32(hm_hd_mxfp4_value(q & 0xF)));
        out[l + 16] = hm_hd_fmul(d, hm_hd_code_f32(hm_hd_mxfp4_value(q >> 4)));
    }
}

/* FP8_B128: fp8 * d, in ref.c's order */
HM_HD void hm_dq32_fp8_b128(const void *row, int64_t c, float out[32]) {
    const hm_block_fp8_b128 *b = (const hm_block_fp8_b128 *)row + (c >> 2);
    const uint8_t *q = b->qs + 32 * (int)(c & 3);
    const float d = b->d;
    HM_HD_UNROLL
    for (int l = 0; l < 32; l++) out[l] = hm_hd_fmul(hm_hd_fp8_e4m3_to_f32(q[l]), d);
}

/* ---- dispatch ------------------------------------------------------------------------------ */

/* hm_dq32_<type> for a type id of quant/types.h; false (out untouched) for a type without one. */
HM_HD bool hm_dq32(uint32_t type, const void *row, int64_t c, float out[32]) {
    switch (type) {
    case HM_TYPE_F32:
        hm_dq32_f32(row, c, out);
        return true;
    case HM_TYPE_F16:
        hm_dq32_f16(row, c, out);
        return true;
    case HM_TYPE_BF16:
        hm_dq32_bf16(row, c, out);
        return true;
    case HM_TYPE_Q4_0:
        hm_dq32_q4_0(row, c, out);
        return true;
    case HM_TYPE_Q4_1:
        hm_dq32_q4_1(row, c, out);
        return true;
    case HM_TYPE_Q5_0:
        hm_dq32_q5_0(row, c, out);
        return true;
    case HM_TYPE_Q5_1:
        hm_dq32_q5_1(row, c, out);
        return true;
    case HM_TYPE_Q8_0:
        hm_dq32_q8_0(row, c, out);
        return true;
    case HM_TYPE_Q2_K:
        hm_dq32_q2_K(row, c, out);
        return true;
    case HM_TYPE_Q3_K:
        hm_dq32_q3_K(row, c, out);
        return true;
    case HM_TYPE_Q4_K:
        hm_dq32_q4_K(row, c, out);
        return true;
    case HM_TYPE_Q5_K:
        hm_dq32_q5_K(row, c, out);
        return true;
    case HM_TYPE_Q6_K:
        hm_dq32_q6_K(row, c, out);
        return true;
    case HM_TYPE_IQ4_NL:
        hm_dq32_iq4_nl(row, c, out);
        return true;
    case HM_TYPE_IQ4_XS:
        hm_dq32_iq4_xs(row, c, out);
        return true;
    case HM_TYPE_MXFP4:
        hm_dq32_mxfp4(row, c, out);
        return true;
    case HM_TYPE_FP8_B128:
        hm_dq32_fp8_b128(row, c, out);
        return true;
    default:
        return false;
    }
}

/* ---- Q4_K rows times Q8_K activations ------------------------------------------------------ */
/* The CPU multiplies K-quant rows by activations quantized per super-block of 256 values
 * (hm_quantize_row_q8_K_ref: the value of largest magnitude, the first of equals, maps to -127;
 * codes clamped to -128..127, a NaN codes 0; d = 1 / iscale; sums of 16 codes) and takes integer
 * dot products (ref.c's dot_q4_K_ref). The GPU's Q4_K experts do the same (matvec.cu). */

/* One Q8_K code: x at the block's inverse scale, rounded to nearest even */
HM_HD int hm_hd_q8k_code(float iscale, float x) {
    const float f = hm_hd_fmul(iscale, x);
    if (!(f == f)) return 0;
    const float v = rintf(f);
    return v > 127.0f ? 127 : (v < -128.0f ? -128 : (int)v);
}

/* sum of a's bytes times b's bytes, both signed (a's are 0..15 here), plus c: __dp4a */
HM_HD int hm_hd_dp4a(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a((int)a, (int)b, c);
#else
    for (int i = 0; i < 4; i++)
        c += (int)(int8_t)(uint8_t)(a >> 8 * i) * (int)(int8_t)(uint8_t)(b >> 8 * i);
    return c;
#endif
}

/* The share of lane (j, h), j < 4, h < 2, in a Q4_K super-block's product with a Q8_K block:
 * q = code bytes 32 j + 16 h .. + 16 (low nibbles: values 64 j + 16 h .. + 16, high nibbles the
 * same + 32), xl / xh = the activation codes of those values, bl / bh = their sums (the Q8_K
 * block's bsums 4 j + h and 4 j + 2 + h), sc / m = the scales and mins of sub-blocks 2 j and
 * 2 j + 1 (hm_hd_k4_scale_min), d / dmin the block's, xd the activations'. The eight shares'
 * integers add up to dot_q4_K_ref's sumi and summ of the block; each share is scaled apart, so
 * their sum equals the block's term within float rounding. */
HM_HD float hm_hd_q4k_q8k_share(float d, float dmin, int sc0, int m0, int sc1, int m1,
                                const uint32_t q[4], const uint32_t xl[4], const uint32_t xh[4],
                                int bl, int bh, float xd) {
    int lo = 0, hi = 0;
    HM_HD_UNROLL
    for (int i = 0; i < 4; i++) {
        lo = hm_hd_dp4a(q[i] & 0x0F0F0F0Fu, xl[i], lo);
        hi = hm_hd_dp4a((q[i] >> 4) & 0x0F0F0F0Fu, xh[i], hi);
    }
    const int isum = sc0 * lo + sc1 * hi, imin = m0 * bl + m1 * bh;
    return hm_hd_fmul(xd, hm_hd_fsub(hm_hd_fmul(d, (float)isum), hm_hd_fmul(dmin, (float)imin)));
}

/* The 32 lanes' sums of a warp added as hm_warp_sum adds them: lane l with l ^ 16, then ^ 8,
 * .. ^ 1 */
HM_HD float hm_hd_lanes_sum(float lane[32]) {
    for (int o = 16; o; o >>= 1) {
        float nx[32];
        for (int l = 0; l < 32; l++) nx[l] = hm_hd_fadd(lane[l], lane[l ^ o]);
        memcpy(lane, nx, sizeof nx);
    }
    return lane[0];
}

/* Lane l's share of super-block w times its activations x (l = 8 g + 2 j + h: sub-blocks 2j and
 * 2j + 1, code bytes 16 h .. + 16 of each) */
HM_HD float hm_hd_q4k_q8k_lane(const hm_block_q4_K *w, const hm_block_q8_K *x, int l) {
    const int j = (l >> 1) & 3, h = l & 1;
    int sc[2], m[2];
    hm_hd_k4_scale_min(w->scales, 2 * j, &sc[0], &m[0]);
    hm_hd_k4_scale_min(w->scales, 2 * j + 1, &sc[1], &m[1]);
    uint32_t q[4], xl[4], xh[4];
    memcpy(q, w->qs + 32 * j + 16 * h, 16);
    memcpy(xl, x->qs + 64 * j + 16 * h, 16);
    memcpy(xh, x->qs + 64 * j + 32 + 16 * h, 16);
    return hm_hd_q4k_q8k_share(hm_hd_f16_to_f32(w->d), hm_hd_f16_to_f32(w->dmin), sc[0], m[0],
                               sc[1], m[1], q, xl, xh, x->bsums[4 * j + h], x->bsums[4 * j + 2 + h],
                               x->d);
}

/* A Q4_K row of nsb super-blocks times Q8_K activations as the GPU's experts sum it: lane
 * (j, h) of group g takes super-blocks g, g + 4, .. in order, its sum starting at 0; the 32
 * lanes' sums are then added by hm_hd_lanes_sum. */
HM_HD float hm_hd_q4k_q8k_row(const hm_block_q4_K *w, const hm_block_q8_K *x, int nsb) {
    float lane[32];
    for (int l = 0; l < 32; l++) {
        float acc = 0.0f;
        for (int s = l >> 3; s < nsb; s += 4)
            acc = hm_hd_fadd(acc, hm_hd_q4k_q8k_lane(w + s, x + s, l));
        lane[l] = acc;
    }
    return hm_hd_lanes_sum(lane);
}

/* nr (<= 4) consecutive Q4_K rows of nsb (<= 3) super-blocks times the same activations as the
 * down kernel's flat layout (matvec.cu's q4k_i8_flat) sums them into out[nr]: item i = r nsb + s
 * to group i % 4, each lane's sum per row starting at 0. Its bits are hm_hd_q4k_q8k_row's for
 * every row (test_cuda_twins checks them). */
HM_HD void hm_hd_q4k_q8k_rows_flat(const hm_block_q4_K *w, const hm_block_q8_K *x, int nsb, int nr,
                                   float *out) {
    float lane[4][32];
    for (int r = 0; r < nr; r++)
        for (int l = 0; l < 32; l++) lane[r][l] = 0.0f;
    for (int l = 0; l < 32; l++)
        for (int i = l >> 3; i < nr * nsb; i += 4)
            lane[i / nsb][l] =
                hm_hd_fadd(lane[i / nsb][l], hm_hd_q4k_q8k_lane(w + i, x + i % nsb, l));
    for (int r = 0; r < nr; r++) out[r] = hm_hd_lanes_sum(lane[r]);
}

/* ---- Q8_0 rows times Q8_0 activations ------------------------------------------------------ */
/* The CPU quantizes activations for Q8_0 rows per 32 values (hm_quantize_row_q8_0_ref: d =
 * amax / 127 rounded to a half, codes at 1 / d before that rounding, as hm_hd_q8k_code) and
 * sums d_w d_x (code products) per block (ref.c's dot_q8_0_ref). */

/* Lane (bl, o) of a warp's share of one block: w / x = 8 weight / activation codes (values
 * o .. o + 7), dw / dx the blocks' scales */
HM_HD float hm_hd_q8_0_share(float dw, float dx, uint32_t w0, uint32_t w1, uint32_t x0,
                             uint32_t x1) {
    const int s = hm_hd_dp4a(w1, x1, hm_hd_dp4a(w0, x0, 0));
    return hm_hd_fmul(hm_hd_fmul(dw, dx), (float)s);
}

/* A Q8_0 row of nb blocks times Q8_0 activations as the GPU's matvec sums it: lane l takes
 * values 8 (l % 4) .. + 8 of blocks l / 4, l / 4 + 8, .. in order, its sum starting at 0; the 32
 * lanes' sums then added by hm_hd_lanes_sum */
HM_HD float hm_hd_q8_0_q8_0_row(const hm_block_q8_0 *w, const hm_block_q8_0 *x, int64_t nb) {
    float lane[32];
    for (int l = 0; l < 32; l++) {
        const int bl = l >> 2, o = 8 * (l & 3);
        float acc = 0.0f;
        for (int64_t b = bl; b < nb; b += 8) {
            uint32_t wv[2], xv[2];
            memcpy(wv, w[b].qs + o, 8);
            memcpy(xv, x[b].qs + o, 8);
            acc =
                hm_hd_fadd(acc, hm_hd_q8_0_share(hm_hd_f16_to_f32(w[b].d), hm_hd_f16_to_f32(x[b].d),
                                                 wv[0], wv[1], xv[0], xv[1]));
        }
        lane[l] = acc;
    }
    return hm_hd_lanes_sum(lane);
}

/* Whether hm_dq32 handles the type. */
HM_HD bool hm_dq32_supported(uint32_t type) {
    switch (type) {
    case HM_TYPE_F32:
    case HM_TYPE_F16:
    case HM_TYPE_BF16:
    case HM_TYPE_Q4_0:
    case HM_TYPE_Q4_1:
    case HM_TYPE_Q5_0:
    case HM_TYPE_Q5_1:
    case HM_TYPE_Q8_0:
    case HM_TYPE_Q2_K:
    case HM_TYPE_Q3_K:
    case HM_TYPE_Q4_K:
    case HM_TYPE_Q5_K:
    case HM_TYPE_Q6_K:
    case HM_TYPE_IQ4_NL:
    case HM_TYPE_IQ4_XS:
    case HM_TYPE_MXFP4:
    case HM_TYPE_FP8_B128:
        return true;
    default:
        return false;
    }
}

#endif
