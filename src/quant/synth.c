/* synth.c - random valid blocks for every quantization layout we know. Magnitudes: the scale of
 * each block is chosen from the variance of its integer code so the dequantized values have about
 * the requested standard deviation (derivations next to each case). */
#include "quant/synth.h"

#include <math.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/ref.h"
#include "quant/types.h"

bool hm_synth_supported(uint32_t t) {
    switch (t) {
    case HM_TYPE_F32:
    case HM_TYPE_F16:
    case HM_TYPE_BF16:
    case HM_TYPE_Q8_0:
    case HM_TYPE_Q4_0:
    case HM_TYPE_Q4_1:
    case HM_TYPE_Q5_0:
    case HM_TYPE_Q5_1:
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

static void rand_bytes(uint8_t *p, size_t n, uint64_t *s) {
    while (n >= 8) {
        uint64_t r = hm_rng_next(s);
        memcpy(p, &r, 8);
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t r = hm_rng_next(s);
        memcpy(p, &r, n);
    }
}

static float uniform(uint64_t *s) { /* [-1, 1) */
    return (float)(hm_rng_next(s) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

static void put_f16(uint8_t *p, float v) {
    uint16_t h = hm_f32_to_f16(v);
    memcpy(p, &h, 2);
}

hm_status hm_synth_fill(uint32_t type, void *dst, uint64_t n, float mean, float sd, uint64_t seed) {
    const hm_type_info *ti = hm_type_get(type);
    if (!ti || !hm_synth_supported(type))
        return hm_errorf(HM_ERR_UNSUPPORTED, "synth: cannot generate tensors of type %s",
                         hm_type_name(type));
    if (n % ti->block)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "synth: %llu elements is not a whole number of %s blocks",
                         (unsigned long long)n, ti->name);
    uint64_t s = seed;
    uint8_t *p = dst;
    uint64_t nb = n / ti->block;
    const float a = sd * 1.7320508f; /* uniform(-a, a) has std a/sqrt(3) */
    switch (type) {
    case HM_TYPE_F32:
        for (uint64_t i = 0; i < n; i++) ((float *)dst)[i] = mean + a * uniform(&s);
        return HM_OK;
    case HM_TYPE_F16:
        for (uint64_t i = 0; i < n; i++) put_f16(p + 2 * i, mean + a * uniform(&s));
        return HM_OK;
    case HM_TYPE_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t b = hm_f32_to_bf16(mean + a * uniform(&s));
            memcpy(p + 2 * i, &b, 2);
        }
        return HM_OK;
    case HM_TYPE_FP8_B128: /* uniform values, quantized per block (scale max |x| / 448) */
        for (uint64_t b = 0; b < nb; b++, p += ti->bytes) {
            float v[HM_FP8_TILE];
            for (int j = 0; j < HM_FP8_TILE; j++) v[j] = mean + a * uniform(&s);
            hm_quantize_row(HM_TYPE_FP8_B128, v, p, HM_FP8_TILE);
        }
        return HM_OK;
    default:
        break;
    }
    for (uint64_t b = 0; b < nb; b++, p += ti->bytes) {
        rand_bytes(p, ti->bytes, &s); /* every bit pattern of the codes is valid */
        float jitter = 1.0f + 0.25f * uniform(&s);
        switch (type) {
        case HM_TYPE_Q8_0: /* d * q, q uniform in [-128, 127]: std 74 */
            put_f16(p, sd / 74.0f * jitter);
            break;
        case HM_TYPE_Q4_0: /* d * (q - 8), q in [0, 15]: std 4.6 */
            put_f16(p, sd / 4.6f * jitter);
            break;
        case HM_TYPE_Q5_0: /* d * (q - 16), q in [0, 31]: std 9.2 */
            put_f16(p, sd / 9.2f * jitter);
            break;
        case HM_TYPE_Q4_1: { /* d * q + m: centre with m = -7.5 d */
            float d = sd / 4.6f * jitter;
            put_f16(p, d);
            put_f16(p + 2, -7.5f * d);
            break;
        }
        case HM_TYPE_Q5_1: {
            float d = sd / 9.2f * jitter;
            put_f16(p, d);
            put_f16(p + 2, -15.5f * d);
            break;
        }
        case HM_TYPE_IQ4_NL: /* d * kvalue[q], kvalues in [-127, 113]: std ~ 70 */
            put_f16(p, sd / 70.0f * jitter);
            break;
        case HM_TYPE_MXFP4: { /* e8m0 scale 2^(e-128) * fp4 value (std ~ 5.4) */
            int e = 128 + (int)lrintf(log2f(sd / 5.4f * jitter));
            p[0] = (uint8_t)(e < 1 ? 1 : e > 254 ? 254 : e);
            break;
        }
        case HM_TYPE_Q2_K: { /* layout: scales[16], qs[64], d, dmin; d*sc*q - dmin*m, q in 0..3,
                                sc, m in 0..15: std(sc*q) ~ 10.7; centre: dmin = 1.5 d */
            float d = sd / 12.0f * jitter;
            put_f16(p + 80, d);
            put_f16(p + 82, 1.5f * d);
            break;
        }
        case HM_TYPE_Q3_K: /* hmask[32], qs[64], scales[12], d; d*(sc-32)*(q-4): std ~ 18.5*2.3 */
            put_f16(p + 108, sd / 42.0f * jitter);
            break;
        case HM_TYPE_Q4_K: { /* d, dmin, scales[12], qs[128]; d*sc*q - dmin*m, sc, m in 0..63,
                                q in 0..15: std ~ 257 d with dmin = 7.5 d */
            float d = sd / 257.0f * jitter;
            put_f16(p, d);
            put_f16(p + 2, 7.5f * d);
            break;
        }
        case HM_TYPE_Q5_K: { /* same with q in 0..31: std ~ 520 d, dmin = 15.5 d */
            float d = sd / 520.0f * jitter;
            put_f16(p, d);
            put_f16(p + 2, 15.5f * d);
            break;
        }
        case HM_TYPE_Q6_K: /* ql[128], qh[64], int8 scales[16], d; d*sc*(q-32): std ~ 74*18.5 */
            put_f16(p + 208, sd / 1369.0f * jitter);
            break;
        case HM_TYPE_IQ4_XS: /* d, scales_h, scales_l[4], qs[128]; d*(ls-32)*kvalue: std ~ 1300 */
            put_f16(p, sd / 1300.0f * jitter);
            break;
        default:
            return hm_errorf(HM_ERR_INTERNAL, "synth: type %s not handled", ti->name);
        }
    }
    return HM_OK;
}
