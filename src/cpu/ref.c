/* ref.c - plain-C reference kernels: the oracle for every ISA variant. Integer-domain dot products
 * follow the block formats exactly (src/quant/blocks.h); float formats accumulate in double. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "cpu/ops.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/ref.h"

static uint64_t sum_u64_ref(const uint64_t *p, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) s += p[i];
    return s;
}

/* ---------------------------------------------------------------- activations */

void hm_quantize_row_q8_K_ref(const float *x, void *vy, int64_t n) {
    hm_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / HM_QK_K; i++, x += HM_QK_K) {
        float amax = 0, max = 0;
        for (int j = 0; j < HM_QK_K; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
        if (amax == 0) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* scale so the value of largest magnitude maps to -127 exactly (as ggml does) */
        const float iscale = -127.0f / max;
        for (int j = 0; j < HM_QK_K; j++) {
            const float f = iscale * x[j];
            const long v = f == f ? lrintf(f) : 0; /* a NaN codes 0 */
            y[i].qs[j] = (int8_t)(v > 127 ? 127 : v < -128 ? -128 : v);
        }
        for (int j = 0; j < HM_QK_K / 16; j++) {
            int s = 0;
            for (int k = 0; k < 16; k++) s += y[i].qs[16 * j + k];
            y[i].bsums[j] = (int16_t)s;
        }
        y[i].d = 1.0f / iscale;
    }
}

void hm_quantize_row_q8_0_ref(const float *x, void *vy, int64_t n) {
    hm_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / HM_QK8_0; i++, x += HM_QK8_0) {
        float amax = 0;
        for (int j = 0; j < HM_QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        y[i].d = hm_f32_to_f16(d);
        for (int j = 0; j < HM_QK8_0; j++) {
            const float f = x[j] * id;
            const long v = f == f ? lrintf(f) : 0; /* a NaN codes 0 */
            y[i].qs[j] = (int8_t)(v > 127 ? 127 : v < -128 ? -128 : v);
        }
    }
}

/* The plain activation type of a weight type (the reference kernels' and the avx2 variant's) */
uint32_t hm_act_type_ref(uint32_t t) {
    switch (t) {
    case HM_TYPE_Q2_K:
    case HM_TYPE_Q3_K:
    case HM_TYPE_Q4_K:
    case HM_TYPE_Q5_K:
    case HM_TYPE_Q6_K:
    case HM_TYPE_IQ4_XS:
        return HM_TYPE_Q8_K;
    case HM_TYPE_Q4_0:
    case HM_TYPE_Q4_1:
    case HM_TYPE_Q5_0:
    case HM_TYPE_Q5_1:
    case HM_TYPE_Q8_0:
    case HM_TYPE_IQ4_NL:
    case HM_TYPE_MXFP4:
        return HM_TYPE_Q8_0;
    default:
        return HM_TYPE_F32;
    }
}

/* ---------------------------------------------------------------- dot products */

/* 8 six-bit scales and mins of a Q4_K/Q5_K super-block */
static void scales_mins_k4(const uint8_t q[12], uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        m[j] = q[j + 4] & 63;
        sc[j + 4] = (uint8_t)((q[j + 8] & 0xF) | ((q[j] >> 6) << 4));
        m[j + 4] = (uint8_t)((q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4));
    }
}

static float dot_q4_K_ref(int64_t n, const void *vw, const void *vx) {
    const hm_block_q4_K *w = vw;
    const hm_block_q8_K *x = vx;
    float sum = 0;
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        uint8_t sc[8], m[8];
        scales_mins_k4(w[i].scales, sc, m);
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < 4; j++) { /* 64 values: low nibbles then high nibbles of 32 bytes */
            int32_t lo = 0, hi = 0;
            for (int k = 0; k < 32; k++) {
                lo += (w[i].qs[32 * j + k] & 0xF) * x[i].qs[64 * j + k];
                hi += (w[i].qs[32 * j + k] >> 4) * x[i].qs[64 * j + 32 + k];
            }
            sumi += sc[2 * j] * lo + sc[2 * j + 1] * hi;
        }
        for (int j = 0; j < 8; j++) summ += m[j] * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
        sum +=
            x[i].d * (hm_f16_to_f32(w[i].d) * (float)sumi - hm_f16_to_f32(w[i].dmin) * (float)summ);
    }
    return sum;
}

static float dot_q8_0_ref(int64_t n, const void *vw, const void *vx) {
    const hm_block_q8_0 *w = vw, *x = vx;
    float sum = 0;
    for (int64_t i = 0; i < n / HM_QK8_0; i++) {
        int32_t s = 0;
        for (int k = 0; k < HM_QK8_0; k++) s += w[i].qs[k] * x[i].qs[k];
        sum += hm_f16_to_f32(w[i].d) * hm_f16_to_f32(x[i].d) * (float)s;
    }
    return sum;
}

static float dot_bf16_ref(int64_t n, const void *vw, const void *vx) {
    const uint16_t *w = vw;
    const float *x = vx;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)hm_bf16_to_f32(w[i]) * x[i];
    return (float)s;
}

/* FP8_B128 times float activations: per block d * sum(fp8(q) * x) in double */
static float dot_fp8_b128_ref(int64_t n, const void *vw, const void *vx) {
    const hm_block_fp8_b128 *w = vw;
    const float *x = vx;
    double s = 0;
    for (int64_t i = 0; i < n / HM_FP8_TILE; i++, x += HM_FP8_TILE) {
        double b = 0;
        for (int j = 0; j < HM_FP8_TILE; j++) b += (double)hm_fp8_e4m3_to_f32(w[i].qs[j]) * x[j];
        s += b * w[i].d;
    }
    return (float)s;
}

static float dot_f16_ref(int64_t n, const void *vw, const void *vx) {
    const uint16_t *w = vw;
    const float *x = vx;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)hm_f16_to_f32(w[i]) * x[i];
    return (float)s;
}

static float dot_f32_ref(int64_t n, const void *vw, const void *vx) {
    const float *w = vw, *x = vx;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)w[i] * x[i];
    return (float)s;
}

/* Value idx of a converted activation vector. */
static float act_value(uint32_t at, const void *x, int64_t idx) {
    if (at == HM_TYPE_Q8_K) {
        const hm_block_q8_K *b = (const hm_block_q8_K *)x + idx / HM_QK_K;
        return b->d * (float)b->qs[idx % HM_QK_K];
    }
    if (at == HM_TYPE_Q8_0) {
        const hm_block_q8_0 *b = (const hm_block_q8_0 *)x + idx / HM_QK8_0;
        return hm_f16_to_f32(b->d) * (float)b->qs[idx % HM_QK8_0];
    }
    return ((const float *)x)[idx];
}

/* Any dequantizable weight type: one block at a time through the reference dequantizer, dot in
 * double. The oracle for formats without a dedicated reference kernel; slow. */
static float dot_generic(uint32_t type, int64_t n, const void *vw, const void *x) {
    const hm_type_info *ti = hm_type_get(type);
    const uint32_t at = hm_act_type_ref(type);
    const uint8_t *w = vw;
    float wf[HM_QK_K];
    double s = 0;
    for (int64_t i = 0; i < n; i += ti->block, w += ti->bytes) {
        if (hm_dequantize_row(type, w, wf, ti->block) != HM_OK) return NAN;
        for (uint32_t k = 0; k < ti->block; k++) s += (double)wf[k] * act_value(at, x, i + k);
    }
    return (float)s;
}

#define GENERIC_DOT(T)                                                                             \
    static float dot_##T##_generic(int64_t n, const void *w, const void *x) {                      \
        return dot_generic(HM_TYPE_##T, n, w, x);                                                  \
    }
GENERIC_DOT(Q4_0)
GENERIC_DOT(Q4_1)
GENERIC_DOT(Q5_0)
GENERIC_DOT(Q5_1)
GENERIC_DOT(Q2_K)
GENERIC_DOT(Q3_K)
GENERIC_DOT(Q5_K)
GENERIC_DOT(Q6_K)
GENERIC_DOT(IQ4_NL)
GENERIC_DOT(IQ4_XS)
GENERIC_DOT(MXFP4)
#undef GENERIC_DOT

static void axpy_f32_ref(int64_t n, float a, const float *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void axpy_h_ref(int64_t n, float a, const uint16_t *x, bool bf16, float *y) {
    for (int64_t i = 0; i < n; i++)
        y[i] = fmaf(a, bf16 ? hm_bf16_to_f32(x[i]) : hm_f16_to_f32(x[i]), y[i]);
}

static void gemv_t_h_ref(int64_t rows, int64_t cols, const float *x, const uint16_t *w, bool bf16,
                         float *y) {
    for (int64_t c = 0; c < cols; c++) y[c] = 0.0f;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            const uint16_t h = w[r * cols + c];
            y[c] = fmaf(x[r], bf16 ? hm_bf16_to_f32(h) : hm_f16_to_f32(h), y[c]);
        }
}

static void silu_mul_f32_ref(int64_t n, float *g, const float *u) {
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static float expsum_f32_ref(int64_t n, float *x, float m) {
    float z = 0;
    for (int64_t i = 0; i < n; i++) z += (x[i] = expf(x[i] - m));
    return z;
}

static float max_f32_ref(int64_t n, const float *x) {
    float m = -FLT_MAX;
    bool nan = false;
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m, nan |= x[i] != x[i];
    return nan ? NAN : m;
}

static void scale_f32_ref(int64_t n, float a, float *x) {
    for (int64_t i = 0; i < n; i++) x[i] *= a;
}

static void f16_to_f32_ref(int64_t n, const uint16_t *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = hm_f16_to_f32(x[i]);
}

static void f32_to_f16_ref(int64_t n, const float *x, uint16_t *y) {
    for (int64_t i = 0; i < n; i++) y[i] = hm_f32_to_f16(x[i]);
}

static void rmsnorm_f32_ref(int64_t n, const float *x, const float *w, float *y, float eps) {
    /* the sum of squares in double, in 8 independent chains (one chain was bound by the add
     * latency: ~4 cycles per value) */
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += (double)x[i + j] * x[i + j];
    for (; i < n; i++) acc[0] += (double)x[i] * x[i];
    const double ss =
        ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    const float r = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    if (w)
        for (i = 0; i < n; i++) y[i] = x[i] * r * w[i];
    else
        for (i = 0; i < n; i++) y[i] = x[i] * r;
}

static void qk_block16_ref(const float *q, int nq, int hd, const float *kt, float scale, float *s,
                           size_t s_stride) {
    for (int i = 0; i < nq; i++) {
        float acc[16] = {0};
        for (int d = 0; d < hd; d++)
            for (int j = 0; j < 16; j++) acc[j] += q[(size_t)i * hd + d] * kt[d * 16 + j];
        for (int j = 0; j < 16; j++) s[(size_t)i * s_stride + j] = acc[j] * scale;
    }
}

static void pv_block16_ref(const float *p, size_t p_stride, int nq, const float *v, size_t v_stride,
                           int hd, float *o, size_t o_stride) {
    for (int i = 0; i < nq; i++)
        for (int j = 0; j < 16; j++) {
            const float w = p[(size_t)i * p_stride + j];
            for (int d = 0; d < hd; d++)
                o[(size_t)i * o_stride + d] += w * v[(size_t)j * v_stride + d];
        }
}

/* each score by the plain float dot (the one the latent walk took per row before qk_rows16) */
static void qk_rows16_ref(const float *q, size_t q_stride, int nq, const float *k, size_t k_stride,
                          int nk, int hd, float scale, float *s, size_t s_stride) {
    for (int i = 0; i < nq; i++)
        for (int j = 0; j < nk; j++)
            s[(size_t)i * s_stride + j] =
                dot_f32_ref(hd, k + (size_t)j * k_stride, q + (size_t)i * q_stride) * scale;
}

const hm_cpu_ops hm_ops_ref = {
    .axpy_f32 = axpy_f32_ref,
    .axpy_h = axpy_h_ref,
    .gemv_t_h = gemv_t_h_ref,
    .silu_mul_f32 = silu_mul_f32_ref,
    .expsum_f32 = expsum_f32_ref,
    .max_f32 = max_f32_ref,
    .scale_f32 = scale_f32_ref,
    .f16_to_f32 = f16_to_f32_ref,
    .f32_to_f16 = f32_to_f16_ref,
    .rmsnorm_f32 = rmsnorm_f32_ref,
    .quant_q8_0 = hm_quantize_row_q8_0_ref,
    .quant_q8_K = hm_quantize_row_q8_K_ref,
    .qk_block16 = qk_block16_ref,
    .pv_block16 = pv_block16_ref,
    .qk_rows16 = qk_rows16_ref,
    .isa = HM_ISA_REF,
    .name = "ref",
    .sum_u64 = sum_u64_ref,
    .vec_dot =
        {
            [HM_TYPE_F32] = dot_f32_ref,
            [HM_TYPE_F16] = dot_f16_ref,
            [HM_TYPE_BF16] = dot_bf16_ref,
            [HM_TYPE_Q8_0] = dot_q8_0_ref,
            [HM_TYPE_Q4_K] = dot_q4_K_ref,
            [HM_TYPE_Q4_0] = dot_Q4_0_generic,
            [HM_TYPE_Q4_1] = dot_Q4_1_generic,
            [HM_TYPE_Q5_0] = dot_Q5_0_generic,
            [HM_TYPE_Q5_1] = dot_Q5_1_generic,
            [HM_TYPE_Q2_K] = dot_Q2_K_generic,
            [HM_TYPE_Q3_K] = dot_Q3_K_generic,
            [HM_TYPE_Q5_K] = dot_Q5_K_generic,
            [HM_TYPE_Q6_K] = dot_Q6_K_generic,
            [HM_TYPE_IQ4_NL] = dot_IQ4_NL_generic,
            [HM_TYPE_IQ4_XS] = dot_IQ4_XS_generic,
            [HM_TYPE_MXFP4] = dot_MXFP4_generic,
            [HM_TYPE_FP8_B128] = dot_fp8_b128_ref,
        },
};
