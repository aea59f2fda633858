/* exec_cpu.c - the CPU backend's walk of the forward graph (graph.h) over a batch in the
 * context's scratch. It runs each node on the thread pool, and fuses where that pays:
 *   - a residual add and the norm that follows it (the next layer's attention norm included):
 *     one pass over x;
 *   - three matmuls of one input followed by QK_ROPE_KV: one job; for decode batches (<= 4
 *     tokens) each head's norm, rotation and cache store run inside that job as soon as the
 *     head's rows are done;
 *   - idle workers prefetch the next matmul's weights during the attention block's jobs and the
 *     experts (decode), the hints measured to pay (docs/models.md).
 * Every fusion gives the bits of the nodes run one by one. */
#include <stdatomic.h>
#include <math.h>

#include "cuda/twins.h"
#include "model/backend.h"
#include "model/ctx_int.h"
#include "model/graph.h"
#include "quant/fp16.h"

static float *slot(hm_ctx *c, hm_slot s) {
    switch (s) {
    case HM_SLOT_X:
        return c->x;
    case HM_SLOT_XN:
        return c->xn;
    case HM_SLOT_Q:
        return c->q;
    case HM_SLOT_K:
        return c->k;
    case HM_SLOT_V:
        return c->v;
    case HM_SLOT_ATT:
        return c->att;
    case HM_SLOT_TMP:
        return c->tmp;
    case HM_SLOT_RL:
        return c->rl;
    case HM_SLOT_G:
        return c->g;
    case HM_SLOT_U:
        return c->u;
    case HM_SLOT_SH:
        return c->sh;
    case HM_SLOT_NONE:
    case HM_SLOT_COUNT:
        break;
    }
    return NULL;
}

/* row stride (floats) of a slot */
static size_t slot_cols(const hm_ctx *c, hm_slot s) {
    const hm_hparams *hp = &c->m->hp;
    switch (s) {
    case HM_SLOT_Q:
    case HM_SLOT_ATT:
        return c->q_dim;
    case HM_SLOT_K:
    case HM_SLOT_V:
        return c->kv_dim;
    case HM_SLOT_RL:
        return hp->n_experts ? hp->n_experts : 1;
    case HM_SLOT_G:
    case HM_SLOT_U:
        return c->ffn_max;
    default:
        return hp->hidden;
    }
}

typedef struct norm_arg {
    float *x, *xn;
    const float *t, *w; /* t: the residual to add first, or NULL */
} norm_arg;

/* x += t (when given), then xn = rmsnorm(x) * w */
static void norm_tok(hm_ctx *c, int i, void *arg) {
    const norm_arg *a = arg;
    const size_t H = c->m->hp.hidden;
    float *x = a->x + (size_t)i * H;
    if (a->t) {
        const float *t = a->t + (size_t)i * H;
        for (size_t d = 0; d < H; d++) x[d] += t[d];
    }
    if (a->w) hm_rmsnorm(x, a->w, a->xn + (size_t)i * H, (int64_t)H, c->m->hp.norm_eps);
}

/* q/k norms, rotary embedding, and the token's K/V into its sequence's cache */
static void qk_rope_store(hm_ctx *c, int i, void *arg) {
    const hm_node *nd = arg;
    const hm_hparams *hp = &c->m->hp;
    const int hd = (int)hp->head_dim, nh = (int)hp->n_heads, nkv = (int)hp->n_kv_heads;
    float *q = c->q + (size_t)i * c->q_dim, *k = c->k + (size_t)i * c->kv_dim;
    const float *v = c->v + (size_t)i * c->kv_dim;
    if (nd->nw) {
        for (int h = 0; h < nh; h++)
            hm_rmsnorm(q + (size_t)h * hd, nd->nw, q + (size_t)h * hd, hd, hp->norm_eps);
        for (int h = 0; h < nkv; h++)
            hm_rmsnorm(k + (size_t)h * hd, nd->nw2, k + (size_t)h * hd, hd, hp->norm_eps);
    }
    const float *cs = c->rope_cs + (size_t)i * hp->rope_dim;
    hm_rope(hp->rope_interleaved, q, nh, hd, (int)hp->rope_dim, cs);
    hm_rope(hp->rope_interleaved, k, nkv, hd, (int)hp->rope_dim, cs);
    hm_nn_kv_store(hm_ctx_kv_k(c, nd->il, c->seq[i]), hm_ctx_kv_v(c, nd->il, c->seq[i]),
                   c->kv_elem == 2, c->kv_ctx * (size_t)hd, nkv, hd, c->pos[i], k, v);
}

/* The same per head, inside the q/k/v job (decode batches): each head's q or k norm and rotation
 * as soon as its rows are done, and a kv head's K and V stored by whichever of its two matrices
 * finishes second. */
typedef struct qkv_ep {
    hm_ctx *c;
    const hm_node *nd;
    const float *bias[3]; /* q, k, v biases (or NULL) */
    int n;
    atomic_int kv_arrived[256]; /* per kv head: its k and v rows done (0, 1, 2) */
} qkv_ep;

static void qkv_head_done(void *arg, int m, int h) {
    qkv_ep *e = arg;
    hm_ctx *c = e->c;
    const hm_hparams *hp = &c->m->hp;
    const int hd = (int)hp->head_dim, il = e->nd->il;
    const float *b = e->bias[m] ? e->bias[m] + (size_t)h * hd : NULL;
    for (int i = 0; i < e->n && b && m == 2; i++) /* v head h: its bias before the store */
        for (int d = 0; d < hd; d++) c->v[(size_t)i * c->kv_dim + (size_t)h * hd + d] += b[d];
    for (int i = 0; i < e->n && m < 2; i++) { /* q (m 0) or k (m 1) head h of every token */
        float *x = m == 0 ? c->q + (size_t)i * c->q_dim + (size_t)h * hd
                          : c->k + (size_t)i * c->kv_dim + (size_t)h * hd;
        if (b)
            for (int d = 0; d < hd; d++) x[d] += b[d];
        const float *nw = m == 0 ? e->nd->nw : e->nd->nw2;
        if (nw) hm_rmsnorm(x, nw, x, hd, hp->norm_eps);
        hm_rope(hp->rope_interleaved, x, 1, hd, (int)hp->rope_dim,
                c->rope_cs + (size_t)i * hp->rope_dim);
    }
    if (m == 0 || atomic_fetch_add_explicit(&e->kv_arrived[h], 1, memory_order_acq_rel) != 1)
        return;
    const size_t off = (size_t)h * c->kv_ctx * (size_t)hd * c->kv_elem; /* head h of a cache */
    for (int i = 0; i < e->n; i++)
        hm_nn_kv_store((uint8_t *)hm_ctx_kv_k(c, il, c->seq[i]) + off,
                       (uint8_t *)hm_ctx_kv_v(c, il, c->seq[i]) + off, c->kv_elem == 2,
                       c->kv_ctx * (size_t)hd, 1, hd, c->pos[i],
                       c->k + (size_t)i * c->kv_dim + (size_t)h * hd,
                       c->v + (size_t)i * c->kv_dim + (size_t)h * hd);
}

/* y[i][0..cols) += b for the batch's rows (a matmul's bias) */
typedef struct bias_arg {
    float *y;
    size_t stride;
    const float *b;
    int64_t cols;
} bias_arg;

static void bias_tok(hm_ctx *c, int i, void *arg) {
    (void)c;
    const bias_arg *a = arg;
    float *y = a->y + (size_t)i * a->stride;
    for (int64_t d = 0; d < a->cols; d++) y[d] += a->b[d];
}

static void add_bias(hm_ctx *c, int n, float *y, size_t stride, const float *b, int64_t cols) {
    if (!b) return;
    bias_arg a = {y, stride, b, cols};
    hm_ctx_for_tokens(c, n, bias_tok, &a);
}

/* dst += sigmoid(xn . w) * src (w NULL: dst += src) */
typedef struct gated_arg {
    float *dst;
    const float *src, *xn, *w;
} gated_arg;

static void gated_tok(hm_ctx *c, int i, void *arg) {
    const gated_arg *a = arg;
    const size_t H = c->m->hp.hidden;
    const float *s = a->src + (size_t)i * H;
    float *d = a->dst + (size_t)i * H, g = 1.0f;
    if (a->w) {
        const float *x = a->xn + (size_t)i * H;
        float dot = 0.0f;
        for (size_t j = 0; j < H; j++) dot += x[j] * a->w[j];
        g = 1.0f / (1.0f + expf(-dot)); /* twins.h hm_hd_sigmoid */
    }
    for (size_t j = 0; j < H; j++) d[j] += g * s[j];
}

typedef struct glu_arg {
    float *g;
    const float *u;
    size_t F, width; /* row stride, values a row */
} glu_arg;

static void glu_tok(hm_ctx *c, int i, void *arg) {
    (void)c;
    const glu_arg *a = arg;
    hm_silu_mul(a->g + (size_t)i * a->F, a->u + (size_t)i * a->F, (int64_t)a->width);
}

/* softmax top-k routing of one token (the tokens of a batch in parallel on the pool, not on the
 * calling thread alone); a failure is kept for the caller */
typedef struct route_arg {
    const float *rl;
    const float *bias; /* sigmoid routers' e_score_correction_bias, or NULL */
    int E, k;
    bool renorm;
    _Atomic int failed; /* hm_status of the first failure, 0 when none */
} route_arg;

/* DeepSeek-V2's group_limited_greedy: twins.h's, shared with the GPU's router kernel */
static hm_status softmax_group_topk(const float *l, int n, int n_group, int topk_group, int k,
                                    bool renorm, float scale, int32_t *ids, float *w) {
    if (n > HM_HD_ROUTER_MAX || n_group > 64 || n % n_group || topk_group < 1 ||
        topk_group > n_group || k > n / n_group * topk_group)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "router: top-%d of %d experts in %d groups (top %d): group-limited "
                         "routing takes up to %d experts in up to 64 groups",
                         k, n, n_group, topk_group, HM_HD_ROUTER_MAX);
    hm_hd_router_softmax_group(l, n, n_group, topk_group, k, renorm, scale, ids, w);
    return HM_OK;
}

static void route_tok(hm_ctx *c, int i, void *arg) {
    route_arg *r = arg;
    const hm_hparams *hp = &c->m->hp;
    const float *l = r->rl + (size_t)i * (size_t)r->E;
    int32_t *ids = c->ids + (size_t)i * r->k;
    float *w = c->w + (size_t)i * r->k;
    hm_status st;
    if (hp->gating == HM_GATING_SIGMOID)
        st = hm_router_sigmoid_group_topk(l, r->bias, r->E, hp->n_group ? (int)hp->n_group : 1,
                                          hp->topk_group ? (int)hp->topk_group : 1, r->k, r->renorm,
                                          hp->routed_scaling, ids, w);
    else if (hp->n_group > 1)
        st = softmax_group_topk(l, r->E, (int)hp->n_group, (int)hp->topk_group, r->k, r->renorm,
                                hp->routed_scaling, ids, w);
    else
        st = hm_router_softmax_topk(l, r->E, r->k, r->renorm, ids, w);
    if (!st && hp->gating != HM_GATING_SIGMOID && hp->n_group <= 1 && hp->routed_scaling != 1.0f)
        for (int j = 0; j < r->k; j++) w[j] *= hp->routed_scaling; /* DeepSeek-V2 */
    int none = 0;
    if (st) atomic_compare_exchange_strong(&r->failed, &none, (int)st);
}

/* nodes i..i+2 are a gate and an up matmul of one input without biases and the GLU of their
 * outputs (the dense MLP's, a shared expert's): one job (run_gate_up) */
static bool gate_up_at(const hm_graph *g, int i) {
    const hm_node *nd = g->nodes + i;
    return i + 2 < g->n && nd[0].op == HM_OP_MATMUL && nd[1].op == HM_OP_MATMUL &&
           nd[2].op == HM_OP_GLU && nd[1].src0 == nd[0].src0 && nd[2].dst == nd[0].dst &&
           nd[2].src0 == nd[1].dst && !nd[0].bias && !nd[1].bias && nd[0].w->rows == nd[1].w->rows;
}

/* The matmuls after node i (skipping other ops) that one job would run: 1, 2 (gate and up) or 3
 * of one input (q/k/v). */
static int matmul_group(const hm_graph *g, int i, const hm_matrix **w) {
    const hm_node *nd = g->nodes;
    int j = i;
    while (j < g->n && nd[j].op != HM_OP_MATMUL) j++;
    if (j == g->n) return 0;
    if (gate_up_at(g, j)) {
        w[0] = nd[j].w, w[1] = nd[j + 1].w;
        return 2;
    }
    int k = 1;
    while (k < 3 && j + k < g->n && nd[j + k].op == HM_OP_MATMUL && nd[j + k].src0 == nd[j].src0)
        k++;
    if (k != 3) k = 1;
    for (int m = 0; m < k; m++) w[m] = nd[j + m].w;
    return k;
}

/* Decode's idle hint: the workers of the next job prefetch the matmul(s) that follow node i */
static void hint_next(hm_ctx *c, const hm_graph *g, int i, int n) {
    const hm_matrix *w[3];
    const int k = matmul_group(g, i, w);
    if (k) hm_ctx_prefetch(c, w, k, n);
}

/* q, k and v of one input and the QK_ROPE_KV node after them (nodes i..i+3) */
static void run_qkv(hm_ctx *c, const hm_graph *g, int i, int n, uint64_t *t0) {
    const hm_hparams *hp = &c->m->hp;
    const hm_node *nd = g->nodes + i;
    const hm_matrix *w[3] = {nd[0].w, nd[1].w, nd[2].w};
    float *const y[3] = {slot(c, nd[0].dst), slot(c, nd[1].dst), slot(c, nd[2].dst)};
    const size_t ys[3] = {slot_cols(c, nd[0].dst), slot_cols(c, nd[1].dst),
                          slot_cols(c, nd[2].dst)};
    const float *x = slot(c, nd[0].src0);
    hint_next(c, g, i + 3, n); /* o_proj's rows, while q/k/v finish */
    if (n <= 4 && hp->n_kv_heads <= 256) {
        /* decode: norms, rope and the cache store per head inside the job */
        qkv_ep e = {.c = c, .nd = &nd[3], .bias = {nd[0].bias, nd[1].bias, nd[2].bias}, .n = n};
        for (uint32_t h = 0; h < hp->n_kv_heads; h++) atomic_init(&e.kv_arrived[h], 0);
        const hm_nn_epilogue ep = {(int)hp->head_dim, qkv_head_done, &e};
        hm_nn_matmul_multi_ep(c->pool, w, 3, x, hp->hidden, n, y, ys, c->mm_scratch,
                              hm_ctx_mm_flags(c), &ep);
        hm_ctx_prof(c, nd[0].prof, t0);
    } else {
        hm_nn_matmul_multi(c->pool, w, 3, x, hp->hidden, n, y, ys, c->mm_scratch,
                           hm_ctx_mm_flags(c));
        for (int m = 0; m < 3; m++) add_bias(c, n, y[m], ys[m], nd[m].bias, w[m]->rows);
        hm_ctx_prof(c, nd[0].prof, t0);
        hm_ctx_for_tokens(c, n, qk_rope_store, (void *)&nd[3]);
    }
}

/* SiLU-GLU of a group of rows once both its gate and its up rows are done (run_gate_up) */
typedef struct glu_ep {
    float *g;
    const float *u;
    size_t gs, us;
    int n, rows, gr;
    atomic_int arrived[HM_NN_EP_MAX]; /* per group: its gate and up rows done (0, 1, 2) */
} glu_ep;

static void glu_group_done(void *arg, int m, int grp) {
    (void)m;
    glu_ep *e = arg;
    if (atomic_fetch_add_explicit(&e->arrived[grp], 1, memory_order_acq_rel) != 1) return;
    const int r0 = grp * e->gr, nr = e->rows - r0 < e->gr ? e->rows - r0 : e->gr;
    for (int t = 0; t < e->n; t++)
        hm_silu_mul(e->g + (size_t)t * e->gs + r0, e->u + (size_t)t * e->us + r0, nr);
}

/* gate, up and their GLU (nodes i..i+2, gate_up_at) as one job: decode applies the GLU inside it,
 * to each group of rows on the thread that finished it, where the calling thread alone walked
 * every row after two jobs (the rows written on the other cores) */
static void run_gate_up(hm_ctx *c, const hm_graph *g, int i, int n, uint64_t *t0) {
    const hm_node *nd = g->nodes + i;
    const hm_matrix *w[2] = {nd[0].w, nd[1].w};
    /* rows packed (stride: the width), as hm_ctx_matmul writes them and down reads them */
    float *const y[2] = {slot(c, nd[0].dst), slot(c, nd[1].dst)};
    const size_t ys[2] = {(size_t)w[0]->rows, (size_t)w[1]->rows};
    const float *x = slot(c, nd[0].src0);
    const size_t xs = (size_t)w[0]->cols;
    hint_next(c, g, i + 3, n); /* down's rows, while gate and up finish */
    if (n <= 4) {
        /* groups that tile the rows (hm_nn_matmul_multi_ep's groups are whole), at most
         * HM_NN_EP_MAX of both matrices; one group of every row where nothing else tiles */
        glu_ep e = {.g = y[0], .u = y[1], .gs = ys[0], .us = ys[1], .n = n};
        e.rows = (int)w[0]->rows, e.gr = 64;
        while (e.gr > 8 && e.rows % e.gr) e.gr /= 2;
        while (e.rows % e.gr == 0 && 2 * (e.rows / e.gr) > HM_NN_EP_MAX) e.gr *= 2;
        if (e.rows % e.gr) e.gr = e.rows;
        for (int k = 0; k < e.rows / e.gr; k++) atomic_init(&e.arrived[k], 0);
        const hm_nn_epilogue ep = {e.gr, glu_group_done, &e};
        hm_nn_matmul_multi_ep(c->pool, w, 2, x, xs, n, y, ys, c->mm_scratch, hm_ctx_mm_flags(c),
                              &ep);
    } else {
        hm_nn_matmul_multi(c->pool, w, 2, x, xs, n, y, ys, c->mm_scratch, hm_ctx_mm_flags(c));
        glu_arg a = {y[0], y[1], ys[0], (size_t)w[0]->rows};
        hm_ctx_for_tokens(c, n, glu_tok, &a);
    }
    hm_ctx_prof(c, nd[0].prof, t0);
}

/* Attention with per-head sink logits and/or a sliding window (gpt-oss), one (token, head) per
 * item: scores over positions (pos - window, pos] (all of them without a window), the sink's
 * exp(sink - max) joining the softmax's denominator only, as transformers'
 * eager_attention_forward computes it. */
typedef struct sink_job {
    hm_ctx *c;
    const hm_node *nd;
    int n, window;
    float scale;
    size_t scratch;
} sink_job;

static float kv_elem_at(const hm_ctx *c, const uint8_t *head, size_t i) {
    return c->kv_elem == 4 ? ((const float *)head)[i] : hm_f16_to_f32(((const uint16_t *)head)[i]);
}

static void sink_attend(int ith, int nth, void *arg) {
    const sink_job *j = arg;
    hm_ctx *c = j->c;
    const hm_hparams *hp = &c->m->hp;
    const int nh = (int)hp->n_heads, nkv = (int)hp->n_kv_heads, hd = (int)hp->head_dim;
    float *sc = c->attn_scratch + (size_t)ith * j->scratch, *acc = sc + c->p.n_ctx;
    const size_t head_elems = c->kv_ctx * (size_t)hd, esz = c->kv_elem;
    for (int item = ith; item < j->n * nh; item += nth) {
        const int t = item / nh, h = item % nh, kh = h / (nh / nkv);
        const float *q = slot(c, j->nd->src0) + (size_t)t * c->q_dim + (size_t)h * hd;
        const uint8_t *kb =
            (const uint8_t *)hm_ctx_kv_k(c, j->nd->il, c->seq[t]) + (size_t)kh * head_elems * esz;
        const uint8_t *vb =
            (const uint8_t *)hm_ctx_kv_v(c, j->nd->il, c->seq[t]) + (size_t)kh * head_elems * esz;
        const int p1 = c->pos[t] + 1, p0 = j->window && p1 > j->window ? p1 - j->window : 0;
        float mx = j->nd->nw ? j->nd->nw[h] : -INFINITY;
        for (int p = p0; p < p1; p++) {
            /* K in blocks of HM_NN_KBLK positions (nn.h): element d of position p is
             * hm_nn_k_index(p, d, hd) = k0 + d * HM_NN_KBLK */
            const size_t k0 = hm_nn_k_index((size_t)p, 0, (size_t)hd);
            float s = 0.0f;
            for (int d = 0; d < hd; d++) s += q[d] * kv_elem_at(c, kb, k0 + (size_t)d * HM_NN_KBLK);
            sc[p - p0] = s * j->scale;
            if (sc[p - p0] > mx) mx = sc[p - p0];
        }
        double sum = j->nd->nw ? exp((double)j->nd->nw[h] - mx) : 0.0;
        for (int p = p0; p < p1; p++) sum += (sc[p - p0] = expf(sc[p - p0] - mx));
        for (int d = 0; d < hd; d++) acc[d] = 0.0f;
        for (int p = p0; p < p1; p++)
            for (int d = 0; d < hd; d++)
                acc[d] += sc[p - p0] * kv_elem_at(c, vb, (size_t)p * hd + d);
        float *out = slot(c, j->nd->dst) + (size_t)t * c->q_dim + (size_t)h * hd;
        for (int d = 0; d < hd; d++) out[d] = (float)(acc[d] / sum);
    }
}

static void run_attn(hm_ctx *c, const hm_graph *g, int i, int n) {
    const hm_hparams *hp = &c->m->hp;
    const hm_node *nd = &g->nodes[i];
    const int window = hp->sliding_window && nd->il < HM_MAX_LAYERS && hp->layer_sliding[nd->il]
                           ? (int)hp->sliding_window
                           : 0;
    if (nd->nw || window) {
        sink_job j = {c,
                      nd,
                      n,
                      window,
                      1.0f / sqrtf((float)hp->head_dim),
                      (size_t)c->p.n_ctx + hp->head_dim + 16};
        hm_pool_run(c->pool, sink_attend, &j);
        return;
    }
    for (int t = 0; t < n; t++) {
        c->kvv[t].k = hm_ctx_kv_k(c, nd->il, c->seq[t]);
        c->kvv[t].v = hm_ctx_kv_v(c, nd->il, c->seq[t]);
    }
    hm_nn_attn a = {.n_tok = n,
                    .n_heads = (int)hp->n_heads,
                    .n_kv_heads = (int)hp->n_kv_heads,
                    .head_dim = (int)hp->head_dim,
                    .scale = 1.0f / sqrtf((float)hp->head_dim),
                    .q = slot(c, nd->src0),
                    .q_stride = c->q_dim,
                    .kv = c->kvv,
                    .kv_head_stride = c->kv_ctx * hp->head_dim,
                    .kv_f16 = c->kv_elem == 2,
                    .pos = c->pos,
                    .out = slot(c, nd->dst),
                    .out_stride = c->q_dim,
                    .scratch = c->attn_scratch,
                    .max_ctx = c->p.n_ctx};
    hint_next(c, g, i, n); /* o_proj on after attention (steps already in L2 are cheap) */
    hm_nn_attention(c->pool, &a);
}

static hm_status run_route(hm_ctx *c, const hm_node *nd, int n) {
    const hm_hparams *hp = &c->m->hp;
    const int E = (int)hp->n_experts, k = (int)hp->n_experts_used;
    route_arg ra = {slot(c, nd->src0), nd->nw, E, k, hp->norm_topk_prob, 0};
    hm_ctx_for_tokens(c, n, route_tok, &ra);
    if (atomic_load(&ra.failed))
        return hm_errorf((hm_status)atomic_load(&ra.failed), "layer %d router: top-%d of %d",
                         nd->il, k, E);
    hm_ctx_route_stats(c, n, k, E);
    uint64_t *cnt = c->expert_counts + (size_t)nd->il * (size_t)E;
    for (int i = 0; i < n * k; i++) cnt[c->ids[i]]++;
    return HM_OK;
}

hm_status hm_ctx_run_graph(hm_ctx *c, const hm_graph *g, int n) {
    const hm_node *nodes = g->nodes;
    uint64_t t0 = hm_time_ns();
    for (int i = 0; i < g->n; i++) {
        const hm_node *nd = &nodes[i];
        int used = 1;
        hm_status st = HM_OK;
        switch (nd->op) {
        case HM_OP_NORM:
        case HM_OP_ADD_NORM: {
            norm_arg a = {slot(c, nd->src0), slot(c, nd->dst),
                          nd->op == HM_OP_ADD_NORM ? slot(c, nd->src1) : NULL, nd->nw};
            hm_ctx_for_tokens(c, n, norm_tok, &a);
            break;
        }
        case HM_OP_ADD: {
            /* fused with the norm of the same stream that follows */
            const hm_node *nx = i + 1 < g->n ? &nodes[i + 1] : NULL;
            const bool fuse = nx && nx->op == HM_OP_NORM && nx->src0 == nd->dst;
            norm_arg a = {slot(c, nd->dst), fuse ? slot(c, nx->dst) : NULL, slot(c, nd->src0),
                          fuse ? nx->nw : NULL};
            hm_ctx_for_tokens(c, n, norm_tok, &a);
            used = fuse ? 2 : 1;
            break;
        }
        case HM_OP_MATMUL:
            if (i + 3 < g->n && nodes[i + 1].op == HM_OP_MATMUL &&
                nodes[i + 2].op == HM_OP_MATMUL && nodes[i + 3].op == HM_OP_QK_ROPE_KV &&
                nodes[i + 1].src0 == nd->src0 && nodes[i + 2].src0 == nd->src0) {
                run_qkv(c, g, i, n, &t0);
                used = 4;
                break;
            }
            if (gate_up_at(g, i)) {
                run_gate_up(c, g, i, n, &t0);
                used = 3;
                break;
            }
            /* the attention output's projection: the FFN's first matmul on after it */
            if (nd->src0 == HM_SLOT_ATT) hint_next(c, g, i + 1, n);
            hm_ctx_matmul(c, nd->w, slot(c, nd->src0), n, slot(c, nd->dst));
            add_bias(c, n, slot(c, nd->dst), slot_cols(c, nd->dst), nd->bias, nd->w->rows);
            break;
        case HM_OP_QK_ROPE_KV:
            hm_ctx_for_tokens(c, n, qk_rope_store, (void *)nd);
            break;
        case HM_OP_ATTN:
            run_attn(c, g, i, n);
            break;
        case HM_OP_ROUTER_TOPK:
            st = run_route(c, nd, n);
            break;
        case HM_OP_GLU: {
            /* the layer's width (a dense first layer's may be several times the shared
             * expert's), the rows packed as hm_ctx_matmul wrote them */
            const size_t wd = nd->w ? (size_t)nd->w->rows : c->ffn_max;
            glu_arg a = {slot(c, nd->dst), slot(c, nd->src0), wd, wd};
            hm_ctx_for_tokens(c, n, glu_tok, &a);
            break;
        }
        case HM_OP_MOE: {
            const int k = (int)c->m->hp.n_experts_used;
            hint_next(c, g, i + 1, n); /* the next block's q/k/v while the experts finish */
            st = hm_moe_submit(c->moe[nd->il], slot(c, nd->src0), HM_MOE_F32, c->ids, c->w, n, k,
                               slot(c, nd->dst), HM_MOE_F32, false);
            if (!st) hm_moe_wait(c->moe[nd->il]);
            break;
        }
        case HM_OP_MLA:
            st = hm_ctx_run_mla(c, nd, n);
            break;
        case HM_OP_GATED_ADD: {
            gated_arg a = {slot(c, nd->dst), slot(c, nd->src0), slot(c, nd->src1), nd->nw};
            hm_ctx_for_tokens(c, n, gated_tok, &a);
            break;
        }
        case HM_OP_COUNT:
            st = hm_errorf(HM_ERR_INTERNAL, "graph node %d: bad op", i);
            break;
        }
        if (st) return st;
        i += used - 1;
        /* time is booked to a node's part when the next node belongs to another */
        if (i + 1 >= g->n || nodes[i + 1].prof != nodes[i].prof) hm_ctx_prof(c, nodes[i].prof, &t0);
    }
    return HM_OK;
}

/* every op; a matmul when the CPU has kernels for its weight type */
static bool cpu_supports(void *self, const hm_node *nd) {
    (void)self;
    if (nd->op < 0 || nd->op >= HM_OP_COUNT) return false;
    return nd->op != HM_OP_MATMUL || (nd->w && hm_vec_dot_for(NULL, nd->w->type) != NULL);
}

static hm_status cpu_compute(void *self, const hm_graph *g, int n) {
    return hm_ctx_run_graph(self, g, n);
}

static const hm_backend_i cpu_backend_i = {"cpu", cpu_supports, cpu_compute};

hm_backend hm_ctx_cpu_backend(hm_ctx *c) {
    return (hm_backend){&cpu_backend_i, c};
}
