/* fp16.h - IEEE half and bfloat16 conversions in plain C (round to nearest even), shared by the
 * reference kernels, the writer paths and the tests. */
#ifndef HM_QUANT_FP16_H
#define HM_QUANT_FP16_H

#include <stdint.h>
#include <string.h>

static inline uint32_t hm_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float hm_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float hm_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f) return hm_bits_f32(sign | 0x7f800000u | (mant << 13)); /* inf / nan */
    if (exp == 0) {
        if (mant == 0) return hm_bits_f32(sign);
        float v = (float)mant * (1.0f / 16777216.0f); /* subnormal: mant * 2^-24 */
        return sign ? -v : v;
    }
    return hm_bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

/* hm_f16_to_f32 without branches, the same bits for every half (test_kernels): loops over it
 * vectorise (mla.c's rows of F16 weights) */
static inline float hm_f16_to_f32_branchless(uint16_t h) {
    const uint32_t e = h & 0x7c00u, em = h & 0x7fffu;
    const uint32_t normal = ((em << 13) + (112u << 23)) | ((0u - (e == 0x7c00u)) & 0x7f800000u);
    const uint32_t sub = hm_f32_bits((float)(h & 0x3ffu) * 0x1p-24f), keep = 0u - (e != 0);
    return hm_bits_f32((normal & keep) | (sub & ~keep) | (uint32_t)(h & 0x8000u) << 16);
}

static inline uint16_t hm_f32_to_f16(float f) {
    uint32_t x = hm_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) { /* result is subnormal or zero: round(|f| * 2^24) */
        float v = hm_bits_f32(ax) * 16777216.0f;
        uint32_t r = (uint32_t)v;
        float frac = v - (float)r;
        if (frac > 0.5f || (frac == 0.5f && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t e = (ax >> 23) - 112, m = ax & 0x7fffff;
    uint32_t h = (e << 10) | (m >> 13);
    uint32_t rest = m & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static inline float hm_bf16_to_f32(uint16_t b) {
    return hm_bits_f32((uint32_t)b << 16);
}

static inline uint16_t hm_f32_to_bf16(float f) {
    uint32_t x = hm_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

#endif
