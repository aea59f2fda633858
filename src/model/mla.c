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
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/matvec.h"
#include "cpu/ops.h"
#include "core/pool.h"
#include "core/timer.h"
#include "model/ctx_int.h"
#include "model/graph.h"
#include "quant/fp16.h"

/* the CPU kernel table's vector loops (each variant's, or plain C's where it has none) */
typedef struct mla_ops {
    void (*qk)(const float *q, size_t q_stride, int nq, const float *k, size_t k_stride, int nk,
               int hd, float scale, float *s, size_t s_stride);
    float (*max)(int64_t n, const float *x);
    float (*expsum)(int64_t n, float *x, float m);
    void (*axpy)(int64_t n, float a, const float *x, float *y);
    void (*gemv_t_h)(int64_t rows, int64_t cols, const float *x, const uint16_t *w, bool bf16,
                     float *y);
    void (*scale)(int64_t n, float a, float *x);
    void (*f16)(int64_t n, const uint16_t *x, float *y);
    void (*pv)(const float *p, size_t p_stride, int nq, const float *v, size_t v_stride, int hd,
               float *o, size_t o_stride);
} mla_ops;

typedef struct mla_job {
    hm_ctx *c;
    const hm_layer *L;
    int il, n;
    float scale;
    mla_ops ops;
    hm_vec_dot_fn kdot, vdot; /* the quantized k_bq / v_bq's kernels (NULL: the copies) */
    int group;                /* heads an item takes (1..MLA_GROUP) */
} mla_job;

/* the most heads an item takes, and the positions a block holds (mla_attend) */
#define MLA_GROUP 16
#define MLA_BLOCK 16
/* the fewest positions a decode span takes (mla_split) */
#define MLA_SPAN_MIN 32

/* Floats of a participant's scratch: per head of a group its joined query and its latent output
 * (kv_dim each; the output's rotary tail is not used) and a block's scores, a block of cache rows
 * in floats, and an activation converted for k_bq / v_bq (at most kv_lora + 64 floats' bytes for
 * every activation type of a whole number of blocks; checked in hm_ctx_run_mla) */
static size_t part_floats(const hm_hparams *hp, size_t kv_dim) {
    return MLA_GROUP * (2 * kv_dim + MLA_BLOCK) + MLA_BLOCK * kv_dim + (size_t)hp->kv_lora_rank +
           128;
}

/* The split decode's shared rows (mla_split): the absorbed queries of at most 8 nth (token,
 * head)s and the partial states of at most 16 nth (token, span, head)s, kv_dim floats each, and
 * the partials' maxima and sums. Split only where tokens x groups x 2 <= nth, so tokens x heads
 * <= 8 nth and tokens x spans x heads <= 16 nth. */
static size_t split_rows(int nth) {
    return (size_t)16 * (size_t)(nth > 0 ? nth : 1);
}

size_t hm_mla_scratch_floats(const hm_hparams *hp, size_t kv_dim, int nth) {
    const size_t r = split_rows(nth);
    return (size_t)(nth > 0 ? nth : 1) * part_floats(hp, kv_dim) + r / 2 * kv_dim + r * kv_dim +
           3 * r + 1;
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
    return (mla_ops){o->qk_rows16 ? o->qk_rows16 : r->qk_rows16,
                     o->max_f32 ? o->max_f32 : r->max_f32,
                     o->expsum_f32 ? o->expsum_f32 : r->expsum_f32,
                     o->axpy_f32 ? o->axpy_f32 : r->axpy_f32,
                     o->gemv_t_h ? o->gemv_t_h : r->gemv_t_h,
                     o->scale_f32 ? o->scale_f32 : r->scale_f32,
                     o->f16_to_f32 ? o->f16_to_f32 : r->f16_to_f32,
                     o->pv_block16 ? o->pv_block16 : r->pv_block16};
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

/* head h's rows of m (rows per head) as a matrix of its own; a whole matrix's int8 units (none
 * are made for k_bq / v_bq) would not serve it */
static hm_matrix head_view(const hm_matrix *m, int h, int rows) {
    hm_matrix v = *m;
    v.data = (const uint8_t *)m->data + (size_t)h * (size_t)rows * m->row_bytes, v.rows = rows;
    v.wpack = NULL;
    return v;
}

/* y[rows] = head h's rows of m (the file's quantized attn_k_b or attn_v_b, rows per head) times
 * x, converted into xq for m's kernels (whole blocks: bind_mla_quant) */
static void head_product(const hm_matrix *m, hm_vec_dot_fn dot, int h, int rows, const float *x,
                         void *xq, float *y) {
    const hm_matrix v = head_view(m, h, rows);
    (void)hm_act_convert(m->type, x, xq, m->cols);
    hm_matvec_rows(dot, NULL, NULL, &v, xq, 0, 1, y, 0, 0, rows);
}

/* qc[kv_dim] = head h of token t's query absorbed into the latent (q_nope . K_h: row r of the
 * file's head is K_h's column r) and joined by its rotary part: the cache row's layout */
static void absorb(const mla_job *j, int t, int h, float *qc, void *xq) {
    const hm_ctx *c = j->c;
    const hm_hparams *hp = &c->m->hp;
    const int kvl = (int)hp->kv_lora_rank, rope = (int)hp->qk_rope_head_dim;
    const int hd = (int)hp->head_dim, nope = (int)hp->qk_nope_head_dim;
    const float *q = c->q + (size_t)t * c->q_dim + (size_t)h * hd;
    if (j->kdot) {
        head_product(&j->L->k_bq, j->kdot, h, kvl, q, xq, qc);
    } else {
        rows_product(&j->ops, j->L->k_b, j->L->k_b_type, (size_t)h * nope * kvl, nope, kvl, q, qc);
    }
    memcpy(qc + kvl, q + nope, sizeof(float) * (size_t)rope);
}

/* head h of token t's output from its latent sum o (kv_lora floats, scaled here by 1/sum):
 * V_h o_c into att's row (wo's rows: heads x v) */
static void finish(const mla_job *j, int t, int h, float *o, double sum, void *xq) {
    const hm_ctx *c = j->c;
    const hm_hparams *hp = &c->m->hp;
    const int kvl = (int)hp->kv_lora_rank, nh = (int)hp->n_heads, vd = (int)hp->v_head_dim;
    j->ops.scale(kvl, (float)(1.0 / sum), o);
    float *out = c->att + (size_t)t * nh * vd + (size_t)h * vd;
    if (j->vdot) {
        head_product(&j->L->v_bq, j->vdot, h, vd, o, xq, out);
    } else {
        rows_product(&j->ops, j->L->v_b, j->L->v_b_type, (size_t)h * kvl * vd, kvl, vd, o, out);
    }
}

/* Token t's positions [p0, p1) for nq heads, whose joined queries start at q (kv_dim apart) and
 * whose unnormalized latent sums (oc + g kv_dim), maxima and sums go on from what they hold: a
 * block of MLA_BLOCK cache rows at a time (converted once when they are in halves), all the
 * heads' scores of the block in one call (tiles of rows x heads), each head's online softmax
 * rescaled at most once a block (its weights one vector exponential), and the block's weighted
 * latents summed for every head in one call. sc and tmp: a participant's block of scores and of
 * rows in floats. */
static void attend_span(const mla_job *j, int t, const float *q, int nq, int p0, int p1, float *oc,
                        float *mx, double *sum, float *sc, float *tmp) {
    hm_ctx *c = j->c;
    const mla_ops *op = &j->ops;
    const int kvl = (int)c->m->hp.kv_lora_rank;
    const size_t kd = c->kv_dim, row_bytes = kd * c->kv_elem;
    const uint8_t *base = hm_ctx_kv_k(c, j->il, c->seq[t]);
    for (int b0 = p0; b0 < p1; b0 += MLA_BLOCK) {
        const int nb = p1 - b0 < MLA_BLOCK ? p1 - b0 : MLA_BLOCK;
        const float *blk = (const float *)(base + (size_t)b0 * row_bytes);
        if (c->kv_elem != 4) {
            for (int b = 0; b < nb; b++)
                op->f16((int64_t)kd, (const uint16_t *)(base + (size_t)(b0 + b) * row_bytes),
                        tmp + (size_t)b * kd);
            blk = tmp;
        }
        op->qk(q, kd, nq, blk, kd, nb, (int)kd, j->scale, sc, MLA_BLOCK);
        for (int g = 0; g < nq; g++) {
            float *s = sc + g * MLA_BLOCK, *o = oc + (size_t)g * kd;
            const float bm = op->max(nb, s); /* NaNs skipped, at least -FLT_MAX */
            if (bm > mx[g]) {                /* a new maximum: what was summed is rescaled to it */
                const float r = expf(mx[g] - bm);
                sum[g] *= r;
                op->scale(kvl, r, o);
                mx[g] = bm;
            }
            sum[g] += op->expsum(nb, s, mx[g]); /* the block's weights, in s */
            if (nb < MLA_BLOCK)
                for (int b = 0; b < nb; b++) op->axpy(kvl, s[b], blk + (size_t)b * kd, o);
        }
        /* a whole block: every head's weighted sum of its latents (the rotary tails left out)
         * is one call with the accumulators in registers */
        if (nb == MLA_BLOCK) op->pv(sc, MLA_BLOCK, nq, blk, kd, kvl, oc, kd);
    }
}

/* a participant's scratch (part_floats) */
typedef struct mla_part {
    float *qcat, *oc, *sc, *tmp;
    void *xq;
} mla_part;

static mla_part part_of(const mla_job *j, int ith) {
    const size_t kd = j->c->kv_dim;
    mla_part p;
    p.qcat = j->c->mla_scratch + (size_t)ith * part_floats(&j->c->m->hp, kd);
    p.oc = p.qcat + (size_t)MLA_GROUP * kd;
    p.sc = p.oc + (size_t)MLA_GROUP * kd;
    p.tmp = p.sc + MLA_GROUP * MLA_BLOCK;
    p.xq = p.tmp + (size_t)MLA_BLOCK * kd;
    return p;
}

/* Items are (token, group of up to `group` heads): ith, ith + nth, ... The group's queries are
 * absorbed, walk all the token's positions, and become the heads' outputs. */
static void mla_attend(int ith, int nth, void *arg) {
    const mla_job *j = arg;
    const hm_ctx *c = j->c;
    const int nh = (int)c->m->hp.n_heads, G = j->group, ng = (nh + G - 1) / G;
    const size_t kd = c->kv_dim;
    const mla_part P = part_of(j, ith);
    float mx[MLA_GROUP];
    double sum[MLA_GROUP];
    for (int item = ith; item < j->n * ng; item += nth) {
        const int t = item / ng, h0 = item % ng * G, nh_g = nh - h0 < G ? nh - h0 : G;
        for (int g = 0; g < nh_g; g++) {
            absorb(j, t, h0 + g, P.qcat + (size_t)g * kd, P.xq);
            mx[g] = -INFINITY, sum[g] = 0.0;
        }
        memset(P.oc, 0, sizeof(float) * kd * (size_t)nh_g);
        attend_span(j, t, P.qcat, nh_g, 0, c->pos[t] + 1, P.oc, mx, sum, P.sc, P.tmp);
        for (int g = 0; g < nh_g; g++) finish(j, t, h0 + g, P.oc + (size_t)g * kd, sum[g], P.xq);
    }
}

/* The split decode (few tokens, many threads): the attention above read each token's cache once
 * per group of heads, so with a group of one head per thread every thread read a layer's whole
 * cache. Here (1) every (token, head)'s query is absorbed into the shared rows; (2) items
 * (token, span of positions, group of MLA_GROUP heads) each walk one span for the whole group
 * and leave each head's partial state (unnormalized latent sum, maximum, sum); (3) items (token,
 * head) merge the spans' states and form the output. A token whose positions fit one span gets
 * the bits of mla_attend's with a group of MLA_GROUP. */
typedef struct mla_split {
    const mla_job *j;
    int spans, ng;
    float *qabs, *po, *pm; /* [t][h] rows; [t][span][h] rows and maxima */
    double *pl;            /* [t][span][h] sums */
} mla_split;

static void split_absorb(int ith, int nth, void *arg) {
    const mla_split *s = arg;
    const int nh = (int)s->j->c->m->hp.n_heads;
    const mla_part P = part_of(s->j, ith);
    for (int item = ith; item < s->j->n * nh; item += nth)
        absorb(s->j, item / nh, item % nh, s->qabs + (size_t)item * s->j->c->kv_dim, P.xq);
}

/* token t's span length: its positions over the spans, at least MLA_SPAN_MIN. Not rounded to
 * whole blocks: 576 positions over 16 spans are 36 each on 16 threads, where spans of 48 left 4
 * threads idle and the rest a third longer; a span's last block may then be short (its weighted
 * sum row by row). */
static int span_len(const mla_split *s, int t) {
    const int np = s->j->c->pos[t] + 1;
    const int len = (np + s->spans - 1) / s->spans;
    return len < MLA_SPAN_MIN ? MLA_SPAN_MIN : len;
}

static void split_span(int ith, int nth, void *arg) {
    const mla_split *s = arg;
    const mla_job *j = s->j;
    const hm_ctx *c = j->c;
    const int nh = (int)c->m->hp.n_heads;
    const size_t kd = c->kv_dim;
    const mla_part P = part_of(j, ith);
    for (int item = ith; item < j->n * s->spans * s->ng; item += nth) {
        const int g0 = item % s->ng, ts = item / s->ng, t = ts / s->spans, sp = ts % s->spans;
        const int h0 = g0 * MLA_GROUP, nq = nh - h0 < MLA_GROUP ? nh - h0 : MLA_GROUP;
        const int len = span_len(s, t), np = c->pos[t] + 1, p0 = sp * len;
        const int p1 = p0 + len < np ? p0 + len : np;
        const size_t r0 = (size_t)ts * nh + h0; /* the group's first partial row */
        float mx[MLA_GROUP];
        double sum[MLA_GROUP];
        for (int g = 0; g < nq; g++) mx[g] = -INFINITY, sum[g] = 0.0;
        float *oc = s->po + r0 * kd;
        if (p0 < p1) {
            memset(oc, 0, sizeof(float) * kd * (size_t)nq);
            attend_span(j, t, s->qabs + ((size_t)t * nh + h0) * kd, nq, p0, p1, oc, mx, sum, P.sc,
                        P.tmp);
        }
        for (int g = 0; g < nq; g++) s->pm[r0 + g] = mx[g], s->pl[r0 + g] = sum[g];
    }
}

static void split_merge(int ith, int nth, void *arg) {
    const mla_split *s = arg;
    const mla_job *j = s->j;
    const hm_ctx *c = j->c;
    const int nh = (int)c->m->hp.n_heads, kvl = (int)c->m->hp.kv_lora_rank;
    const size_t kd = c->kv_dim;
    const mla_part P = part_of(j, ith);
    for (int item = ith; item < j->n * nh; item += nth) {
        const int t = item / nh, h = item % nh;
        float m = -INFINITY;
        for (int sp = 0; sp < s->spans; sp++) {
            const size_t r = ((size_t)t * s->spans + sp) * nh + h;
            if (s->pl[r] > 0 && s->pm[r] > m) m = s->pm[r];
        }
        double sum = 0.0;
        memset(P.oc, 0, sizeof(float) * (size_t)kvl);
        for (int sp = 0; sp < s->spans; sp++) {
            const size_t r = ((size_t)t * s->spans + sp) * nh + h;
            if (!(s->pl[r] > 0)) continue; /* an empty span (past the token's positions) */
            const float w = expf(s->pm[r] - m);
            sum += w * s->pl[r];
            j->ops.axpy(kvl, w, s->po + r * kd, P.oc);
        }
        finish(j, t, h, P.oc, sum, P.xq);
    }
}

/* The prompt (or any batch the spans do not take) with the quantized split k_bq / v_bq: the
 * absorption and the value products are per head matmuls over a chunk of tokens (tiles or AMX
 * from MLA_MM_MIN tokens on), where one token at a time multiplied each head's rows by one
 * vector. rows: [chunk][heads][kv_dim], each head's absorbed query, then its latent output; up
 * to 64 MB (DeepSeek-V3's 128 heads: 227 tokens a chunk), as each chunk costs two pool jobs a
 * head (locally faster than per-item products over the row kernels, even at 128 heads). */
#define MLA_MM_MIN      16
#define MLA_ROWS_FLOATS ((size_t)16 << 20)

static int chunk_tokens(const hm_hparams *hp, size_t kv_dim, int n_batch) {
    const size_t per = (size_t)hp->n_heads * kv_dim, fit = MLA_ROWS_FLOATS / (per ? per : 1);
    return fit < 1 ? 1 : fit < (size_t)n_batch ? (int)fit : n_batch;
}

size_t hm_mla_rows_floats(const hm_hparams *hp, size_t kv_dim, int n_batch) {
    return n_batch >= MLA_MM_MIN ? (size_t)chunk_tokens(hp, kv_dim, n_batch) * hp->n_heads * kv_dim
                                 : 1;
}

typedef struct mla_rows {
    const mla_job *j;
    int t0, m; /* the chunk's first token and its tokens */
    float *rows;
} mla_rows;

/* items (token of the chunk, group of MLA_GROUP heads): the rotary parts joined to the absorbed
 * queries, every position walked, each head's latent output normalized into its row */
static void rows_attend(int ith, int nth, void *arg) {
    const mla_rows *s = arg;
    const mla_job *j = s->j;
    const hm_ctx *c = j->c;
    const hm_hparams *hp = &c->m->hp;
    const int nh = (int)hp->n_heads, kvl = (int)hp->kv_lora_rank, hd = (int)hp->head_dim;
    const int nope = (int)hp->qk_nope_head_dim, rope = (int)hp->qk_rope_head_dim;
    const int ng = (nh + MLA_GROUP - 1) / MLA_GROUP;
    const size_t kd = c->kv_dim;
    const mla_part P = part_of(j, ith);
    for (int item = ith; item < s->m * ng; item += nth) {
        const int i = item / ng, t = s->t0 + i, h0 = item % ng * MLA_GROUP;
        const int nq = nh - h0 < MLA_GROUP ? nh - h0 : MLA_GROUP;
        float *r0 = s->rows + ((size_t)i * nh + h0) * kd;
        float mx[MLA_GROUP];
        double sum[MLA_GROUP];
        for (int g = 0; g < nq; g++) {
            const float *q = c->q + (size_t)t * c->q_dim + (size_t)(h0 + g) * hd;
            memcpy(r0 + (size_t)g * kd + kvl, q + nope, sizeof(float) * (size_t)rope);
            mx[g] = -INFINITY, sum[g] = 0.0;
        }
        memset(P.oc, 0, sizeof(float) * kd * (size_t)nq);
        attend_span(j, t, r0, nq, 0, c->pos[t] + 1, P.oc, mx, sum, P.sc, P.tmp);
        for (int g = 0; g < nq; g++) {
            float *o = P.oc + (size_t)g * kd;
            j->ops.scale(kvl, (float)(1.0 / sum[g]), o);
            memcpy(r0 + (size_t)g * kd, o, sizeof(float) * (size_t)kvl);
        }
    }
}

/* the time since *t booked to phase ph (hm_ctx_perf's mla_phase_s); *t is now */
static void mla_mark(hm_ctx *c, int ph, uint64_t *t) {
    const uint64_t now = hm_time_ns();
    c->mla_ns[ph] += now - *t;
    *t = now;
}

static void mla_by_rows(hm_ctx *c, const mla_job *j, uint64_t *t) {
    const hm_hparams *hp = &c->m->hp;
    const int nh = (int)hp->n_heads, kvl = (int)hp->kv_lora_rank, vd = (int)hp->v_head_dim;
    const int hd = (int)hp->head_dim, ch = chunk_tokens(hp, c->kv_dim, c->p.n_batch);
    const size_t kd = c->kv_dim, rs = (size_t)nh * kd;
    const unsigned flags = hm_ctx_mm_flags(c);
    for (int t0 = 0; t0 < j->n; t0 += ch) {
        mla_rows s = {j, t0, j->n - t0 < ch ? j->n - t0 : ch, c->mla_rows};
        for (int h = 0; h < nh; h++) { /* K_h^T q_nope for every token of the chunk */
            const hm_matrix k = head_view(&j->L->k_bq, h, kvl);
            hm_nn_matmul(c->pool, &k, c->q + (size_t)t0 * c->q_dim + (size_t)h * hd, c->q_dim, s.m,
                         s.rows + (size_t)h * kd, rs, c->mm_scratch, flags);
        }
        mla_mark(c, HM_MLA_ABSORB, t);
        hm_pool_run(c->pool, rows_attend, &s);
        mla_mark(c, HM_MLA_WALK, t);
        for (int h = 0; h < nh; h++) { /* V_h o_c into att's rows (heads x v) */
            const hm_matrix v = head_view(&j->L->v_bq, h, vd);
            hm_nn_matmul(c->pool, &v, s.rows + (size_t)h * kd, rs, s.m,
                         c->att + (size_t)t0 * nh * vd + (size_t)h * vd, (size_t)nh * vd,
                         c->mm_scratch, flags);
        }
        mla_mark(c, HM_MLA_VALUES, t);
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
    uint64_t t = hm_time_ns();
    /* the query's first matmul and kv_a, of the same input: one job */
    const hm_matrix *w[2] = {hp->q_lora_rank ? &L->wq_a : &L->wq, &L->wkv_a};
    float *const y[2] = {hp->q_lora_rank ? c->qa : c->q, c->k};
    const size_t ys[2] = {(size_t)w[0]->rows, (size_t)w[1]->rows};
    hm_nn_matmul_multi(c->pool, w, 2, c->xn, (size_t)hp->hidden, n, y, ys, c->mm_scratch,
                       hm_ctx_mm_flags(c));
    if (hp->q_lora_rank) {
        hm_ctx_for_tokens(c, n, qa_norm, (void *)L);
        hm_ctx_matmul(c, &L->wq_b, c->qa, n, c->q);
    }
    mla_mark(c, HM_MLA_PROJ, &t);
    const float scale = hm_mla_scale(hp);
    /* mla_attend's heads per item: as many as leave every thread an item, at most MLA_GROUP */
    const int nth = hm_pool_size(c->pool);
    const long per = (long)hp->n_heads * n / (nth > 0 ? nth : 1);
    mla_job j = {c,    L,     nd->il,
                 n,    scale, mla_ops_get(),
                 NULL, NULL,  per < 1 ? 1 : per > MLA_GROUP ? MLA_GROUP : (int)per};
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
    mla_mark(c, HM_MLA_STORE, &t);
    /* Spans where the (token, group of MLA_GROUP heads) items are at most half the threads
     * (decode): each thread then walks one span for a whole group, where mla_attend would have
     * each of a token's threads read all of its cache rows. split_rows' bound holds. */
    const int ng = (int)((hp->n_heads + MLA_GROUP - 1) / MLA_GROUP);
    const int spans = nth / (n * ng);
    if (spans >= 2) {
        const size_t kd = c->kv_dim, r = split_rows(nth);
        float *sh = c->mla_scratch + (size_t)nth * part_floats(hp, kd);
        mla_split s = {&j, spans, ng, sh, sh + r / 2 * kd, sh + r / 2 * kd + r * kd, NULL};
        const uintptr_t a = (uintptr_t)(s.pm + r); /* one float of room for the alignment */
        s.pl = (double *)(a + (a & 7));
        hm_pool_run(c->pool, split_absorb, &s);
        mla_mark(c, HM_MLA_ABSORB, &t);
        hm_pool_run(c->pool, split_span, &s);
        mla_mark(c, HM_MLA_WALK, &t);
        hm_pool_run(c->pool, split_merge, &s);
        mla_mark(c, HM_MLA_VALUES, &t);
        return HM_OK;
    }
    if (j.kdot && n >= MLA_MM_MIN) {
        mla_by_rows(c, &j, &t);
        return HM_OK;
    }
    hm_pool_run(c->pool, mla_attend, &j);
    mla_mark(c, HM_MLA_WALK, &t);
    return HM_OK;
}
