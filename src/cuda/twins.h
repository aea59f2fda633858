/* twins.h - the arithmetic the CUDA kernels share with their CPU twins, as __host__ __device__
 * functions: the kernels call them on the GPU and the tests call them on the CPU, so what can be
 * checked without a GPU (a rotation, the online softmax's rescaling, top-k selection) is checked
 * in every build. A block's dequantization is in dq.h. Plain C11 when not compiled by nvcc. */
#ifndef HM_CUDA_TWINS_H
#define HM_CUDA_TWINS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "cuda/hd.h"

/* silu(g) * u, as the CPU's reference (hm_silu_mul's scalar loop) */
HM_HD float hm_hd_silu_mul(float g, float u) {
    return g / (1.0f + expf(-g)) * u;
}

/* The gated linear unit of an activation (format/hparams.h's hm_act and hm_moe_act alike: 0 SiLU,
 * 1 GELU, 2 gpt-oss's clamped SwiGLU with alpha and limit): the CPU expert engine's (moe/expert.c)
 * and the GPU's. */
HM_HD float hm_hd_glu(int act, float g, float u, float alpha, float limit) {
    if (act == 1) return 0.5f * g * (1.0f + erff(g * 0.70710678118654752f)) * u;
    if (act == 2) {
        g = g < limit ? g : limit;
        u = u < -limit ? -limit : (u > limit ? limit : u);
        return (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
    }
    return hm_hd_silu_mul(g, u);
}

/* The shared expert's gate (qwen2moe): sigmoid of the gate row's dot product with the token, as
 * exec_cpu.c's gated add computes it. */
HM_HD float hm_hd_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

/* One NeoX rotation pair (a = x[i], b = x[i + rope_dim / 2]) by the angle with cosine c and sine
 * s, as hm_rope_neox. */
HM_HD void hm_hd_rope_pair(float *a, float *b, float c, float s) {
    const float x = *a, y = *b;
    *a = x * c - y * s;
    *b = y * c + x * s;
}

/* RMSNorm's factor from the sum of squares (in double) of n values, as hm_rmsnorm */
HM_HD float hm_hd_rms_scale(double ss, int64_t n, float eps) {
    return (float)(1.0 / sqrt(ss / (double)n + (double)eps));
}

/* The running state of an online softmax: the largest score so far and the sum of exp(score - m)
 * over the scores seen. */
typedef struct hm_osm {
    float m, l;
} hm_osm;

/* A chunk whose largest score is cm arrives: the running maximum moves to max(m, cm) and the sum
 * so far is rescaled to it. Returns the factor by which everything accumulated so far (the
 * weighted values) must be multiplied; the chunk's terms are then exp(score - s->m). A NaN score
 * never becomes the maximum but its exp is NaN, so it reaches the sum and the output. */
HM_HD float hm_osm_rescale(hm_osm *s, float cm) {
    const float nm = cm > s->m ? cm : s->m;
    const float f = s->m == -INFINITY ? 0.0f : expf(s->m - nm);
    s->l *= f;
    s->m = nm;
    return f;
}

/* An attention sink (gpt-oss): a logit that joins the softmax's denominator and adds no value.
 * Folded into the finished state s (largest score m, sum l); returns the factor by which the
 * weighted values must be multiplied before they are divided by s->l. */
HM_HD float hm_osm_sink(hm_osm *s, float sink) {
    const float f = hm_osm_rescale(s, sink);
    s->l += expf(sink - s->m);
    return f;
}

/* The router's order: (value a, index ai) comes before (b, bi) when it is larger, or equal with
 * a lower index. */
HM_HD bool hm_hd_rank_before(float a, int ai, float b, int bi) {
    return a > b || (a == b && ai < bi);
}

/* Of v[begin], v[begin + stride], ... below end, the first in the router's order that comes
 * after (pv, pi): into *bv, *bi (*bi -1: none). Called k times from (inf, -1), each time after
 * the last pick, it gives the top-k in descending order, ties to the lower index, as the CPU
 * router's top-k; the GPU's router runs it per lane (stride 32) and merges the lanes' picks with
 * hm_hd_rank_before. */
HM_HD void hm_hd_pick_after(const float *v, int begin, int end, int stride, float pv, int pi,
                            float *bv, int *bi) {
    *bv = -INFINITY, *bi = -1;
    for (int j = begin; j < end; j += stride)
        if (hm_hd_rank_before(pv, pi, v[j], j) && (*bi < 0 || hm_hd_rank_before(v[j], j, *bv, *bi)))
            *bv = v[j], *bi = j;
}

/* v[j]'s place in the router's order among v[0..n): how many entries come before it. A NaN
 * comes before none, and hm_hd_pick_after never picks one: callers skip NaNs. The entries that
 * are not NaN take the places 0, 1, ... in the order k calls of hm_hd_pick_after give; the GPU's
 * router counts each entry's place in its own thread. */
HM_HD int hm_hd_router_rank(const float *v, int n, int j) {
    const float a = v[j];
    int r = 0;
#ifdef __CUDA_ARCH__
#pragma unroll 8
#endif
    for (int q = 0; q < n; q++) r += hm_hd_rank_before(v[q], q, a, j);
    return r;
}

/* A picked expert's softmax weight from the logits' maximum and their double sum of exp(v - mx),
 * as hm_router_softmax_topk computes it. */
HM_HD float hm_hd_router_weight(float v, float mx, double sum) {
    return (float)(exp((double)v - mx) / sum);
}

/* The sigmoid router of DeepSeek-V3 and GLM-4.5 for one token, as hm_router_sigmoid_group_topk
 * (router.c): s = sigmoid(l); choice = s + bias; groups of n / n_group experts scored by their two
 * best choices; the topk_group best groups kept; the k best choices among their experts (every
 * selection descending, ties to the lower index); weights s[id], renormalised when renorm (sum in
 * double, + 1e-20), times scale. n <= HM_HD_ROUTER_MAX, n_group <= 64. The CUDA kernel runs it
 * per token. (HM_HD_ROUTER_MAX, the most experts a router takes, is hd.h's.) */

/* index of the largest v[i] over i in [0, n) with !taken[i] (ties: the lower i) */
HM_HD int hm_hd_argmax_free(const float *v, const bool *taken, int n) {
    int b = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && (b < 0 || v[i] > v[b])) b = i;
    return b;
}

/* The group-limited routers' common end: the topk_group best of the n_group group scores gs
 * kept (keep[]), the choices c of the other groups' experts set to drop, the k best choices
 * picked (descending, ties to the lower index; taken[] all false on entry), their weights s[id],
 * renormalised when renorm (sum in double, + 1e-20), times scale. */
HM_HD void hm_hd_router_pick(float *c, const float *s, bool *taken, const float *gs, bool *keep,
                             int n, int n_group, int topk_group, float drop, int k, bool renorm,
                             float scale, int32_t *ids, float *w) {
    bool gtaken[64];
    for (int g = 0; g < n_group; g++) gtaken[g] = false;
    for (int j = 0; j < topk_group; j++) {
        const int g = hm_hd_argmax_free(gs, gtaken, n_group);
        gtaken[g] = keep[g] = true;
    }
    const int per = n / n_group;
    for (int i = 0; i < n; i++)
        if (!keep[i / per]) c[i] = drop;
    double sum = 0;
    for (int j = 0; j < k; j++) {
        const int b = hm_hd_argmax_free(c, taken, n);
        taken[b] = true;
        ids[j] = b;
        sum += s[b];
    }
    for (int j = 0; j < k; j++)
        w[j] = (float)((renorm ? s[ids[j]] / (sum + 1e-20) : (double)s[ids[j]]) * scale);
}

HM_HD void hm_hd_router_sigmoid(const float *l, const float *bias, int n, int n_group,
                                int topk_group, int k, bool renorm, float scale, int32_t *ids,
                                float *w) {
    float s[HM_HD_ROUTER_MAX], c[HM_HD_ROUTER_MAX], gs[64];
    bool taken[HM_HD_ROUTER_MAX], keep[64];
    const int per = n / n_group;
    for (int i = 0; i < n; i++) {
        s[i] = 1.0f / (1.0f + expf(-l[i]));
        c[i] = s[i] + (bias ? bias[i] : 0.0f);
        taken[i] = false;
    }
    for (int g = 0; g < n_group; g++) {
        const int b1 = hm_hd_argmax_free(c + g * per, taken + g * per, per);
        float v = c[g * per + b1];
        if (per >= 2) {
            taken[g * per + b1] = true;
            v += c[g * per + hm_hd_argmax_free(c + g * per, taken + g * per, per)];
            taken[g * per + b1] = false;
        }
        gs[g] = v;
        keep[g] = false;
    }
    hm_hd_router_pick(c, s, taken, gs, keep, n, n_group, topk_group, -INFINITY, k, renorm, scale,
                      ids, w);
}

/* DeepSeek-V2's group-limited softmax router for one token (exec_cpu.c's router runs it on the
 * CPU, a CUDA kernel per token on the GPU): softmax scores (double sums); groups of n / n_group
 * scored by their best expert; the topk_group best groups kept (the others' scores set to 0, as
 * transformers masks them); the k best scores (descending, ties to the lower index); weights the
 * scores, renormalised when renorm (+ 1e-20), times scale. n <= HM_HD_ROUTER_MAX, n_group <= 64. */
HM_HD void hm_hd_router_softmax_group(const float *l, int n, int n_group, int topk_group, int k,
                                      bool renorm, float scale, int32_t *ids, float *w) {
    float s[HM_HD_ROUTER_MAX], gs[64];
    bool taken[HM_HD_ROUTER_MAX], keep[64];
    float mx = l[0];
    for (int i = 1; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)l[i] - mx);
    for (int i = 0; i < n; i++) s[i] = (float)(exp((double)l[i] - mx) / sum), taken[i] = false;
    const int per = n / n_group;
    for (int g = 0; g < n_group; g++) {
        gs[g] = s[g * per];
        for (int i = 1; i < per; i++) gs[g] = s[g * per + i] > gs[g] ? s[g * per + i] : gs[g];
        keep[g] = false;
    }
    hm_hd_router_pick(s, s, taken, gs, keep, n, n_group, topk_group, 0.0f, k, renorm, scale, ids,
                      w);
}

#endif
