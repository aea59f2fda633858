/* mla.c - the CPU backend's multi-head latent attention (HM_OP_MLA: DeepSeek-V2/V3, Kimi-K2)
 * over the compressed cache.
 *
 * Per token the cache holds c = rms(kv_a[0, kv_lora)) * kv_a_norm and k_pe = rope(kv_a[kv_lora,
 * + rope)), kv_lora + rope floats shared by every head (576 for DeepSeek-V3 instead of 128 heads
 * x 2 x 128). The keys and values are never expanded: head h's score of position p is
 *     (q_nope . K_h c_p + q_pe . k_pe_p) * scale = ((K_h^T q_nope) . c_p + q_pe . k_pe_p) * scale
 * so q_nope is absorbed into the latent once per token and head (k_b[h] is K_h^T), the weighted
 * sum of the latents o_c = sum_p a_p c_p is formed, and the head's output is V_h o_c (v_b[h]).
 * transformers expands K and V instead (DeepseekV3Attention.expand_kv); the two agree to float
 * rounding. scale = qk_head_dim^-0.5, times mscale^2 under YaRN with mscale_all_dim. The rotary
 * dimensions are interleaved pairs (transformers' rope_interleave, llama.cpp's deepseek2). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/matvec.h"
#include "cpu/ops.h"
#include "model/ctx_int.h"
#include "model/graph.h"
#include "quant/fp16.h"

/* the CPU kernel table's vector loops (each variant's, or plain C's where it has none) */
typedef struct mla_ops {
    hm_vec_dot_fn dot; /* float . float */
    void (*axpy)(int64_t n, float a, const float *x, float *y);
    void (*gemv_t_h)(int64_t rows, int64_t cols, const float *x, const uint16_t *w, bool bf16,
                     float *y);
    void (*scale)(int64_t n, float a, float *x);
    void (*f16)(int64_t n, const uint16_t *x, float *y);
} mla_ops;

typedef struct mla_job {
    hm_ctx *c;
    const hm_layer *L;
    int il, n;
    float scale;
    size_t scratch; /* floats per participant */
    mla_ops ops;
    hm_vec_dot_fn kdot, vdot; /* the quantized k_bq / v_bq's kernels (NULL: the copies) */
} mla_job;

/* Floats of a participant's scratch: the absorbed q and the latent output (kv_lora each), a
 * cache row in floats, and an activation converted for k_bq / v_bq (at most kv_lora floats' bytes
 * for every activation type of a whole number of blocks; checked in hm_ctx_run_mla) */
size_t hm_mla_scratch_floats(const hm_hparams *hp, size_t kv_dim) {
    return 3 * (size_t)hp->kv_lora_rank + kv_dim + 128;
}

/* token i: the latent normed, both rotary parts rotated, [c, k_pe] into the cache */
static void mla_store(hm_ctx *c, int i, void *arg) {
    const mla_job *j = arg;
    const hm_hparams *hp = &c->m->hp;
    const int kvl = (int)hp->kv_lora_rank, rope = (int)hp->qk_rope_head_dim;
    const int nh = (int)hp->n_heads, hd = (int)hp->head_dim, nope = (int)hp->qk_nope_head_dim;
    float *kv = c->k + (size_t)i * c->kv_dim;
    const float *cs = c->rope_cs + (size_t)i * hp->rope_dim;
    hm_rmsnorm(kv, j->L->kv_a_norm, kv, kvl, hp->norm_eps);
    hm_rope(true, kv + kvl, 1, rope, rope, cs);
    float *q = c->q + (size_t)i * c->q_dim;
    for (int h = 0; h < nh; h++) hm_rope(true, q + (size_t)h * hd + nope, 1, rope, rope, cs);
    uint8_t *dst =
        (uint8_t *)hm_ctx_kv_k(c, j->il, c->seq[i]) + (size_t)c->pos[i] * c->kv_dim * c->kv_elem;
    if (c->kv_elem == 4) {
        memcpy(dst, kv, sizeof(float) * c->kv_dim);
    } else {
        uint16_t *h16 = (uint16_t *)dst;
        for (size_t d = 0; d < c->kv_dim; d++) h16[d] = hm_f32_to_f16(kv[d]);
    }
}

static mla_ops mla_ops_get(void) {
    const hm_cpu_ops *o = NULL, *r = &hm_ops_ref;
    if (hm_cpu_ops_get(&o) != HM_OK) o = r;
    return (mla_ops){
        o->vec_dot[HM_TYPE_F32] ? o->vec_dot[HM_TYPE_F32] : r->vec_dot[HM_TYPE_F32],
        o->axpy_f32 ? o->axpy_f32 : r->axpy_f32, o->gemv_t_h ? o->gemv_t_h : r->gemv_t_h,
        o->scale_f32 ? o->scale_f32 : r->scale_f32, o->f16_to_f32 ? o->f16_to_f32 : r->f16_to_f32};
}

/* a cache row as floats: the row itself, or converted into tmp */
static const float *cache_row(const hm_ctx *c, const mla_ops *op, const uint8_t *row, float *tmp) {
    if (c->kv_elem == 4) return (const float *)row;
    op->f16((int64_t)c->kv_dim, (const uint16_t *)row, tmp);
    return tmp;
}

/* y[cols] = x[rows] . W, W the rows x cols block of the model's copy of k_b or v_b (type t,
 * model.h) that starts at element i */
static void rows_product(const mla_ops *op, const void *base, uint32_t t, size_t i, int rows,
                         int cols, const float *x, float *y) {
    if (t != HM_TYPE_F32) {
        op->gemv_t_h(rows, cols, x, (const uint16_t *)base + i, t == HM_TYPE_BF16, y);
        return;
    }
    const float *w = (const float *)base + i;
    for (int c = 0; c < cols; c++) y[c] = 0.0f;
    for (int r = 0; r < rows; r++) op->axpy(cols, x[r], w + (size_t)r * cols, y);
}

/* participant ith of nth: (token, head) items ith, ith + nth, ... */
static void mla_attend(int ith, int nth, void *arg) {
    const mla_job *j = arg;
    hm_ctx *c = j->c;
    const mla_ops *op = &j->ops;
    const hm_hparams *hp = &c->m->hp;
    const int kvl = (int)hp->kv_lora_rank, rope = (int)hp->qk_rope_head_dim;
    const int nh = (int)hp->n_heads, hd = (int)hp->head_dim, nope = (int)hp->qk_nope_head_dim;
    const int vd = (int)hp->v_head_dim;
    float *qc = c->mla_scratch + (size_t)ith * j->scratch, *oc = qc + kvl, *tmp = oc + kvl,
          *xq = tmp + c->kv_dim + 64;
    const hm_matrix *kq = &j->L->k_bq, *vq = &j->L->v_bq;
    const size_t row_bytes = c->kv_dim * c->kv_elem;
    for (int item = ith; item < j->n * nh; item += nth) {
        const int t = item / nh, h = item % nh;
        const float *q = c->q + (size_t)t * c->q_dim + (size_t)h * hd, *qpe = q + nope;
        const uint32_t kt = j->L->k_b_type, vt = j->L->v_b_type;
        /* the absorbed query: q_nope . K_h (row r of the file's head is K_h's column r) */
        if (j->kdot) {
            (void)hm_act_convert(kq->type, q, xq, nope); /* whole blocks: bind_mla_quant */
            const uint8_t *w = (const uint8_t *)kq->data + (size_t)h * kvl * kq->row_bytes;
            for (int r = 0; r < kvl; r++) qc[r] = j->kdot(nope, w + (size_t)r * kq->row_bytes, xq);
        } else {
            rows_product(op, j->L->k_b, kt, (size_t)h * nope * kvl, nope, kvl, q, qc);
        }
        /* one pass over the positions with an online softmax: each cache row (converted once
         * when it is in halves) gives its score and its share of the weighted latent */
        const uint8_t *base = hm_ctx_kv_k(c, j->il, c->seq[t]);
        const int np = c->pos[t] + 1;
        float mx = -INFINITY;
        double sum = 0.0;
        for (int a = 0; a < kvl; a++) oc[a] = 0.0f;
        for (int p = 0; p < np; p++) {
            const float *row = cache_row(c, op, base + (size_t)p * row_bytes, tmp);
            const float s = (op->dot(kvl, row, qc) + op->dot(rope, row + kvl, qpe)) * j->scale;
            if (s > mx) { /* a new maximum: what was summed is rescaled to it */
                const float r = expf(mx - s);
                sum *= r;
                op->scale(kvl, r, oc);
                mx = s;
            }
            const float wp = expf(s - mx);
            sum += wp;
            op->axpy(kvl, wp, row, oc);
        }
        op->scale(kvl, (float)(1.0 / sum), oc);
        float *out = c->att + (size_t)t * nh * vd + (size_t)h * vd; /* wo's rows: heads x v */
        /* the head's value: V_h o_c */
        if (j->vdot) {
            (void)hm_act_convert(vq->type, oc, xq, kvl);
            const uint8_t *w = (const uint8_t *)vq->data + (size_t)h * vd * vq->row_bytes;
            for (int d = 0; d < vd; d++) out[d] = j->vdot(kvl, w + (size_t)d * vq->row_bytes, xq);
        } else {
            rows_product(op, j->L->v_b, vt, (size_t)h * kvl * vd, kvl, vd, oc, out);
        }
    }
}

static void qa_norm(hm_ctx *c, int i, void *arg) {
    const hm_layer *L = arg;
    const int64_t ql = c->m->hp.q_lora_rank;
    float *x = c->qa + (size_t)i * (size_t)ql;
    hm_rmsnorm(x, L->q_a_norm, x, ql, c->m->hp.norm_eps);
}

float hm_mla_scale(const hm_hparams *hp) {
    float scale = 1.0f / sqrtf((float)hp->head_dim);
    if (hp->rope_type == HM_ROPE_YARN && hp->yarn_mscale_all_dim > 0 && hp->rope_factor > 1) {
        const float ms = 0.1f * hp->yarn_mscale_all_dim * logf(hp->rope_factor) + 1.0f;
        scale *= ms * ms;
    }
    return scale;
}

hm_status hm_ctx_run_mla(hm_ctx *c, const hm_node *nd, int n) {
    const hm_hparams *hp = &c->m->hp;
    const hm_layer *L = &c->layers[nd->il];
    const float *xn = c->xn;
    if (hp->q_lora_rank) {
        hm_ctx_matmul(c, &L->wq_a, xn, n, c->qa);
        hm_ctx_for_tokens(c, n, qa_norm, (void *)L);
        hm_ctx_matmul(c, &L->wq_b, c->qa, n, c->q);
    } else {
        hm_ctx_matmul(c, &L->wq, xn, n, c->q);
    }
    hm_ctx_matmul(c, &L->wkv_a, xn, n, c->k);
    const float scale = hm_mla_scale(hp);
    mla_job j = {c,    L,   nd->il, n, scale, hm_mla_scratch_floats(hp, c->kv_dim), mla_ops_get(),
                 NULL, NULL};
    static int off = -1; /* HMOE_MLA_QUANT=0: the copies always (A/B), read once */
    if (off < 0) {
        const char *e = getenv("HMOE_MLA_QUANT");
        off = e && !strcmp(e, "0");
    }
    if (!off && L->k_bq.rows && L->v_bq.rows) { /* the quantized split tensors, where they fit */
        const size_t room = sizeof(float) * (size_t)(hp->kv_lora_rank + 64);
        const hm_cpu_ops *o = hm_cpu_ops_or_ref();
        if (hm_act_bytes(L->k_bq.type, hp->qk_nope_head_dim) <= room &&
            hm_act_bytes(L->v_bq.type, hp->kv_lora_rank) <= room) {
            j.kdot = hm_vec_dot_for(o, L->k_bq.type);
            j.vdot = hm_vec_dot_for(o, L->v_bq.type);
            if (!j.kdot || !j.vdot) j.kdot = j.vdot = NULL;
        }
    }
    hm_ctx_for_tokens(c, n, mla_store, &j); /* every token's cache row before any attends */
    hm_pool_run(c->pool, mla_attend, &j);
    return HM_OK;
}
