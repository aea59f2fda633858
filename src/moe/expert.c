/* expert.c - the work the phased and the decode jobs share: the activations converted per token,
 * gate/up rows of one expert into h, and the sums written out. */
#include <math.h>
#include <string.h>

#include "cuda/twins.h"
#include "moe/moe_int.h"
#include "quant/fp16.h"

/* the GLU of the engine's activation: the same function the GPU's experts run (cuda/twins.h) */
_Static_assert(HM_MOE_SILU == 0 && HM_MOE_GELU == 1 && HM_MOE_SWIGLU_OAI == 2,
               "hm_hd_glu's activation codes");
static inline float act_fn(const hm_moe *m, float g, float u) {
    return hm_hd_glu((int)m->p.act, g, u, m->p.swiglu_alpha, m->p.swiglu_limit);
}

static inline const float *x_row(const hm_moe *m, int t) {
    return m->x_type == HM_MOE_BF16 ? m->s->xf + (size_t)t * (size_t)m->p.hidden
                                    : (const float *)m->x + (size_t)t * (size_t)m->p.hidden;
}

void hm_moe_phase_pre(hm_moe *m, int ith, int nth) {
    int64_t t0, t1;
    span(m->n_tok, ith, nth, &t0, &t1);
    const int64_t H = m->p.hidden;
    for (int64_t t = t0; t < t1; t++) {
        if (m->x_type == HM_MOE_BF16) {
            const hm_bf16 *src = (const hm_bf16 *)m->x + (size_t)t * (size_t)H;
            for (int64_t i = 0; i < H; i++)
                m->s->xf[(size_t)t * (size_t)H + i] = hm_bf16_to_f32(src[i]);
        }
        if (m->s->xq_need[t])
            hm_act_convert(m->tg, x_row(m, (int)t), m->s->xq + (size_t)t * m->xq_bytes, H);
#if defined(__x86_64__)
        if (m->xa_need) /* once per token, gathered per AMX expert in phase_pack */
            hm_amx_quant_row(x_row(m, (int)t), H, m->s->xa + (size_t)t * m->xa_bytes);
#endif
    }
}

/* gate/up rows [r0, r1) of expert ae into h on the matvec kernels. With the 4 x 6 kernels (float
 * types, from HM_D46_MIN_TOKENS tokens): chunks of 32 rows, so each chunk's weights are read from
 * memory once for all the tokens; in each, the 6-token blocks of its whole 4-row groups, then the
 * rest (the tokens left over, and every token of the last 1-3 rows) 4 tokens per row read. Every
 * result is the same bits as one token at a time. */
static void gate_up_rows(hm_moe *m, const active_expert *ae, const hm_moe_expert *x, float *h,
                         int64_t r0, int64_t r1) {
    const int64_t I = m->p.inter, H = m->p.hidden;
    const bool b46 = m->d46_g && m->d46_u && ae->n >= HM_D46_MIN_TOKENS;
    const int n6 = b46 ? ae->n / 6 * 6 : 0;
    const int64_t ch = b46 ? 32 : r1 - r0;
    for (int64_t rc = r0; rc < r1; rc += ch) {
        const int64_t re = r1 - rc < ch ? r1 : rc + ch, r4 = rc + (re - rc) / 4 * 4;
        for (int t6 = 0; t6 < n6; t6 += 6) {
            const void *xs[6];
            for (int t = 0; t < 6; t++)
                xs[t] = m->s->xq + (size_t)m->s->tok[ae->off + t6 + t] * m->xq_bytes;
            for (int64_t r = rc; r < r4; r += 4) {
                float g[24], u[24];
                m->d46_g(H, (const uint8_t *)x->gate.data + (size_t)r * x->gate.row_bytes,
                         x->gate.row_bytes, xs, g);
                m->d46_u(H, (const uint8_t *)x->up.data + (size_t)r * x->up.row_bytes,
                         x->up.row_bytes, xs, u);
                for (int i = 0; i < 4; i++) {
                    const float bg = x->gate_bias ? x->gate_bias[r + i] : 0.0f;
                    const float bu = x->up_bias ? x->up_bias[r + i] : 0.0f;
                    for (int t = 0; t < 6; t++)
                        h[(size_t)(t6 + t) * (size_t)I + (size_t)(r + i)] =
                            act_fn(m, g[t * 4 + i] + bg, u[t * 4 + i] + bu);
                }
            }
        }
        /* each weight row read once for up to 4 tokens (the multi-token kernels) */
        for (int64_t r = rc; r < re; r++) {
            const uint8_t *gw = (const uint8_t *)x->gate.data + (size_t)r * x->gate.row_bytes;
            const uint8_t *uw = (const uint8_t *)x->up.data + (size_t)r * x->up.row_bytes;
            const float bg = x->gate_bias ? x->gate_bias[r] : 0.0f;
            const float bu = x->up_bias ? x->up_bias[r] : 0.0f;
            for (int t0 = r < r4 ? n6 : 0; t0 < ae->n; t0 += 4) {
                const int nt = ae->n - t0 < 4 ? ae->n - t0 : 4;
                const void *xs[4];
                for (int t = 0; t < nt; t++)
                    xs[t] = m->s->xq + (size_t)m->s->tok[ae->off + t0 + t] * m->xq_bytes;
                float g[4], u[4];
                hm_dot_rows(m->dot_g, m->dotn_g, H, gw, xs, nt, g);
                hm_dot_rows(m->dot_u, m->dotn_u, H, uw, xs, nt, u);
                for (int t = 0; t < nt; t++)
                    h[(size_t)(t0 + t) * (size_t)I + (size_t)r] = act_fn(m, g[t] + bg, u[t] + bu);
            }
        }
    }
}

/* gate + up + activation for rows [r0, r1) of expert ae into h (rows hrow0.. of the chunk);
 * tb: this thread's float tile, [tokens of the expert][rows of a claim] */
void hm_moe_gate_up_unit(hm_moe *m, const active_expert *ae, int64_t hrow0, int64_t r0, int64_t r1,
                         void *scr, float *tb) {
    const hm_moe_expert *x = &m->experts[ae->e];
    const int64_t I = m->p.inter, H = m->p.hidden;
    float *h = m->s->h + (size_t)hrow0 * (size_t)I;
#if defined(__x86_64__)
    if (ae->amx) {
        const int nr = (int)(r1 - r0);
        const bool silu = plain_silu(m, ae);
        const uint8_t *wp = m->packed && m->packed[ae->e]
                                ? (const uint8_t *)m->wpack.ptr + (size_t)ae->e * m->wp_expert
                                : NULL;
        if (silu && swapped(m, ae)) {
            /* gate and up in one pass: only silu(g) * u is written */
            m->ops->i8_glu_packed_rt(wp, wp + m->wp_gu, I, H, r0, r1, m->s->px + ae->px_off, ae->n,
                                     h + r0, (size_t)I, scr);
            return;
        }
        if (m->packed && m->packed[ae->e]) {
            void (*mm)(const void *, int64_t, int64_t, int64_t, int64_t, const void *, int, float *,
                       size_t, void *) =
                swapped(m, ae) ? m->ops->i8_matmul_packed_rt : m->ops->i8_matmul_packed;
            mm(wp, I, H, r0, r1, m->s->px + ae->px_off, ae->n, h + r0, (size_t)I, scr);
            mm(wp + m->wp_gu, I, H, r0, r1, m->s->px + ae->px_off, ae->n, tb, (size_t)nr, scr);
        } else {
            m->ops->i8_matmul(m->tg, x->gate.data, x->gate.row_bytes, H, r0, r1,
                              m->s->px + ae->px_off, ae->n, h + r0, (size_t)I, scr);
            m->ops->i8_matmul(m->tu, x->up.data, x->up.row_bytes, H, r0, r1, m->s->px + ae->px_off,
                              ae->n, tb, (size_t)nr, scr);
        }
        if (silu && m->ops->silu_mul_f32) {
            for (int t = 0; t < ae->n; t++)
                m->ops->silu_mul_f32(nr, h + (size_t)t * (size_t)I + r0, tb + (size_t)t * nr);
            return;
        }
        for (int t = 0; t < ae->n; t++) {
            float *ht = h + (size_t)t * (size_t)I;
            for (int64_t r = r0; r < r1; r++) {
                const float bg = x->gate_bias ? x->gate_bias[r] : 0.0f;
                const float bu = x->up_bias ? x->up_bias[r] : 0.0f;
                ht[r] = act_fn(m, ht[r] + bg, tb[(size_t)t * (size_t)nr + (size_t)(r - r0)] + bu);
            }
        }
        return;
    }
#endif
    (void)scr, (void)tb;
    gate_up_rows(m, ae, x, h, r0, r1);
}

/* this thread's output rows [r0, r1) of every token, from acc to out */
void hm_moe_write_out(hm_moe *m, int64_t r0, int64_t r1) {
    if ((void *)m->acc == m->out) return; /* summed in place */
    const int64_t H = m->p.hidden;
    for (int t = 0; t < m->n_tok; t++) {
        const float *a = m->acc + (size_t)t * (size_t)H;
        if (m->out_type == HM_MOE_F32) {
            float *o = (float *)m->out + (size_t)t * (size_t)H;
            if (m->accumulate) /* o + 1 * a: the same bits as o + a */
                m->ops->axpy_f32(r1 - r0, 1.0f, a + r0, o + r0);
            else
                memcpy(o + r0, a + r0, sizeof(float) * (size_t)(r1 - r0));
        } else {
            hm_bf16 *o = (hm_bf16 *)m->out + (size_t)t * (size_t)H;
            for (int64_t r = r0; r < r1; r++)
                o[r] = hm_f32_to_bf16(m->accumulate ? hm_bf16_to_f32(o[r]) + a[r] : a[r]);
        }
    }
}
