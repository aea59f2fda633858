/* kernels_ops.c - ops.cu's kernels for the host GPU (host/rt.h): the per-token work of a layer
 * (RMSNorm with the residual add, the GLU, biases, the gated shared expert, the routers, q/k
 * norms + rotation + the KV store, attention over the cache, the experts' weighted sum, MLA's
 * three steps, the sampler's candidates) in plain C on the stream's thread.
 *
 * Each launcher validates its arguments as ops.cu's does and enqueues its arguments by value
 * (structs copied, as CUDA copies a kernel's parameters); the work is the kernel's arithmetic
 * through the same twins (twins.h, dq.h): sums in double where the kernel sums in double, the
 * cache rounded to IEEE half when it holds halves, fmaf where the kernel accumulates with it.
 * Reduction orders are sequential, so results can differ from the GPU's in the last bits. The
 * flash-decoding splits of hm_cu_attention are not needed here: every (token, head) runs over
 * all its positions in one pass, in chunks of the kernel's size. */
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "cuda/kernels.h"
#include "cuda/twins.h"
#include "quant/fp16.h"
#include "quant/types.h"

/* ---- the cache (kernels.h hm_cu_kv) ---------------------------------------------------------- */

static float kv_get(const hm_cu_kv *kv, const void *c, size_t off) {
    if (kv->f16) return hm_f16_to_f32(((const uint16_t *)c)[off]);
    return ((const float *)c)[off];
}

static void kv_put(const hm_cu_kv *kv, void *c, size_t off, float v) {
    if (kv->f16)
        ((uint16_t *)c)[off] = hm_f32_to_f16(v);
    else
        ((float *)c)[off] = v;
}

/* offset (elements) of position 0 of (layer il, sequence s, kv head h) */
static size_t kv_head(const hm_cu_kv *kv, int il, int s, int h) {
    return (((size_t)il * (size_t)kv->n_seq + (size_t)s) * (size_t)kv->n_kv_heads + (size_t)h) *
           (size_t)kv->kv_ctx * (size_t)kv->head_dim;
}

/* ---- RMSNorm with the residual add ----------------------------------------------------------- */

typedef struct rmsnorm_args {
    float *x;
    const float *add, *w;
    float *y;
    const int32_t *rows;
    int n;
    int64_t h;
    float eps;
} rmsnorm_args;

static void rmsnorm_run(const void *p) {
    const rmsnorm_args *a = p;
    for (int i = 0; i < a->n; i++) {
        const int64_t r = a->rows ? (int64_t)a->rows[i] : i;
        float *xr = a->x + r * a->h;
        if (a->add) {
            const float *ar = a->add + r * a->h;
            for (int64_t d = 0; d < a->h; d++) xr[d] += ar[d];
        }
        if (!a->w) continue;
        double ss = 0;
        for (int64_t d = 0; d < a->h; d++) ss += (double)xr[d] * xr[d];
        const float sc = hm_hd_rms_scale(ss, a->h, a->eps);
        float *yr = a->y + (int64_t)i * a->h;
        for (int64_t d = 0; d < a->h; d++) yr[d] = xr[d] * sc * a->w[d];
    }
}

typedef struct rmsnorm_moe_args {
    rmsnorm_args n;
    const float *ey, *ew;
    int64_t eys;
    int k;
} rmsnorm_moe_args;

static void rmsnorm_moe_run(const void *p) {
    const rmsnorm_moe_args *a = p;
    for (int i = 0; i < a->n.n; i++) {
        float *xr = a->n.x + (int64_t)i * a->n.h;
        for (int64_t d = 0; d < a->n.h; d++) {
            float s = 0.0f;
            for (int j = 0; j < a->k; j++)
                s = fmaf(a->ew[i * a->k + j], a->ey[((int64_t)i * a->k + j) * a->eys + d], s);
            xr[d] += s;
        }
    }
    rmsnorm_args n = a->n;
    n.add = NULL;
    rmsnorm_run(&n);
}

cudaError_t hm_cu_rmsnorm_moe(float *x, const float *ey, int64_t eys, const float *ew, int k,
                              const float *w, float *y, int n, int64_t h, float eps,
                              cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (k < 1 || k > 64 || !ey || !ew) return cudaErrorInvalidValue;
    const rmsnorm_moe_args a = {{x, NULL, w, y, NULL, n, h, eps}, ey, ew, eys, k};
    return hm_host_launch(stream, rmsnorm_moe_run, &a, sizeof a);
}

cudaError_t hm_cu_rmsnorm(float *x, const float *add, const float *w, float *y, const int32_t *rows,
                          int n, int64_t h, float eps, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    const rmsnorm_args a = {x, add, w, y, rows, n, h, eps};
    return hm_host_launch(stream, rmsnorm_run, &a, sizeof a);
}

/* ---- element-wise: GLU, BF16 rounding, biases ------------------------------------------------ */

typedef struct glu_args {
    float *g;
    int64_t gs;
    const float *u;
    int64_t us;
    int n;
    int64_t f;
    int act;
    float alpha, limit;
} glu_args;

static void glu_run(const void *p) {
    const glu_args *a = p;
    for (int t = 0; t < a->n; t++) {
        float *g = a->g + (int64_t)t * a->gs;
        const float *u = a->u + (int64_t)t * a->us;
        for (int64_t j = 0; j < a->f; j++) g[j] = hm_hd_glu(a->act, g[j], u[j], a->alpha, a->limit);
    }
}

cudaError_t hm_cu_glu(float *g, int64_t gs, const float *u, int64_t us, int n, int64_t f, int act,
                      float alpha, float limit, cudaStream_t stream) {
    if ((int64_t)n * f <= 0) return cudaSuccess;
    if (act < 0 || act > 2) return cudaErrorInvalidValue;
    const glu_args a = {g, gs, u, us, n, f, act, alpha, limit};
    return hm_host_launch(stream, glu_run, &a, sizeof a);
}

typedef struct f16_args {
    const float *x;
    int64_t xs;
    int n;
    int64_t cols;
    uint16_t *y;
    bool half; /* IEEE half, else BF16 */
} f16_args;

static void f16_run(const void *p) {
    const f16_args *a = p;
    for (int t = 0; t < a->n; t++)
        for (int64_t j = 0; j < a->cols; j++) {
            const float v = a->x[(int64_t)t * a->xs + j];
            a->y[(int64_t)t * a->cols + j] = a->half ? hm_f32_to_f16(v) : hm_f32_to_bf16(v);
        }
}

static cudaError_t f32_to_16(const float *x, int64_t xs, int n, int64_t cols, uint16_t *y,
                             bool half, cudaStream_t stream) {
    if ((int64_t)n * cols <= 0) return cudaSuccess;
    const f16_args a = {x, xs, n, cols, y, half};
    return hm_host_launch(stream, f16_run, &a, sizeof a);
}

cudaError_t hm_cu_f32_to_bf16(const float *x, int64_t xs, int n, int64_t cols, uint16_t *y,
                              cudaStream_t stream) {
    return f32_to_16(x, xs, n, cols, y, false, stream);
}

cudaError_t hm_cu_f32_to_f16(const float *x, int64_t xs, int n, int64_t cols, uint16_t *y,
                             cudaStream_t stream) {
    return f32_to_16(x, xs, n, cols, y, true, stream);
}

typedef struct expert_bias_args {
    float *y;
    int64_t ys;
    const int32_t *pos_of, *ids;
    int n_pairs;
    const float *bias;
    int64_t cols;
} expert_bias_args;

static void expert_bias_run(const void *p) {
    const expert_bias_args *a = p;
    for (int i = 0; i < a->n_pairs; i++) {
        const int e = a->ids[i];
        if (e < 0) continue; /* on the CPU */
        float *yr = a->y + (int64_t)(a->pos_of ? a->pos_of[i] : i) * a->ys;
        const float *b = a->bias + (int64_t)e * a->cols;
        for (int64_t j = 0; j < a->cols; j++) yr[j] += b[j];
    }
}

cudaError_t hm_cu_expert_bias(float *y, int64_t ys, const int32_t *pos_of, const int32_t *ids,
                              int n_pairs, const float *bias, int64_t cols, cudaStream_t stream) {
    if (n_pairs <= 0 || !bias) return cudaSuccess;
    const expert_bias_args a = {y, ys, pos_of, ids, n_pairs, bias, cols};
    return hm_host_launch(stream, expert_bias_run, &a, sizeof a);
}

typedef struct add_bias_args {
    float *y;
    int64_t ys;
    const float *b;
    int n;
    int64_t cols;
} add_bias_args;

static void add_bias_run(const void *p) {
    const add_bias_args *a = p;
    for (int t = 0; t < a->n; t++)
        for (int64_t j = 0; j < a->cols; j++) a->y[(int64_t)t * a->ys + j] += a->b[j];
}

cudaError_t hm_cu_add_bias(float *y, int64_t ys, const float *b, int n, int64_t cols,
                           cudaStream_t stream) {
    if ((int64_t)n * cols <= 0 || !b) return cudaSuccess;
    const add_bias_args a = {y, ys, b, n, cols};
    return hm_host_launch(stream, add_bias_run, &a, sizeof a);
}

/* ---- the shared expert's gated add (qwen2moe) ------------------------------------------------ */

typedef struct gated_add_args {
    float *dst;
    int64_t ds;
    const float *src;
    int64_t ss;
    const float *xn;
    int64_t xs;
    const float *w;
    int n;
    int64_t h;
} gated_add_args;

static void gated_add_run(const void *p) {
    const gated_add_args *a = p;
    for (int t = 0; t < a->n; t++) {
        float g = 1.0f;
        if (a->w) {
            const float *x = a->xn + (int64_t)t * a->xs;
            /* in double: the kernel's tree of 256 partial sums is near exact, a running float
             * sum is not */
            double dot = 0;
            for (int64_t d = 0; d < a->h; d++) dot += (double)x[d] * a->w[d];
            g = hm_hd_sigmoid((float)dot);
        }
        float *dst = a->dst + (int64_t)t * a->ds;
        const float *src = a->src + (int64_t)t * a->ss;
        for (int64_t d = 0; d < a->h; d++) dst[d] += g * src[d];
    }
}

cudaError_t hm_cu_gated_add(float *dst, int64_t ds, const float *src, int64_t ss, const float *xn,
                            int64_t xs, const float *w, int n, int64_t h, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    const gated_add_args a = {dst, ds, src, ss, xn, xs, w, n, h};
    return hm_host_launch(stream, gated_add_run, &a, sizeof a);
}

/* ---- routers --------------------------------------------------------------------------------- */

/* the group-limited routers' arguments: the sigmoid one (bias may be set) and the softmax one */
typedef struct group_router_args {
    const float *rl;
    int64_t rs;
    int n, e;
    const float *bias;
    int n_group, topk_group, k;
    bool renorm;
    float scale;
    int32_t *ids;
    float *w;
} group_router_args;

static void router_sigmoid_run(const void *p) {
    const group_router_args *a = p;
    for (int t = 0; t < a->n; t++)
        hm_hd_router_sigmoid(a->rl + (int64_t)t * a->rs, a->bias, a->e, a->n_group, a->topk_group,
                             a->k, a->renorm, a->scale, a->ids + (int64_t)t * a->k,
                             a->w + (int64_t)t * a->k);
}

cudaError_t hm_cu_router_sigmoid(const float *rl, int64_t rs, int n, int e, const float *bias,
                                 int n_group, int topk_group, int k, bool renorm, float scale,
                                 int32_t *ids, float *w, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (e > HM_HD_ROUTER_MAX || n_group < 1 || n_group > 64 || e % n_group)
        return cudaErrorInvalidValue;
    const group_router_args a = {rl, rs, n, e, bias, n_group, topk_group, k, renorm, scale, ids, w};
    return hm_host_launch(stream, router_sigmoid_run, &a, sizeof a);
}

static void router_softmax_group_run(const void *p) {
    const group_router_args *a = p;
    for (int t = 0; t < a->n; t++)
        hm_hd_router_softmax_group(a->rl + (int64_t)t * a->rs, a->e, a->n_group, a->topk_group,
                                   a->k, a->renorm, a->scale, a->ids + (int64_t)t * a->k,
                                   a->w + (int64_t)t * a->k);
}

cudaError_t hm_cu_router_softmax_group(const float *rl, int64_t rs, int n, int e, int n_group,
                                       int topk_group, int k, bool renorm, float scale,
                                       int32_t *ids, float *w, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (e > HM_HD_ROUTER_MAX || n_group < 1 || n_group > 64 || e % n_group || topk_group < 1 ||
        topk_group > n_group || k > e / n_group * topk_group)
        return cudaErrorInvalidValue;
    const group_router_args a = {rl, rs, n, e, NULL, n_group, topk_group, k, renorm, scale, ids, w};
    return hm_host_launch(stream, router_softmax_group_run, &a, sizeof a);
}

typedef struct router_topk_args {
    const float *rl;
    int64_t rs;
    int n, e, k;
    bool renorm;
    int32_t *ids;
    float *w;
} router_topk_args;

/* The kernel's steps for each token: the maximum, the double sum of exp, each entry's place in
 * the router's order (hm_hd_router_rank; a NaN never picked), a place below k its pick, the
 * weights by hm_hd_router_weight, renormalised by their double sum in pick order. */
static void router_topk_run(const void *p) {
    const router_topk_args *a = p;
    for (int i = 0; i < a->n; i++) {
        const float *v = a->rl + (int64_t)i * a->rs;
        int32_t *ids = a->ids + (int64_t)i * a->k;
        float *w = a->w + (int64_t)i * a->k, pv[32];
        float mx = -INFINITY;
        for (int j = 0; j < a->e; j++) mx = v[j] > mx ? v[j] : mx;
        double sum = 0;
        for (int r = 0; r < a->k; r++) ids[r] = -1, pv[r] = -INFINITY;
        for (int j = 0; j < a->e; j++) {
            sum += exp((double)v[j] - mx);
            if (v[j] != v[j]) continue;
            const int r = hm_hd_router_rank(v, a->e, j);
            if (r < a->k) ids[r] = j, pv[r] = v[j];
        }
        double sel = 0;
        for (int r = 0; r < a->k; r++) {
            w[r] = hm_hd_router_weight(pv[r], mx, sum);
            sel += w[r];
        }
        if (a->renorm)
            for (int r = 0; r < a->k; r++) w[r] = (float)(w[r] / sel);
    }
}

cudaError_t hm_cu_router_topk(const float *rl, int64_t rs, int n, int e, int k, bool renorm,
                              int32_t *ids, float *w, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (k < 1 || k > e || k > 32 || e > HM_HD_ROUTER_MAX) return cudaErrorInvalidValue;
    const router_topk_args a = {rl, rs, n, e, k, renorm, ids, w};
    return hm_host_launch(stream, router_topk_run, &a, sizeof a);
}

/* the host computes the matvec and the picks as the two kernels the fused one stands for */
cudaError_t hm_cu_router_fused(const hm_cu_w *wr, const float *x, int64_t xs, int n, int k,
                               bool renorm, float *rl, int64_t rs, int32_t *ids, float *w,
                               unsigned *cnt, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (!cnt || !hm_cu_router_fused_ok(wr, x, xs, n, k)) return cudaErrorInvalidValue;
    const cudaError_t st = hm_cu_matvec(wr, x, xs, n, rl, rs, stream);
    return st != cudaSuccess
               ? st
               : hm_cu_router_topk(rl, rs, n, (int)wr->rows, k, renorm, ids, w, stream);
}

/* ---- the experts' weighted sum --------------------------------------------------------------- */

typedef struct combine_args {
    const float *y;
    int64_t ys;
    const int32_t *pos_of;
    const float *w;
    int n, k;
    int64_t h;
    float *out;
    int64_t os;
} combine_args;

static void combine_run(const void *p) {
    const combine_args *a = p;
    for (int64_t t = 0; t < a->n; t++) {
        float *o = a->out + t * a->os;
        for (int64_t d = 0; d < a->h; d++) o[d] = 0.0f;
        for (int j = 0; j < a->k; j++) {
            const int64_t pr = t * a->k + j, at = a->pos_of ? (int64_t)a->pos_of[pr] : pr;
            if (at < 0) continue; /* -1: on the CPU */
            const float *yr = a->y + at * a->ys;
            for (int64_t d = 0; d < a->h; d++) o[d] = fmaf(a->w[pr], yr[d], o[d]);
        }
    }
}

cudaError_t hm_cu_moe_combine(const float *y, int64_t ys, const int32_t *pos_of, const float *w,
                              int n, int k, int64_t h, float *out, int64_t os,
                              cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (k < 1 || k > 64) return cudaErrorInvalidValue;
    const combine_args a = {y, ys, pos_of, w, n, k, h, out, os};
    return hm_host_launch(stream, combine_run, &a, sizeof a);
}

/* ---- q/k norms, rotation and the KV store ---------------------------------------------------- */

typedef struct qk_rope_kv_args {
    hm_cu_qkv a;
    hm_cu_kv kv;
    int n;
} qk_rope_kv_args;

/* one head of q or k (x: head_dim floats): RMSNorm by nw when given, then the rotation */
static void qk_head(const hm_cu_qkv *a, const float *cs, const float *nw, float *x, int hd) {
    if (nw) {
        double ss = 0;
        for (int d = 0; d < hd; d++) ss += (double)x[d] * x[d];
        const float sc = hm_hd_rms_scale(ss, hd, a->eps);
        for (int d = 0; d < hd; d++) x[d] = x[d] * sc * nw[d];
    }
    const int half = a->rope_dim / 2;
    for (int j = 0; j < half; j++) {
        if (a->interleaved)
            hm_hd_rope_pair(&x[2 * j], &x[2 * j + 1], cs[j], cs[half + j]);
        else
            hm_hd_rope_pair(&x[j], &x[j + half], cs[j], cs[half + j]);
    }
}

static void qk_rope_kv_run(const void *p) {
    const qk_rope_kv_args *r = p;
    const hm_cu_qkv *a = &r->a;
    const hm_cu_kv *kv = &r->kv;
    const int hd = kv->head_dim;
    for (int i = 0; i < r->n; i++) {
        const float *cs = a->cs + (int64_t)i * a->rope_dim;
        for (int h = 0; h < a->n_heads; h++)
            qk_head(a, cs, a->qn, a->q + (int64_t)i * a->q_stride + (int64_t)h * hd, hd);
        for (int h = 0; h < kv->n_kv_heads; h++) {
            float *k = a->k + (int64_t)i * a->kv_stride + (int64_t)h * hd;
            const float *v = a->v + (int64_t)i * a->kv_stride + (int64_t)h * hd;
            qk_head(a, cs, a->kn, k, hd);
            const size_t off = kv_head(kv, a->il, a->seq[i], h) + (size_t)a->pos[i] * (size_t)hd;
            for (int d = 0; d < hd; d++) {
                kv_put(kv, kv->k, off + (size_t)d, k[d]);
                kv_put(kv, kv->v, off + (size_t)d, v[d]);
            }
        }
    }
}

cudaError_t hm_cu_qk_rope_kv(const hm_cu_qkv *a, const hm_cu_kv *kv, int n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    const qk_rope_kv_args r = {*a, *kv, n};
    return hm_host_launch(stream, qk_rope_kv_run, &r, sizeof r);
}

/* ---- attention over the cache ---------------------------------------------------------------- */

/* the kernel's chunk of positions, its largest head_dim, and its splits' smallest length and
 * most splits (hm_cu_attention_splits) */
enum { ATT_T = 128, ATT_MAX_HD = 5 * ATT_T, ATT_SPLIT_MIN = 32, ATT_ZMAX = 32 };

typedef struct attn_args {
    hm_cu_attn a;
    hm_cu_kv kv;
    int n;
} attn_args;

/* token i, query head h: positions [lo, pos] in chunks of ATT_T, an online softmax across the
 * chunks (twins.h), the weighted values accumulated with fmaf in position order */
static void attn_head(const hm_cu_attn *a, const hm_cu_kv *kv, int i, int h) {
    const int hd = kv->head_dim, vd = kv->v_dim ? kv->v_dim : hd;
    const int P = a->pos[i] + 1, lo = a->window && P > a->window ? P - a->window : 0;
    const float *q = a->q + (int64_t)i * a->q_stride + (int64_t)h * hd;
    const size_t base = kv_head(kv, a->il, a->seq[i], h / (a->n_heads / kv->n_kv_heads));
    float acc[ATT_MAX_HD] = {0}, pe[ATT_T];
    hm_osm st = {-INFINITY, 0.0f};
    for (int c0 = lo; c0 < P; c0 += ATT_T) {
        const int np = P - c0 < ATT_T ? P - c0 : ATT_T;
        float cm = -INFINITY;
        for (int m = 0; m < np; m++) {
            const size_t kr = base + (size_t)(c0 + m) * (size_t)hd;
            float dot = 0.0f;
            for (int d = 0; d < hd; d++) dot = fmaf(q[d], kv_get(kv, kv->k, kr + (size_t)d), dot);
            pe[m] = dot * a->scale;
            cm = pe[m] > cm ? pe[m] : cm;
        }
        const float f = hm_osm_rescale(&st, cm);
        float l = 0.0f;
        for (int m = 0; m < np; m++) {
            pe[m] = expf(pe[m] - st.m);
            l += pe[m];
        }
        st.l += l;
        for (int d = 0; d < vd; d++) {
            float v = acc[d] * f;
            const size_t vr = base + (size_t)c0 * (size_t)hd + (size_t)d;
            for (int m = 0; m < np; m++)
                v = fmaf(pe[m], kv_get(kv, kv->v, vr + (size_t)m * (size_t)hd), v);
            acc[d] = v;
        }
    }
    const float f = a->sinks ? hm_osm_sink(&st, a->sinks[h]) : 1.0f;
    float *o = a->out + (int64_t)i * a->out_stride + (int64_t)h * vd;
    for (int d = 0; d < vd; d++) o[d] = acc[d] * f / st.l;
}

static void attn_run(const void *p) {
    const attn_args *r = p;
    for (int i = 0; i < r->n; i++)
        for (int h = 0; h < r->a.n_heads; h++) attn_head(&r->a, &r->kv, i, h);
}

/* part and splits only serve the GPU's flash-decoding: the result is the same without them */
cudaError_t hm_cu_attention(const hm_cu_attn *a, const hm_cu_kv *kv, int n, float *part, int splits,
                            cudaStream_t stream) {
    (void)part, (void)splits;
    if (n <= 0) return cudaSuccess;
    if (kv->head_dim > ATT_MAX_HD || kv->n_kv_heads < 1 || a->n_heads % kv->n_kv_heads)
        return cudaErrorInvalidValue;
    const attn_args r = {*a, *kv, n};
    return hm_host_launch(stream, attn_run, &r, sizeof r);
}

int hm_cu_attention_splits(int64_t kv_ctx) {
    const int64_t z = (kv_ctx + ATT_SPLIT_MIN - 1) / ATT_SPLIT_MIN;
    return (int)(z < 1 ? 1 : (z > (int64_t)ATT_ZMAX ? (int64_t)ATT_ZMAX : z));
}

/* hm_cu_attention_tc (fattn.cu): one sequence at consecutive positions, queries, keys, values
 * and the softmax weights rounded to half as the tensor cores take them; each row's maximum
 * first, then the weights and the values against it (the kernel's two passes) */
typedef struct attn_tc_args {
    hm_cu_attn a;
    hm_cu_kv kv;
    int n, seq, pos0;
} attn_tc_args;

static float half_of(float x) {
    return hm_f16_to_f32(hm_f32_to_f16(x));
}

static void attn_tc_run(const void *p) {
    const attn_tc_args *g = p;
    const hm_cu_attn *a = &g->a;
    const hm_cu_kv *kv = &g->kv;
    const int hd = kv->head_dim, grp = a->n_heads / kv->n_kv_heads;
    float *sc = malloc(sizeof(float) * (size_t)(g->pos0 + g->n)), qh[128], acc[128];
    if (!sc) abort(); /* a kernel cannot report; the host GPU's scratch is small */
    for (int i = 0; i < g->n; i++)
        for (int h = 0; h < a->n_heads; h++) {
            const int qp = g->pos0 + i,
                      lo = a->window && qp + 1 > a->window ? qp + 1 - a->window : 0;
            const float *q = a->q + (int64_t)i * a->q_stride + (int64_t)h * hd;
            const size_t base = kv_head(kv, a->il, g->seq, h / grp);
            for (int d = 0; d < hd; d++) qh[d] = half_of(q[d]), acc[d] = 0.0f;
            float m = -INFINITY, l = 0.0f;
            for (int t = lo; t <= qp; t++) {
                float s = 0.0f;
                for (int d = 0; d < hd; d++)
                    s = fmaf(qh[d], half_of(kv_get(kv, kv->k, base + (size_t)t * hd + d)), s);
                sc[t] = s * a->scale;
                m = fmaxf(m, sc[t]);
            }
            for (int t = lo; t <= qp; t++) {
                const float e = expf(sc[t] - m), ph = half_of(e);
                l += e;
                for (int d = 0; d < hd; d++)
                    acc[d] =
                        fmaf(ph, half_of(kv_get(kv, kv->v, base + (size_t)t * hd + d)), acc[d]);
            }
            hm_osm st = {m, l};
            const float f = a->sinks ? hm_osm_sink(&st, a->sinks[h]) : 1.0f;
            float *o = a->out + (int64_t)i * a->out_stride + (int64_t)h * hd;
            for (int d = 0; d < hd; d++) o[d] = acc[d] * f / st.l;
        }
    free(sc);
}

cudaError_t hm_cu_attention_tc(const hm_cu_attn *a, const hm_cu_kv *kv, int n, int seq, int pos0,
                               cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    const int hd = kv->head_dim;
    if ((hd != 64 && hd != 128) || kv->v_dim || kv->n_kv_heads < 1 || a->n_heads % kv->n_kv_heads ||
        seq < 0 || seq >= kv->n_seq || pos0 < 0 || (int64_t)pos0 + n > kv->kv_ctx)
        return cudaErrorInvalidValue;
    const attn_tc_args r = {*a, *kv, n, seq, pos0};
    return hm_host_launch(stream, attn_tc_run, &r, sizeof r);
}

/* ---- multi-head latent attention (model/mla.c's steps) --------------------------------------- */

/* element i of an absorbed matrix's copy of type t (HM_TYPE_F32, F16 or BF16) */
static float mla_w(const void *p, int t, size_t i) {
    if (t == HM_TYPE_BF16) return hm_bf16_to_f32(((const uint16_t *)p)[i]);
    if (t == HM_TYPE_F16) return hm_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

static bool mla_ok(const hm_cu_mla *a) {
    return a->kvl > 0 && a->rope > 0 && a->rope % 2 == 0 && a->nope > 0 && a->vd > 0 &&
           a->n_heads > 0 && a->nope <= 1024 && a->kvl <= 4096 &&
           (a->kt == HM_TYPE_F32 || a->kt == HM_TYPE_F16 || a->kt == HM_TYPE_BF16) &&
           (a->vt == HM_TYPE_F32 || a->vt == HM_TYPE_F16 || a->vt == HM_TYPE_BF16);
}

typedef struct mla_store_args {
    hm_cu_mla a;
    hm_cu_kv kv;
    int n;
} mla_store_args;

/* per token: the latent normed, k_pe and every head's q_pe rotated (interleaved pairs) with the
 * rotated q_pe copied into qa's rotary part, [c, k_pe] into the cache at the token's position */
static void mla_store_run(const void *p) {
    const mla_store_args *r = p;
    const hm_cu_mla *a = &r->a;
    const int kvl = a->kvl, rope = a->rope, half = rope / 2, qhd = a->nope + rope;
    for (int i = 0; i < r->n; i++) {
        float *x = a->kv + (int64_t)i * a->kv_stride;
        double ss = 0;
        for (int d = 0; d < kvl; d++) ss += (double)x[d] * x[d];
        const float sc = hm_hd_rms_scale(ss, kvl, a->eps);
        const float *cs = a->cs + (int64_t)i * rope;
        for (int jj = 0; jj < half; jj++)
            hm_hd_rope_pair(&x[kvl + 2 * jj], &x[kvl + 2 * jj + 1], cs[jj], cs[half + jj]);
        for (int h = 0; h < a->n_heads; h++) {
            float *y = a->q + (int64_t)i * a->q_stride + (int64_t)h * qhd + a->nope;
            float *qa = a->qa + ((int64_t)i * a->n_heads + h) * (kvl + rope) + kvl;
            for (int jj = 0; jj < half; jj++) {
                hm_hd_rope_pair(&y[2 * jj], &y[2 * jj + 1], cs[jj], cs[half + jj]);
                qa[2 * jj] = y[2 * jj], qa[2 * jj + 1] = y[2 * jj + 1];
            }
        }
        for (int d = 0; d < kvl; d++) x[d] = x[d] * sc * a->kv_norm[d];
        const size_t off =
            kv_head(&r->kv, a->il, a->seq[i], 0) + (size_t)a->pos[i] * (size_t)r->kv.head_dim;
        for (int d = 0; d < kvl + rope; d++) kv_put(&r->kv, r->kv.k, off + (size_t)d, x[d]);
    }
}

cudaError_t hm_cu_mla_store(const hm_cu_mla *a, const hm_cu_kv *kv, int n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (!mla_ok(a) || kv->head_dim != a->kvl + a->rope || kv->n_kv_heads != 1)
        return cudaErrorInvalidValue;
    const mla_store_args r = {*a, *kv, n};
    return hm_host_launch(stream, mla_store_run, &r, sizeof r);
}

/* y[t][h][0, J) = x[t][h][0, K) . W[h] (W: [heads][K][J] of type wt) for n tokens, each sum
 * accumulated with fmaf in row order as the kernel does */
typedef struct mla_heads_args {
    const float *x;
    int64_t xt, xh;
    int K;
    const void *W;
    int wt, J;
    float *y;
    int64_t yt, yh;
    int n, heads;
} mla_heads_args;

static void mla_heads_run(const void *p) {
    const mla_heads_args *a = p;
    for (int t = 0; t < a->n; t++)
        for (int h = 0; h < a->heads; h++) {
            const float *x = a->x + (int64_t)t * a->xt + (int64_t)h * a->xh;
            float *y = a->y + (int64_t)t * a->yt + (int64_t)h * a->yh;
            for (int c = 0; c < a->J; c++) y[c] = 0.0f;
            for (int r = 0; r < a->K; r++) {
                const size_t row = ((size_t)h * (size_t)a->K + (size_t)r) * (size_t)a->J;
                for (int c = 0; c < a->J; c++)
                    y[c] = fmaf(x[r], mla_w(a->W, a->wt, row + (size_t)c), y[c]);
            }
        }
}

cudaError_t hm_cu_mla_absorb(const hm_cu_mla *a, int n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (!mla_ok(a)) return cudaErrorInvalidValue;
    const int64_t qhd = a->nope + a->rope, ahd = a->kvl + a->rope;
    const mla_heads_args r = {.x = a->q,
                              .xt = a->q_stride,
                              .xh = qhd,
                              .K = a->nope,
                              .W = a->k_b,
                              .wt = a->kt,
                              .J = a->kvl,
                              .y = a->qa,
                              .yt = (int64_t)a->n_heads * ahd,
                              .yh = ahd,
                              .n = n,
                              .heads = a->n_heads};
    return hm_host_launch(stream, mla_heads_run, &r, sizeof r);
}

cudaError_t hm_cu_mla_values(const hm_cu_mla *a, int n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (!mla_ok(a)) return cudaErrorInvalidValue;
    /* the kernel stages 8 tokens' rows in 48 KiB of shared memory */
    if (sizeof(float) * 8 * (size_t)a->kvl > 48 * 1024) return cudaErrorInvalidValue;
    const mla_heads_args r = {.x = a->o,
                              .xt = (int64_t)a->n_heads * a->kvl,
                              .xh = a->kvl,
                              .K = a->kvl,
                              .W = a->v_b,
                              .wt = a->vt,
                              .J = a->vd,
                              .y = a->out,
                              .yt = a->out_stride,
                              .yh = a->vd,
                              .n = n,
                              .heads = a->n_heads};
    return hm_host_launch(stream, mla_heads_run, &r, sizeof r);
}

/* ---- the sampler's candidates ---------------------------------------------------------------- */

/* the sampler's sort key: the order of the floats as unsigned integers (-0 made +0 first) */
static uint32_t top_key(float x) {
    const uint32_t u = hm_f32_bits(x + 0.0f);
    return u ^ ((uint32_t)((int32_t)u >> 31) | 0x80000000u);
}

typedef struct top_args {
    const float *lg;
    int64_t ls;
    int rows, V, k;
    int32_t *ids;
    float *vals;
    int32_t *bad;
} top_args;

/* per row, as the kernel: the k-th largest key by four 8-bit radix passes, then the row walked in
 * token order taking every larger key and the first ties */
static void top_run(const void *p) {
    const top_args *a = p;
    for (int row = 0; row < a->rows; row++) {
        const float *x = a->lg + (int64_t)row * a->ls;
        int32_t bad = -1;
        for (int i = 0; i < a->V && bad < 0; i++)
            if (!(x[i] < INFINITY)) bad = i; /* NaN or +inf */
        uint32_t prefix = 0, mask = 0;
        int rem = a->k;
        for (int shift = 24; shift >= 0; shift -= 8) {
            int hist[256] = {0};
            for (int i = 0; i < a->V; i++) {
                const uint32_t key = top_key(x[i]);
                if ((key & mask) == prefix) hist[(key >> shift) & 255u]++;
            }
            int above = 0, b = 255;
            for (; b > 0; b--) {
                if (above + hist[b] >= rem) break;
                above += hist[b];
            }
            prefix |= (uint32_t)b << shift;
            rem -= above;
            mask |= 255u << shift;
        }
        /* prefix: the k-th largest key; rem: how many entries equal to it are taken */
        int32_t *oi = a->ids + (int64_t)row * a->k;
        float *ov = a->vals + (int64_t)row * a->k;
        int at = 0, ties = 0;
        for (int i = 0; i < a->V; i++) {
            const uint32_t key = top_key(x[i]);
            if (key > prefix || (key == prefix && ties++ < rem)) oi[at] = i, ov[at++] = x[i] + 0.0f;
        }
        a->bad[row] = bad;
    }
}

/* ---- the hybrid step's hand-off (ops.cu's hm_cu_handoff_out / _in) ------------------------- */

typedef struct handoff_args {
    const float *x;
    int64_t xs;
    int n;
    int64_t h;
    const int32_t *ids;
    const float *w;
    int np;
    float *hx, *hw;
    int32_t *hids;
    uint32_t *flag, *err;
    const uint32_t *epoch;
    const float *hout;
    bool add;
    float *out;
    int64_t os;
} handoff_args;

static void handoff_out_run(const void *p) {
    const handoff_args *a = p;
    for (int t = 0; t < a->n; t++)
        memcpy(a->hx + (int64_t)t * a->h, a->x + (int64_t)t * a->xs, sizeof(float) * (size_t)a->h);
    if (a->np > 0) {
        memcpy(a->hids, a->ids, sizeof(int32_t) * (size_t)a->np);
        memcpy(a->hw, a->w, sizeof(float) * (size_t)a->np);
    }
    __atomic_store_n(a->flag, *a->epoch, __ATOMIC_RELEASE);
}

static void handoff_in_run(const void *p) {
    const handoff_args *a = p;
    const uint32_t want = *a->epoch;
    const uint64_t t0 = hm_time_ns();
    while (__atomic_load_n(a->flag, __ATOMIC_ACQUIRE) != want) {
        if (hm_time_ns() - t0 > 30000000000ull) {
            __atomic_store_n(a->err, 1u, __ATOMIC_RELAXED);
            break;
        }
        sched_yield(); /* the CPU side shares this machine's cores */
    }
    for (int t = 0; t < a->n; t++)
        for (int64_t j = 0; j < a->h; j++) {
            float *o = a->out + (int64_t)t * a->os + j;
            const float v = a->hout[(int64_t)t * a->h + j];
            *o = a->add ? *o + v : v;
        }
}

cudaError_t hm_cu_handoff_out(const float *x, int64_t xs, int n, int64_t h, const int32_t *ids,
                              const float *w, int np, float *hx, int32_t *hids, float *hw,
                              uint32_t *flag, const uint32_t *epoch, cudaStream_t stream) {
    if (n < 0 || np < 0 || h <= 0) return cudaErrorInvalidValue;
    const handoff_args a = {.x = x,
                            .xs = xs,
                            .n = n,
                            .h = h,
                            .ids = ids,
                            .w = w,
                            .np = np,
                            .hx = hx,
                            .hw = hw,
                            .hids = hids,
                            .flag = flag,
                            .epoch = epoch};
    return hm_host_launch(stream, handoff_out_run, &a, sizeof a);
}

cudaError_t hm_cu_handoff_in(const uint32_t *flag, const uint32_t *epoch, const float *hout, int n,
                             int64_t h, bool add, float *out, int64_t os, uint32_t *err,
                             cudaStream_t stream) {
    if (n < 0 || h <= 0) return cudaErrorInvalidValue;
    const handoff_args a = {.n = n,
                            .h = h,
                            .flag = (uint32_t *)flag,
                            .err = err,
                            .epoch = epoch,
                            .hout = hout,
                            .add = add,
                            .out = out,
                            .os = os};
    return hm_host_launch(stream, handoff_in_run, &a, sizeof a);
}

/* the host GPU runs one kernel at a time: nothing to launch ahead */
void hm_cu_pdl_allow(bool on) {
    (void)on;
}

/* the host GPU walks each row whole: the scratch of the segmented form goes unused */
size_t hm_cu_top_scratch(int rows, int V) {
    (void)rows, (void)V;
    return 0;
}

cudaError_t hm_cu_top_candidates(const float *logits, int64_t ls, int rows, int V, int k,
                                 int32_t *ids, float *vals, int32_t *bad, void *scratch,
                                 cudaStream_t stream) {
    (void)scratch;
    if (rows <= 0) return cudaSuccess;
    if (k < 1 || k > 256 || k > V) return cudaErrorInvalidValue;
    const top_args a = {logits, ls, rows, V, k, ids, vals, bad};
    return hm_host_launch(stream, top_run, &a, sizeof a);
}

/* down and the weighted sum: the same two steps in stream order */
cudaError_t hm_cu_matvec_experts_sum(const hm_cu_w *w, const int32_t *ids, int n, int k,
                                     const float *x, int64_t xs, float *y, int64_t ys,
                                     const float *wts, float *out, int64_t os, unsigned *cnt,
                                     cudaStream_t stream) {
    if (n <= 0 || w->rows <= 0) return cudaSuccess;
    if (n > HM_CU_MATVEC_MAX || k < 1 || k > 64 || !cnt) return cudaErrorInvalidValue;
    const cudaError_t e = hm_cu_matvec_experts(w, ids, n * k, x, xs, 1, y, ys, stream);
    return e != cudaSuccess ? e
                            : hm_cu_moe_combine(y, ys, NULL, wts, n, k, w->rows, out, os, stream);
}
