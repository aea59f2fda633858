/* decode.c - the decode path: batches of matvec experts in one chunk, with no barrier between
 * gate/up and down. */
#include <string.h>

#include "moe/moe_int.h"
#include "core/timer.h"

/* The decode path: one chunk, every expert on the matvec kernels (1-4 tokens each). Gate/up
 * claims (expert, dec_gu rows) and then down claims (expert, dec_du output rows) are taken from
 * one sequence; the thread that finishes an expert's last gate/up claim converts its h and marks
 * it ready, and a down claim waits only for its own expert. Down writes weighted rows per
 * assignment into `part`; one barrier, then each thread sums its output rows over the assignments.
 */

void hm_moe_job_decode(hm_moe *m, int ith, int nth) {
    chunk *c = &m->chunks[0];
    const int64_t H = m->p.hidden, I = m->p.inter, hu = (H + UNIT - 1) / UNIT;
    const int64_t GU = m->dec_gu, DU = m->dec_du;
    const int64_t upe = (I + GU - 1) / GU, hud = (H + DU - 1) / DU; /* claims per expert */
    const int na = c->a1 - c->a0;
    const int64_t n_gu = upe * na, n_all = n_gu + hud * na;
    uint64_t ks[DEC_N] = {0}; /* this job's decode counters (m->dks[ith] at its end) */
    const uint64_t t_in = hm_time_ns();
    ks[DEC_START] = t_in > m->t_launch ? t_in - m->t_launch : 0;
    if (!m->pre_done) {
        hm_moe_phase_pre(m, ith, nth);
        moe_barrier(m);
    }
    /* the end of the last timed step, so one clock read per claim (~30-40 ns on the device) */
    uint64_t tc = hm_time_ns();
    for (int64_t u;
         (u = atomic_fetch_add_explicit(&c->gu_next, 1, memory_order_relaxed)) < n_all;) {
        if (u < n_gu) {
            const int a = c->a0 + (int)(u / upe);
            const active_expert *ae = &m->act[a];
            const int64_t r0 = (u % upe) * GU, r1 = r0 + GU < I ? r0 + GU : I;
            const hm_moe_expert *x = &m->experts[ae->e];
            hm_prefetch_start((const uint8_t *)x->gate.data + (size_t)r0 * x->gate.row_bytes,
                              (size_t)(r1 - r0) * x->gate.row_bytes);
            hm_prefetch_start((const uint8_t *)x->up.data + (size_t)r0 * x->up.row_bytes,
                              (size_t)(r1 - r0) * x->up.row_bytes);
            hm_moe_gate_up_unit(m, ae, ae->off, r0, r1, NULL, NULL);
            if (atomic_fetch_add_explicit(&m->gu_done[a], 1, memory_order_acq_rel) == upe - 1) {
                for (int t = 0; t < ae->n; t++)
                    hm_act_convert(m->td, m->s->h + (size_t)(ae->off + t) * (size_t)I,
                                   m->s->hq + (size_t)(ae->off + t) * m->hq_bytes, I);
                atomic_store_explicit(&m->h_ready[a], 1, memory_order_release);
            }
            const uint64_t t = hm_time_ns();
            ks[DEC_GU] += t - tc;
            tc = t;
            continue;
        }
        const int64_t v = u - n_gu;
        const int a = c->a0 + (int)(v / hud);
        const active_expert *ae = &m->act[a];
        const hm_moe_expert *x = &m->experts[ae->e];
        const int64_t r0 = (v % hud) * DU, r1 = r0 + DU < H ? r0 + DU : H;
        const uint8_t *dw = (const uint8_t *)x->down.data + (size_t)r0 * x->down.row_bytes;
        hm_prefetch_start(dw, (size_t)(r1 - r0) * x->down.row_bytes); /* while h may be pending */
        if (!atomic_load_explicit(&m->h_ready[a], memory_order_acquire)) {
            while (!atomic_load_explicit(&m->h_ready[a], memory_order_acquire)) hm_cpu_relax();
            const uint64_t t = hm_time_ns();
            ks[DEC_HWAIT] += t - tc;
            tc = t;
        }
        down_rows(m, ae, ae->off, r0, r1, true);
        const uint64_t t = hm_time_ns();
        ks[DEC_DOWN] += t - tc;
        tc = t;
    }
    const uint64_t t_claims = tc;
    moe_barrier(m);
    const uint64_t t_bar = hm_time_ns();
    int64_t o0, o1;
    span(hu, ith, nth, &o0, &o1);
    const int64_t R0 = o0 * UNIT, R1 = o1 * UNIT < H ? o1 * UNIT : H;
    for (int t = 0; t < m->n_tok; t++)
        memset(m->acc + (size_t)t * (size_t)H + R0, 0, sizeof(float) * (size_t)(R1 - R0));
    for (int64_t i = 0; i < c->rows; i++) {
        float *acc = m->acc + (size_t)m->s->tok[i] * (size_t)H;
        const float *src = m->s->part + (size_t)i * (size_t)H;
        for (int64_t r = R0; r < R1; r++) acc[r] += src[r];
    }
    hm_moe_write_out(m, R0, R1);
    const uint64_t t_out = hm_time_ns();
    ks[DEC_BAR] = t_bar - t_claims;
    ks[DEC_SUM] = t_out - t_bar;
    ks[DEC_IN] = t_out - t_in;
    ks[DEC_JOBS] = 1;
    uint64_t *own = m->dks[ith].v;
    for (int i = 0; i < DEC_N; i++) own[i] += ks[i];
}
