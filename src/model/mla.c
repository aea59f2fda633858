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
#include "core/pool.h"
#include "model/ctx_int.h"
#include "model/graph.h"
#include "quant/fp16.h"

/* the CPU kernel table's vector loops (each variant's, or plain C's where it has none) */
typedef struct mla_ops {
    hm_vec_dot_fn dot;    /* float . float */
    hm_vec_dot_n_fn dotn; /* one float row . up to 4 float vectors (NULL: dot per vector) */
    void (*axpy)(int64_t n, float a, const float *x, float *y);
    void (*gemv_t_h)(int64_t rows, int64_t cols, const float *x, const uint16_t *w, bool bf16,
                     float *y);
    void (*scale)(int64_t n, float a, float *x);
    void (*f16)(int64_t n, const uint16_t *x, float *y);
    void (*pv)(const float *p, size_t p_stride, int nq, const float *v, int hd, float *o,
               size_t o_stride);
} mla_ops;

typedef struct mla_job {
    hm_ctx *c;
    const hm_layer *L;
    int il, n;
    float scale;
    size_t scratch; /* floats per participant */
    mla_ops ops;
    hm_vec_dot_fn kdot, vdot; /* the quantized k_bq / v_bq's kernels (NULL: the copies) */
    int group;                /* heads an item takes (1..MLA_GROUP) */
} mla_job;

/* the most heads an item takes, and the positions a block holds (mla_attend) */
#define MLA_GROUP 16
#define MLA_BLOCK 16

/* Floats of a participant's scratch: per head of a group its joined query and its latent output
 * (kv_dim each: a whole block's weighted rows are summed over the full row, whose rotary tail is
 * not used) and a block's scores, a block of cache rows in floats, and an activation converted
 * for k_bq / v_bq (at most kv_lora + 64 floats' bytes for every activation type of a whole
 * number of blocks; checked in hm_ctx_run_mla) */
size_t hm_mla_scratch_floats(const hm_hparams *hp, size_t kv_dim) {
    return MLA_GROUP * (2 * kv_dim + MLA_BLOCK) + MLA_BLOCK * kv_dim + (size_t)hp->kv_lora_rank +
           128;
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
    return (mla_ops){o->vec_dot[HM_TYPE_F32] ? o->vec_dot[HM_TYPE_F32] : r->vec_dot[HM_TYPE_F32],
                     o->vec_dot[HM_TYPE_F32] ? o->vec_dot_n[HM_TYPE_F32] : NULL,
                     o->axpy_f32 ? o->axpy_f32 : r->axpy_f32,
                     o->gemv_t_h ? o->gemv_t_h : r->gemv_t_h,
                     o->scale_f32 ? o->scale_f32 : r->scale_f32,
                     o->f16_to_f32 ? o->f16_to_f32 : r->f16_to_f32,
                     o->pv_block16 ? o->pv_block16 : r->pv_block16};
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

/* y[rows] = head h's rows of m (the file's quantized attn_k_b or attn_v_b, rows per head) times
 * x, converted into xq for m's kernels (whole blocks: bind_mla_quant) */
static void head_product(const hm_matrix *m, hm_vec_dot_fn dot, int h, int rows, const float *x,
                         void *xq, float *y) {
    hm_matrix v = *m;
    v.data = (const uint8_t *)m->data + (size_t)h * (size_t)rows * m->row_bytes, v.rows = rows;
    (void)hm_act_convert(m->type, x, xq, m->cols);
    hm_matvec_rows(dot, NULL, NULL, &v, xq, 0, 1, y, 0, 0, rows);
}

/* Items are (token, group of up to `group` heads): ith, ith + nth, ... Each head's query is
 * absorbed into the latent and joined by its rotary part (qcat: [head][kv_dim], the cache row's
 * layout), then the group walks the token's positions in blocks of MLA_BLOCK: each cache row is
 * read (converted once when it is in halves) for all the group's heads while it is in L1, and
 * each head's online softmax rescales at most once a block. Then each head's value V_h o_c. */
static void mla_attend(int ith, int nth, void *arg) {
    const mla_job *j = arg;
    hm_ctx *c = j->c;
    const mla_ops *op = &j->ops;
    const hm_hparams *hp = &c->m->hp;
    const int kvl = (int)hp->kv_lora_rank, rope = (int)hp->qk_rope_head_dim;
    const int nh = (int)hp->n_heads, hd = (int)hp->head_dim, nope = (int)hp->qk_nope_head_dim;
    const int vd = (int)hp->v_head_dim, G = j->group, ng = (nh + G - 1) / G;
    const size_t kd = c->kv_dim, row_bytes = kd * c->kv_elem;
    float *qcat = c->mla_scratch + (size_t)ith * j->scratch, *oc = qcat + (size_t)MLA_GROUP * kd,
          *sc = oc + (size_t)MLA_GROUP * kd, *tmp = sc + MLA_GROUP * MLA_BLOCK,
          *xq = tmp + (size_t)MLA_BLOCK * kd;
    float mx[MLA_GROUP];
    double sum[MLA_GROUP];
    const void *qv[MLA_GROUP]; /* the group's joined queries */
    for (int g = 0; g < MLA_GROUP; g++) qv[g] = qcat + (size_t)g * kd;
    const hm_matrix *kq = &j->L->k_bq, *vq = &j->L->v_bq;
    const uint32_t kt = j->L->k_b_type, vt = j->L->v_b_type;
    for (int item = ith; item < j->n * ng; item += nth) {
        const int t = item / ng, h0 = item % ng * G, nh_g = nh - h0 < G ? nh - h0 : G;
        for (int g = 0; g < nh_g; g++) {
            const int h = h0 + g;
            const float *q = c->q + (size_t)t * c->q_dim + (size_t)h * hd;
            float *qc = qcat + (size_t)g * kd;
            /* the absorbed query: q_nope . K_h (row r of the file's head is K_h's column r) */
            if (j->kdot) {
                head_product(kq, j->kdot, h, kvl, q, xq, qc);
            } else {
                rows_product(op, j->L->k_b, kt, (size_t)h * nope * kvl, nope, kvl, q, qc);
            }
            memcpy(qc + kvl, q + nope, sizeof(float) * (size_t)rope);
            mx[g] = -INFINITY, sum[g] = 0.0;
            memset(oc + (size_t)g * kd, 0, sizeof(float) * kd);
        }
        const uint8_t *base = hm_ctx_kv_k(c, j->il, c->seq[t]);
        const int np = c->pos[t] + 1;
        for (int p0 = 0; p0 < np; p0 += MLA_BLOCK) {
            const int nb = np - p0 < MLA_BLOCK ? np - p0 : MLA_BLOCK;
            const float *row[MLA_BLOCK];
            /* each row's scores for the group's heads, four heads a load of the row (dotn: the
             * same bits as dot's) */
            for (int b = 0; b < nb; b++) {
                row[b] =
                    cache_row(c, op, base + (size_t)(p0 + b) * row_bytes, tmp + (size_t)b * kd);
                float d[MLA_GROUP];
                hm_dot_rows(op->dot, op->dotn, (int64_t)kd, row[b], qv, nh_g, d);
                for (int g = 0; g < nh_g; g++) sc[g * MLA_BLOCK + b] = d[g] * j->scale;
            }
            for (int g = 0; g < nh_g; g++) {
                float *s = sc + g * MLA_BLOCK, *o = oc + (size_t)g * kd, bm = -INFINITY;
                for (int b = 0; b < nb; b++) bm = s[b] > bm ? s[b] : bm;
                if (bm > mx[g]) { /* a new maximum: what was summed is rescaled to it */
                    const float r = expf(mx[g] - bm);
                    sum[g] *= r;
                    op->scale(kvl, r, o);
                    mx[g] = bm;
                }
                for (int b = 0; b < nb; b++) { /* the block's weights, in s */
                    s[b] = expf(s[b] - mx[g]);
                    sum[g] += s[b];
                    if (nb < MLA_BLOCK) op->axpy(kvl, s[b], row[b], o);
                }
            }
            /* a whole block: its 16 rows lie one after another (the cache's, or tmp's), and
             * every head's weighted sum of them is one call with the accumulators in registers */
            if (nb == MLA_BLOCK) op->pv(sc, MLA_BLOCK, nh_g, row[0], (int)kd, oc, kd);
        }
        for (int g = 0; g < nh_g; g++) {
            const int h = h0 + g;
            float *o = oc + (size_t)g * kd;
            op->scale(kvl, (float)(1.0 / sum[g]), o);
            float *out = c->att + (size_t)t * nh * vd + (size_t)h * vd; /* wo's rows: heads x v */
            /* the head's value: V_h o_c */
            if (j->vdot) {
                head_product(vq, j->vdot, h, vd, o, xq, out);
            } else {
                rows_product(op, j->L->v_b, vt, (size_t)h * kvl * vd, kvl, vd, o, out);
            }
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
    /* heads per item: as many as leave every thread an item (decode on 2 threads: 8 heads read
     * each cache row once, where each head read it alone), at most MLA_GROUP */
    const int nth = hm_pool_size(c->pool);
    const long per = (long)hp->n_heads * n / (nth > 0 ? nth : 1);
    mla_job j = {c,
                 L,
                 nd->il,
                 n,
                 scale,
                 hm_mla_scratch_floats(hp, c->kv_dim),
                 mla_ops_get(),
                 NULL,
                 NULL,
                 per < 1           ? 1
                 : per > MLA_GROUP ? MLA_GROUP
                                   : (int)per};
    /* the quantized split tensors where the model keeps no copies of them (model.c binds them
     * only where they fit hm_mla_act_room and have kernels, and keeps the copies beside them only
     * under HMOE_MLA_QUANT=0, whose A/B then takes the copies) */
    if (!L->k_b && L->k_bq.rows && L->v_bq.rows) {
        const hm_cpu_ops *o = hm_cpu_ops_or_ref();
        j.kdot = hm_vec_dot_for(o, L->k_bq.type);
        j.vdot = hm_vec_dot_for(o, L->v_bq.type);
        if (!j.kdot || !j.vdot) j.kdot = j.vdot = NULL;
    }
    if (!j.kdot && !L->k_b)
        return hm_errorf(HM_ERR_INTERNAL,
                         "mla: layer %d has neither kernels for its split "
                         "attn_k_b / attn_v_b nor their copies",
                         nd->il);
    hm_ctx_for_tokens(c, n, mla_store, &j); /* every token's cache row before any attends */
    hm_pool_run(c->pool, mla_attend, &j);
    return HM_OK;
}
