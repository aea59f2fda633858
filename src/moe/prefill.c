/* prefill.c - the phased job (moe.c's overview: pre, pack x, gate/up, pack h, down, chunk by chunk)
 * for every batch that does not take the decode path. */
#include <string.h>
#include <time.h>

#include "moe/moe_int.h"
#include "core/timer.h"

#if defined(__x86_64__)
/* packs items (expert, 16-token group) round robin; src rows given by idx (x) or contiguous (h) */
static void phase_pack(hm_moe *m, const chunk *c, bool down, int ith, int nth) {
    int item = 0;
    for (int a = c->a0; a < c->a1; a++) {
        const active_expert *ae = &m->act[a];
        if (!ae->amx || (down ? ae->fused : ae->own_x)) continue;
        const int groups = (ae->n + 31) / 32 * 2;
        for (int g = 0; g < groups; g++, item++) {
            if (item % nth != ith) continue;
            if (!down) {
                (swapped(m, ae) ? hm_amx_pack_act_q_rt : hm_amx_pack_act_q)(
                    m->s->xa, m->xa_bytes, m->s->tok + ae->off, ae->n, m->p.hidden,
                    m->s->px + ae->px_off, g, g + 1);
            } else {
                const int64_t row0 = ae->off - m->act[c->a0].off;
                const float *h = m->s->h + (size_t)row0 * (size_t)m->p.inter;
                if (swapped(m, ae))
                    hm_amx_pack_act_rt(h, (size_t)m->p.inter, NULL, ae->n, m->p.inter,
                                       m->s->ph + ae->ph_off, g, g + 1);
                else
                    hm_amx_pack_act(m->td, h, (size_t)m->p.inter, NULL, ae->n, m->p.inter,
                                    m->s->ph + ae->ph_off, g, g + 1);
            }
        }
    }
}
#endif

/* output rows [r0, r1): acc[tok][r] += w * (down_e[r] . h + bias[r]) for expert ae */
static void down_unit(hm_moe *m, const active_expert *ae, int64_t hrow0, int64_t r0, int64_t r1,
                      void *scr, float *tb, uint64_t ks[KS_N]) {
    const hm_moe_expert *x = &m->experts[ae->e];
    const int64_t I = m->p.inter, H = m->p.hidden;
    const int nr = (int)(r1 - r0);
#if defined(__x86_64__)
    if (swapped(m, ae)) { /* products token-major: added straight into the tokens' rows */
        const uint64_t t0 = hm_time_ns();
        m->ops->i8_down_acc((const uint8_t *)m->wpack.ptr + (size_t)ae->e * m->wp_expert +
                                2 * m->wp_gu,
                            H, I, r0, r1, m->s->ph + ae->ph_off, ae->n, m->s->tok + ae->off,
                            m->s->wt + ae->off, x->down_bias, m->acc, (size_t)H, scr);
        ks[KS_DOWN] += hm_time_ns() - t0;
        ks[KS_DOWN_OPS] += (uint64_t)(2 * nr * I * ae->n);
        return;
    }
    if (ae->amx && m->packed && m->packed[ae->e])
        m->ops->i8_matmul_packed((const uint8_t *)m->wpack.ptr + (size_t)ae->e * m->wp_expert +
                                     2 * m->wp_gu,
                                 H, I, r0, r1, m->s->ph + ae->ph_off, ae->n, tb, (size_t)nr, scr);
    else if (ae->amx)
        m->ops->i8_matmul(m->td, x->down.data, x->down.row_bytes, I, r0, r1, m->s->ph + ae->ph_off,
                          ae->n, tb, (size_t)nr, scr);
#endif
    if (ae->amx) {
        for (int t = 0; t < ae->n; t++) {
            const float w = m->s->wt[ae->off + t];
            float *acc = m->acc + (size_t)m->s->tok[ae->off + t] * (size_t)H;
            m->ops->axpy_f32(nr, w, tb + (size_t)t * (size_t)nr, acc + r0);
            if (x->down_bias) m->ops->axpy_f32(nr, w, x->down_bias + r0, acc + r0);
        }
        return;
    }
    down_rows(m, ae, hrow0, r0, r1, false);
}

/* Down of a flowing chunk: until expert a's gate/up claims have all packed their h (their
 * release adds pair with this acquire); a wait is at most the last claim of a */
static void wait_h(hm_moe *m, int a, uint64_t ks[KS_N]) {
    if (atomic_load_explicit(&m->gu_done[a], memory_order_acquire) >= m->act[a].claims) return;
    const uint64_t t0 = hm_time_ns();
    while (atomic_load_explicit(&m->gu_done[a], memory_order_acquire) < m->act[a].claims)
        hm_cpu_relax();
    ks[KS_H_WAIT] += hm_time_ns() - t0;
}

/* a thread's kernel statistics into the engine's (once per phase) */
static void ks_add(hm_moe *m, const uint64_t ks[KS_N]) {
    for (int i = 0; i < KS_N; i++)
        if (ks[i]) atomic_fetch_add_explicit(&m->ks[i], ks[i], memory_order_relaxed);
}

/* Claim k of expert a: gate/up rows [k * UNIT * g, ..) and, fused, the packing of that group of
 * h for down. px_e: the expert whose x this thread's tile holds (own_x), -1 for none. */
static void gate_up_claim(hm_moe *m, chunk *c, int a, int64_t k, void *scr, float *tb, int *px_e,
                          uint64_t ks[KS_N]) {
    const active_expert *ae = &m->act[a];
    const int64_t base = m->act[c->a0].off;
    const int64_t r0 = k * UNIT * ae->g, r1 = r0 + UNIT * ae->g;
    const int64_t re = r1 < m->p.inter ? r1 : m->p.inter;
#if defined(__x86_64__)
    const int64_t I = m->p.inter;
    if (ae->own_x) {
        /* the expert's x packed into this thread's tile (once for all the claims of it this
         * thread takes), the claim's h into its float tile [tokens][rows of the claim] and
         * packed for down from there: neither leaves the claiming core's L2 */
        uint8_t *px = (uint8_t *)tb + m->tb_bytes;
        const uint64_t t0 = hm_time_ns();
        if (*px_e != a)
            hm_amx_pack_act_q_rt(m->s->xa, m->xa_bytes, m->s->tok + ae->off, ae->n, m->p.hidden, px,
                                 0, (ae->n + 31) / 32 * 2);
        *px_e = a;
        const uint64_t t1 = hm_time_ns();
        const uint8_t *wp = (const uint8_t *)m->wpack.ptr + (size_t)ae->e * m->wp_expert;
        m->ops->i8_glu_packed_rt(wp, wp + m->wp_gu, I, m->p.hidden, r0, re, px, ae->n, tb,
                                 (size_t)(re - r0), scr);
        const uint64_t t2 = hm_time_ns();
        hm_amx_pack_act_group_rt(tb, (size_t)(re - r0), ae->n, I, m->s->ph + ae->ph_off,
                                 r0 / HM_AMX_GROUP);
        const uint64_t t3 = hm_time_ns();
        ks[KS_CLAIMS]++;
        ks[KS_TOKENS] += (uint64_t)ae->n;
        ks[KS_PACK_X] += t1 - t0;
        ks[KS_GLU] += t2 - t1;
        ks[KS_PACK_H] += t3 - t2;
        ks[KS_GLU_OPS] += (uint64_t)(4 * (re - r0) * m->p.hidden * ae->n);
        atomic_fetch_add_explicit(&m->gu_done[a], 1, memory_order_release); /* h group packed */
        return;
    }
#else
    (void)px_e, (void)ks;
#endif
    hm_moe_gate_up_unit(m, ae, ae->off - base, r0, re, scr, tb);
#if defined(__x86_64__)
    if (ae->fused) { /* this claim is one whole scale group of h: pack it while it is in L2 */
        const float *h = m->s->h + (size_t)(ae->off - base) * (size_t)I + r0;
        (swapped(m, ae) ? hm_amx_pack_act_group_rt : hm_amx_pack_act_group)(
            h, (size_t)I, ae->n, I, m->s->ph + ae->ph_off, r0 / HM_AMX_GROUP);
        atomic_fetch_add_explicit(&m->gu_done[a], 1, memory_order_release);
    }
#endif
}

/* Gate/up claims (ae->g units of one expert each, set at submit: tile loads of activations that
 * come from L3 stall the tile pipeline, so AMX experts go 4 units per claim, or 8 - one scale
 * group of h - where the claim also packs its h for down). A thread takes the next expert of
 * the chunk (busiest first) and then that expert's claims one by one, so the expert's x is
 * gathered and packed once, not once per claim; once every expert is taken, threads help with
 * the claims left of the expert that has the most, so the phase still ends on one claim. */
static void gate_up_phase(hm_moe *m, chunk *c, void *scr, float *tb) {
    int a = -1, px_e = -1;
    uint64_t ks[KS_N] = {0};
    for (;;) {
        if (a >= 0) {
            const int k = atomic_fetch_add_explicit(&m->taken[a], 1, memory_order_relaxed);
            if (k < m->act[a].claims) {
                gate_up_claim(m, c, a, k, scr, tb, &px_e, ks);
                continue;
            }
        }
        const long long n = atomic_fetch_add_explicit(&c->gu_next, 1, memory_order_relaxed);
        if (n < c->a1 - c->a0) {
            a = c->a0 + (int)n;
            continue;
        }
        a = -1;
        int left = 0;
        for (int b = c->a0; b < c->a1; b++) {
            const int l =
                m->act[b].claims - atomic_load_explicit(&m->taken[b], memory_order_relaxed);
            if (l > left) left = l, a = b;
        }
        if (a < 0) break;
    }
    ks_add(m, ks);
}

static void convert_h_phase(hm_moe *m, const chunk *c, int ith, int nth) {
    const int64_t base = m->act[c->a0].off;
    for (int a = c->a0; a < c->a1; a++) {
        const active_expert *ae = &m->act[a];
        if (ae->amx) continue;
        for (int t = 0; t < ae->n; t++) {
            const int64_t row = ae->off - base + t;
            if (row % nth != ith) continue;
            hm_act_convert(m->td, m->s->h + (size_t)row * (size_t)m->p.inter,
                           m->s->hq + (size_t)row * m->hq_bytes, m->p.inter);
        }
    }
}

/* down claim states (hm_moe.dn_st): the next walk position the owner starts, the units it owns */
#define DN_NEXT(s) ((int)((s)&0xffffff))
#define DN_OWN(s)  ((int)(((s) >> 24) & 0xff))

/* Walk position i of the down claim that starts at unit u: every claim starts at its own expert
 * and wraps around (walking the experts in one order, the threads would all read one expert's
 * packed h at the same moment, from the one core that wrote it) and keeps that order even when
 * a later expert is ready first, so the sums come out the same bits whatever the timing. */
static void down_step(hm_moe *m, chunk *c, int64_t u, int i, int64_t r, int64_t re, void *scr,
                      float *tb, uint64_t ks[KS_N]) {
    const int64_t hu = (m->p.hidden + UNIT - 1) / UNIT;
    const int na = c->a1 - c->a0;
    const int a = c->a0 + ((int)(u * na / hu) + i) % na;
    const active_expert *ae = &m->act[a];
    if (c->flow) wait_h(m, a, ks);
    down_unit(m, ae, ae->off - m->act[c->a0].off, r, re, scr, tb, ks);
}

/* Down: units of UNIT output rows, each over every expert of the chunk, so no two threads add to
 * the same rows; the last chunk writes a claim's rows out when done.
 * With AMX experts, claims of up to BLOCK units, so that each expert's packed hidden rows are read
 * from L3 once per claim, not once per unit. The claims are BLOCK units from a multiple of BLOCK
 * (so the sums do not depend on the thread count), and each thread takes its own share of them
 * (the rows it cleared, the same in every chunk); the device's cores run at different speeds (up
 * to 2x), so a thread out of claims splits the one with the most walk positions left: it takes
 * the owner's last unit from the next position on, after waiting for the owner to finish the
 * position it is on. Every row keeps its claim's walk order. Without AMX experts (one unit per
 * claim) and with HMOE_MOE_STATIC=0, the claims are handed out in arrival order instead, at most
 * the units left over the threads each. */
static void down_phase(hm_moe *m, chunk *c, bool last, void *scr, float *tb, int ith, int nth) {
    const int64_t H = m->p.hidden, hu = (H + UNIT - 1) / UNIT;
    const int na = c->a1 - c->a0;
    const uint64_t tag = (uint64_t)c->epoch << 32;
    /* HMOE_MOE_STEAL=test: participant 0 only splits the others' claims (which pause after each
     * expert), so that the tests see claims split whatever the timing */
    const bool split_mode = m->steal_test && nth > 1 && c->any_amx && !m->no_steal;
    const bool only_split = split_mode && ith == 0;
    /* own share: claims [cj, cj1) of BLOCK units each (in test mode participant 0 has none, the
     * others share all); the claims are the same whatever the thread count */
    const bool own_share = c->any_amx && !m->no_static;
    int64_t cj = 0, cj1 = 0;
    if (own_share && !only_split)
        span((hu + BLOCK - 1) / BLOCK, split_mode ? ith - 1 : ith, split_mode ? nth - 1 : nth, &cj,
             &cj1);
    uint64_t ks[KS_N] = {0};
    while (!only_split) {
        long long u;
        int64_t g = 1;
        if (own_share) {
            if (cj >= cj1) break;
            u = cj++ * BLOCK, g = hu - u < BLOCK ? hu - u : BLOCK;
        } else {
            u = atomic_load_explicit(&c->dn_next, memory_order_relaxed);
            do {
                if (u >= hu) break;
                g = c->any_amx ? (hu - u + nth - 1) / nth : 1;
                g = g > BLOCK ? BLOCK : g;
            } while (!atomic_compare_exchange_weak_explicit(
                &c->dn_next, &u, u + g, memory_order_relaxed, memory_order_relaxed));
            if (u >= hu) break;
        }
        _Atomic uint64_t *st = &m->dn_st[u];
        atomic_store_explicit(&m->dn_done[u], 0, memory_order_relaxed);
        /* published with the done count it pairs with (a helper acquires st, then waits on it) */
        atomic_store_explicit(st, tag | (uint64_t)g << 24, memory_order_release);
        /* own shares: units published so far (the splitting participant's "more to come") */
        if (own_share) atomic_fetch_add_explicit(&c->dn_next, g, memory_order_release);
        int own = (int)g;
        for (;;) {
            uint64_t s = atomic_load_explicit(st, memory_order_relaxed);
            const int i = DN_NEXT(s);
            own = DN_OWN(s);
            if (i >= na) break;
            if (!atomic_compare_exchange_weak_explicit(st, &s, s + 1, memory_order_relaxed,
                                                       memory_order_relaxed))
                continue;
            const int64_t r = u * UNIT, re = r + own * UNIT < H ? r + own * UNIT : H;
            down_step(m, c, u, i, r, re, scr, tb, ks);
            atomic_store_explicit(&m->dn_done[u], i + 1, memory_order_release);
            if (m->steal_test && ith > 0) /* tests: let participant 0 split this claim */
                nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
        }
        if (last)
            hm_moe_write_out(m, u * UNIT, u * UNIT + own * UNIT < H ? u * UNIT + own * UNIT : H);
    }
    while (!m->no_steal && c->any_amx) {
        int64_t v = -1;
        int most = 0;
        for (int64_t w = 0; w < hu; w++) {
            const uint64_t s = atomic_load_explicit(&m->dn_st[w], memory_order_relaxed);
            if ((s >> 32) == c->epoch && DN_OWN(s) > 1 && na - DN_NEXT(s) > most)
                most = na - DN_NEXT(s), v = w;
        }
        if (v < 0 && only_split &&
            atomic_load_explicit(&c->dn_next, memory_order_acquire) < hu) { /* more to come */
            hm_cpu_relax();
            continue;
        }
        if (v < 0) break;
        uint64_t s = atomic_load_explicit(&m->dn_st[v], memory_order_relaxed);
        if ((s >> 32) != c->epoch || DN_OWN(s) < 2 || DN_NEXT(s) >= na ||
            !atomic_compare_exchange_strong_explicit(&m->dn_st[v], &s, s - ((uint64_t)1 << 24),
                                                     memory_order_acquire, memory_order_relaxed))
            continue;
        const int i0 = DN_NEXT(s);
        const int64_t r = (v + DN_OWN(s) - 1) * UNIT, re = r + UNIT < H ? r + UNIT : H;
        ks[KS_STEALS]++;
        /* the owner may still be on position i0 - 1, with these rows among its own */
        while (atomic_load_explicit(&m->dn_done[v], memory_order_acquire) < i0) hm_cpu_relax();
        for (int i = i0; i < na; i++) down_step(m, c, v, i, r, re, scr, tb, ks);
        if (last) hm_moe_write_out(m, r, re);
    }
    ks_add(m, ks);
}

void hm_moe_job(int ith, int nth, void *arg) {
    hm_moe *m = arg;
    if (m->decode) {
        hm_moe_job_decode(m, ith, nth);
        return;
    }
    void *scr = m->s->tscratch[ith];
    float *tb = (float *)((uint8_t *)scr + m->tscratch_bytes);
    const int64_t H = m->p.hidden, hu = (H + UNIT - 1) / UNIT;
    int64_t o0, o1; /* this thread's share of acc to clear: its own down claims' (down_phase) */
    span((hu + BLOCK - 1) / BLOCK, ith, nth, &o0, &o1);
    const int64_t R0 = o0 * BLOCK * UNIT < H ? o0 * BLOCK * UNIT : H,
                  R1 = o1 * BLOCK * UNIT < H ? o1 * BLOCK * UNIT : H;
    for (int t = 0; t < m->n_tok; t++)
        memset(m->acc + (size_t)t * (size_t)H + R0, 0, sizeof(float) * (size_t)(R1 - R0));
    if (m->n_chunks == 0) { /* every expert masked or skipped */
        hm_moe_write_out(m, R0, R1);
        return;
    }
    uint64_t tp = ith == 0 ? hm_time_ns() : 0;
#define PROF(i)                                                                                    \
    do {                                                                                           \
        if (ith == 0) {                                                                            \
            const uint64_t now = hm_time_ns();                                                     \
            m->prof[i] += (double)(now - tp) * 1e-9;                                               \
            tp = now;                                                                              \
        }                                                                                          \
    } while (0)
    hm_moe_phase_pre(m, ith, nth);
    moe_barrier(m);
    PROF(HM_MOE_PROF_PRE);
    for (int ci = 0; ci < m->n_chunks; ci++) {
        chunk *c = &m->chunks[ci];
#if defined(__x86_64__)
        if (c->any_px) {
            phase_pack(m, c, false, ith, nth);
            moe_barrier(m);
        }
#endif
        PROF(HM_MOE_PROF_PACK_X);
        gate_up_phase(m, c, scr, tb);
        if (!c->flow) moe_barrier(m);
        PROF(HM_MOE_PROF_GATE_UP);
        if (!c->flow) { /* else nothing to convert or pack: each claim packed its own h */
            convert_h_phase(m, c, ith, nth);
#if defined(__x86_64__)
            if (c->any_amx) phase_pack(m, c, true, ith, nth);
#endif
            moe_barrier(m);
        }
        PROF(HM_MOE_PROF_PACK_H);
        const bool last = ci + 1 == m->n_chunks;
        down_phase(m, c, last, scr, tb, ith, nth);
        if (!last) moe_barrier(m);
        PROF(HM_MOE_PROF_DOWN);
    }
#undef PROF
}
