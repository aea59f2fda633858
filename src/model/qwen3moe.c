/* qwen3moe.c - one Qwen3-MoE transformer block on the CPU, as transformers' Qwen3MoeDecoderLayer
 * computes it:
 *   h = x + o_proj(attn(rope(q_norm(q_proj(rms(x)))), rope(k_norm(k_proj(rms(x)))),
 * v_proj(rms(x)))) x' = h + moe(rms(h))   (or the dense MLP on mlp_only_layers / off-step layers)
 * RMSNorm multiplies by w (not 1 + w); q_norm/k_norm are RMSNorms over each head's head_dim
 * applied before the NeoX rotation; attention scale is head_dim^-0.5; the router is a softmax over
 * all experts in float, the top-k taken, renormalised when norm_topk_prob. */
#include <stdatomic.h>
#include <math.h>

#include "model/ctx_int.h"

static void norm_attn(hm_ctx *c, int i, void *arg) {
    const hm_layer *L = arg;
    const size_t H = c->m->hp.hidden;
    hm_rmsnorm(c->x + (size_t)i * H, L->attn_norm, c->xn + (size_t)i * H, (int64_t)H,
               c->m->hp.norm_eps);
}

typedef struct qk_arg {
    const hm_layer *L;
    int il;
} qk_arg;

/* q/k norms, rotary embedding, and the token's K/V into its sequence's cache */
static void qk_rope_store(hm_ctx *c, int i, void *arg) {
    const qk_arg *a = arg;
    const hm_hparams *hp = &c->m->hp;
    const int hd = (int)hp->head_dim, nh = (int)hp->n_heads, nkv = (int)hp->n_kv_heads;
    float *q = c->q + (size_t)i * c->q_dim, *k = c->k + (size_t)i * c->kv_dim;
    const float *v = c->v + (size_t)i * c->kv_dim;
    if (a->L->q_norm) {
        for (int h = 0; h < nh; h++)
            hm_rmsnorm(q + (size_t)h * hd, a->L->q_norm, q + (size_t)h * hd, hd, hp->norm_eps);
        for (int h = 0; h < nkv; h++)
            hm_rmsnorm(k + (size_t)h * hd, a->L->k_norm, k + (size_t)h * hd, hd, hp->norm_eps);
    }
    const float *cs = c->rope_cs + (size_t)i * hp->rope_dim;
    hm_rope_neox(q, nh, hd, (int)hp->rope_dim, cs);
    hm_rope_neox(k, nkv, hd, (int)hp->rope_dim, cs);
    hm_nn_kv_store(hm_ctx_kv_k(c, a->il, c->seq[i]), hm_ctx_kv_v(c, a->il, c->seq[i]),
                   c->kv_elem == 2, c->kv_ctx * (size_t)hd, nkv, hd, c->pos[i], k, v);
}

/* The same per head, inside the q/k/v job (decode batches): each head's q or k norm and rotation
 * as soon as its rows are done, and a kv head's K and V stored by whichever of its two matrices
 * finishes second. */
typedef struct qkv_ep {
    hm_ctx *c;
    const hm_layer *L;
    int il, n;
    atomic_int kv_arrived[256]; /* per kv head: its k and v rows done (0, 1, 2) */
} qkv_ep;

static void qkv_head_done(void *arg, int m, int h) {
    qkv_ep *e = arg;
    hm_ctx *c = e->c;
    const hm_hparams *hp = &c->m->hp;
    const int hd = (int)hp->head_dim;
    for (int i = 0; i < e->n && m < 2; i++) { /* q (m 0) or k (m 1) head h of every token */
        float *x = m == 0 ? c->q + (size_t)i * c->q_dim + (size_t)h * hd
                          : c->k + (size_t)i * c->kv_dim + (size_t)h * hd;
        const float *nw = m == 0 ? e->L->q_norm : e->L->k_norm;
        if (nw) hm_rmsnorm(x, nw, x, hd, hp->norm_eps);
        hm_rope_neox(x, 1, hd, (int)hp->rope_dim, c->rope_cs + (size_t)i * hp->rope_dim);
    }
    if (m == 0 || atomic_fetch_add_explicit(&e->kv_arrived[h], 1, memory_order_acq_rel) != 1)
        return;
    const size_t off = (size_t)h * c->kv_ctx * (size_t)hd * c->kv_elem; /* head h of a cache */
    for (int i = 0; i < e->n; i++)
        hm_nn_kv_store((uint8_t *)hm_ctx_kv_k(c, e->il, c->seq[i]) + off,
                       (uint8_t *)hm_ctx_kv_v(c, e->il, c->seq[i]) + off, c->kv_elem == 2,
                       c->kv_ctx * (size_t)hd, 1, hd, c->pos[i],
                       c->k + (size_t)i * c->kv_dim + (size_t)h * hd,
                       c->v + (size_t)i * c->kv_dim + (size_t)h * hd);
}

/* x += tmp, then xn = rmsnorm(x) * w (w: arg): the residual add and the next norm in one pass */
static void add_norm(hm_ctx *c, int i, void *arg) {
    const float *w = arg;
    const size_t H = c->m->hp.hidden;
    float *x = c->x + (size_t)i * H;
    const float *t = c->tmp + (size_t)i * H;
    for (size_t d = 0; d < H; d++) x[d] += t[d];
    hm_rmsnorm(x, w, c->xn + (size_t)i * H, (int64_t)H, c->m->hp.norm_eps);
}

static void add_tmp(hm_ctx *c, int i, void *arg) {
    (void)arg;
    const size_t H = c->m->hp.hidden;
    float *x = c->x + (size_t)i * H;
    const float *t = c->tmp + (size_t)i * H;
    for (size_t d = 0; d < H; d++) x[d] += t[d];
}

static void silu_gu(hm_ctx *c, int i, void *arg) {
    const size_t F = *(const size_t *)arg;
    hm_silu_mul(c->g + (size_t)i * F, c->u + (size_t)i * F, (int64_t)F);
}

/* softmax top-k routing of one token (the tokens of a batch in parallel on the pool, not on the
 * calling thread alone); a failure is kept for the caller */
typedef struct route_arg {
    int E, k;
    bool renorm;
    _Atomic int failed; /* hm_status of the first failure, 0 when none */
} route_arg;

static void route_tok(hm_ctx *c, int i, void *arg) {
    route_arg *r = arg;
    hm_status st = hm_router_softmax_topk(c->rl + (size_t)i * (size_t)r->E, r->E, r->k, r->renorm,
                                          c->ids + (size_t)i * r->k, c->w + (size_t)i * r->k);
    int none = 0;
    if (st) atomic_compare_exchange_strong(&r->failed, &none, (int)st);
}

hm_status hm_qwen3moe_block(hm_ctx *c, int il, int n) {
    const hm_hparams *hp = &c->m->hp;
    const hm_layer *L = &c->layers[il];
    const size_t H = hp->hidden;

    uint64_t t0 = hm_time_ns();
    /* attention (the previous block may have left xn = attn_norm(x) already) */
    if (!c->xn_ready) hm_ctx_for_tokens(c, n, norm_attn, (void *)L);
    c->xn_ready = false;
    hm_ctx_prof(c, HM_PROF_NORM, &t0);
    const hm_matrix *qkv[3] = {&L->wq, &L->wk, &L->wv};
    float *const qkv_y[3] = {c->q, c->k, c->v};
    const size_t qkv_s[3] = {c->q_dim, c->kv_dim, c->kv_dim};
    const hm_matrix *wo = &L->wo;
    hm_ctx_prefetch(c, &wo, 1, n); /* o_proj's rows, while q/k/v finish */
    if (n <= 4 && hp->n_kv_heads <= 256) {
        /* decode: norms, rope and the cache store per head inside the job */
        qkv_ep e = {.c = c, .L = L, .il = il, .n = n};
        for (uint32_t h = 0; h < hp->n_kv_heads; h++) atomic_init(&e.kv_arrived[h], 0);
        const hm_nn_epilogue ep = {(int)hp->head_dim, qkv_head_done, &e};
        hm_nn_matmul_multi_ep(c->pool, qkv, 3, c->xn, hp->hidden, n, qkv_y, qkv_s, c->mm_scratch,
                              hm_ctx_mm_flags(c), &ep);
        hm_ctx_prof(c, HM_PROF_ATTN_PROJ, &t0);
    } else {
        hm_nn_matmul_multi(c->pool, qkv, 3, c->xn, hp->hidden, n, qkv_y, qkv_s, c->mm_scratch,
                           hm_ctx_mm_flags(c));
        hm_ctx_prof(c, HM_PROF_ATTN_PROJ, &t0);
        qk_arg qa = {L, il};
        hm_ctx_for_tokens(c, n, qk_rope_store, &qa);
    }
    for (int i = 0; i < n; i++) {
        c->kvv[i].k = hm_ctx_kv_k(c, il, c->seq[i]);
        c->kvv[i].v = hm_ctx_kv_v(c, il, c->seq[i]);
    }
    hm_nn_attn a = {.n_tok = n,
                    .n_heads = (int)hp->n_heads,
                    .n_kv_heads = (int)hp->n_kv_heads,
                    .head_dim = (int)hp->head_dim,
                    .scale = 1.0f / sqrtf((float)hp->head_dim),
                    .q = c->q,
                    .q_stride = c->q_dim,
                    .kv = c->kvv,
                    .kv_head_stride = c->kv_ctx * hp->head_dim,
                    .kv_f16 = c->kv_elem == 2,
                    .pos = c->pos,
                    .out = c->att,
                    .out_stride = c->q_dim,
                    .scratch = c->attn_scratch,
                    .max_ctx = c->p.n_ctx};
    hm_ctx_prefetch(c, &wo, 1, n); /* and on after attention (steps already in L2 are cheap) */
    hm_nn_attention(c->pool, &a);
    hm_ctx_prof(c, HM_PROF_ATTN, &t0);
    if (L->moe) {
        const hm_matrix *r = &L->router;
        hm_ctx_prefetch(c, &r, 1, n);
    } else {
        const hm_matrix *g = &L->ffn_gate;
        hm_ctx_prefetch(c, &g, 1, n); /* gate: the first of its two jobs */
    }
    hm_ctx_matmul(c, &L->wo, c->att, n, c->tmp);
    hm_ctx_prof(c, HM_PROF_ATTN_PROJ, &t0);

    /* feed-forward */
    hm_ctx_for_tokens(c, n, add_norm, (void *)L->ffn_norm);
    hm_ctx_prof(c, HM_PROF_NORM, &t0);
    if (L->moe) {
        const int E = (int)hp->n_experts, k = (int)hp->n_experts_used;
        hm_ctx_matmul(c, &L->router, c->xn, n, c->rl);
        route_arg ra = {E, k, hp->norm_topk_prob, 0};
        hm_ctx_for_tokens(c, n, route_tok, &ra);
        if (atomic_load(&ra.failed))
            return hm_errorf((hm_status)atomic_load(&ra.failed), "layer %d router: top-%d of %d",
                             il, k, E);
        hm_ctx_route_stats(c, n, k, E);
        hm_ctx_prof(c, HM_PROF_ROUTER, &t0);
        if ((uint32_t)il + 1 < hp->n_layers) { /* the next block's q/k/v while experts finish */
            const hm_layer *N = &c->layers[il + 1];
            const hm_matrix *nq[3] = {&N->wq, &N->wk, &N->wv};
            hm_ctx_prefetch(c, nq, 3, n);
        }
        hm_status st = hm_moe_submit(c->moe[il], c->xn, HM_MOE_F32, c->ids, c->w, n, k, c->tmp,
                                     HM_MOE_F32, false);
        if (st) return st;
        hm_moe_wait(c->moe[il]);
        hm_ctx_prof(c, HM_PROF_MOE, &t0);
    } else {
        size_t F = hp->ffn_inter;
        hm_ctx_matmul(c, &L->ffn_gate, c->xn, n, c->g);
        hm_ctx_matmul(c, &L->ffn_up, c->xn, n, c->u);
        hm_ctx_for_tokens(c, n, silu_gu, &F);
        hm_ctx_matmul(c, &L->ffn_down, c->g, n, c->tmp);
        hm_ctx_prof(c, HM_PROF_DENSE, &t0);
    }
    (void)H;
    if ((uint32_t)il + 1 < hp->n_layers) { /* and the next block's attention norm */
        hm_ctx_for_tokens(c, n, add_norm, (void *)c->m->layers[il + 1].attn_norm);
        c->xn_ready = true;
    } else {
        hm_ctx_for_tokens(c, n, add_tmp, NULL);
    }
    hm_ctx_prof(c, HM_PROF_NORM, &t0);
    return HM_OK;
}
