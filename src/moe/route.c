/* route.c - a batch's routing: its (token, expert) assignments in per-expert order (small_order
 * or a counting sort), the chunks and claims, and the scratch sized for them (hm_moe_prepare). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe_int.h"
#include "core/log.h"

/* active experts by token count, descending; ties by expert id */
static int by_tokens_desc(const void *pa, const void *pb) {
    const active_expert *a = pa, *b = pb;
    if (a->n != b->n) return a->n > b->n ? -1 : 1;
    if (a->e != b->e) return a->e < b->e ? -1 : 1;
    return (a->part > b->part) - (a->part < b->part);
}

/* whether expert e, with cnt tokens in this batch, takes the AMX path (hm_tile_min_tokens:
 * the matvec kernels below that many tokens) */
static bool expert_amx(const hm_moe *m, int e, int cnt) {
    return m->amx && cnt >= m->tile_min[m->packed && m->packed[e] && !m->mv_only];
}

/* Batches of up to MATVEC_MAX tokens and SMALL_ASG assignments (decode) are routed by
 * small_order: the counting sort's passes over every expert (4 over 128-256 counters, cold after
 * a layer of weights streamed through the caches) cost more than the few assignments. Device,
 * Qwen3-30B-A3B, 48 layers, means of 5 rotated rounds: the submit's routing 4.0 against 4.9 us a
 * layer at 1 token, 4.8 against 6.6 at 4 tokens (HMOE_MOE_ROUTE=full: the counting sort). */
#define SMALL_ASG 64

/* The order of a small batch's n = n_tok * k assignments as the counting sort places them: the
 * unmasked ones sorted by expert (insertion sort, stable: each expert's tokens in batch order),
 * into ord; *runs = their experts. Returns how many, or -1 where an expert would take the AMX
 * path, whose parts only the counting sort splits. */
static int small_order(const hm_moe *m, const int32_t *ids, int n, int32_t ord[SMALL_ASG],
                       int *runs) {
    int c = 0;
    for (int i = 0; i < n; i++) {
        const int e = ids[i];
        if (e < 0 || m->mask[e]) continue;
        int j = c++;
        for (; j > 0 && ids[ord[j - 1]] > e; j--) ord[j] = ord[j - 1];
        ord[j] = i;
    }
    *runs = 0;
    for (int j = 0, r0 = 0; j < c; j++) /* the runs: one active expert each */
        if (j + 1 == c || ids[ord[j + 1]] != ids[ord[j]]) {
            if (expert_amx(m, ids[ord[j]], j + 1 - r0)) return -1;
            ++*runs, r0 = j + 1;
        }
    return c;
}

/* The counting sort's active experts (AMX experts in the parts prepare set in m->tpart and
 * m->pbase, from m->cnt) and each assignment's place: the busiest experts first above MATVEC_MAX
 * tokens, else in increasing expert order. */
static void route_counting(hm_moe *m, const int32_t *ids, const float *w, int n_tok, int k) {
    const int E = m->p.n_experts;
    hm_moe_scratch *S = m->s;
    m->n_act = 0;
    for (int e = 0; e < E; e++)
        for (int p = 0, t = 0; t < m->cnt[e]; p++, t += m->tpart[e])
            m->act[m->n_act++] =
                (active_expert){.e = e,
                                .n = m->cnt[e] - t < m->tpart[e] ? m->cnt[e] - t : m->tpart[e],
                                .part = p,
                                .amx = expert_amx(m, e, m->cnt[e])};
    /* batches of many tokens: the busiest experts first, so that their long gate/up claims are
     * taken at the start and the small ones fill the end (routing is uneven: one expert can hold
     * most of a batch) */
    if (n_tok > MATVEC_MAX) qsort(m->act, (size_t)m->n_act, sizeof *m->act, by_tokens_desc);
    int64_t off = 0;
    for (int a = 0; a < m->n_act; a++) {
        active_expert *ae = &m->act[a];
        ae->off = off;
        off += ae->n;
        m->pidx[m->pbase[ae->e] + ae->part] = a;
    }
    memset(m->cnt, 0, sizeof *m->cnt * (size_t)E); /* now each expert's tokens placed */
    for (int64_t i = 0; i < (int64_t)n_tok * k; i++) {
        const int e = ids[i];
        if (e < 0 || m->mask[e]) continue;
        const int j = m->cnt[e]++;
        const int64_t d = m->act[m->pidx[m->pbase[e] + j / m->tpart[e]]].off + j % m->tpart[e];
        S->tok[d] = (int32_t)(i / k);
        S->wt[d] = w[i];
    }
}

/* Checks and routes a batch and sizes the scratch for it; run_job tells whether the job has work
 * (with no expert to compute here, out is already written). */

/* Rows per decode claim of a matrix of `rows` rows over na experts: whole UNITs, as many as keep
 * at least min_claims claims and a claim within cap bytes. Every claim is a stream of its own: its
 * first lines arrive with nothing prefetched ahead of them, and its last prefetches (the kernels
 * fetch a fixed distance ahead) run into rows another thread reads. Fixed 32-row claims (a
 * Qwen3-30B down claim is 13.8 KiB) decoded 14-17% slower on the development machine (2 threads,
 * means of 8 alternations; bench/RESULTS.md); the gate/up claims, larger, come first and the
 * small down claims last, so the threads still end together. Gate/up claims take up to 1 MiB
 * (a 256 KiB cap cuts them to 32 rows for models with long rows: DeepSeek-V3, Qwen3-235B,
 * Mixtral; 3-7% slower decode there); down claims stay within 256 KiB, since larger ones at the
 * end of the layer left the threads waiting longer at its barrier (device, bench/RESULTS.md).
 * Qwen3-30B's claims, set by min_claims, are the same. HMOE_MOE_DECODE_ROWS=N sets N. */
#define DECODE_GU_BYTES   ((size_t)1 << 20)
#define DECODE_DOWN_BYTES ((size_t)256 << 10)
static int64_t decode_rows(int64_t rows, size_t row_bytes, int na, int64_t min_claims,
                           size_t cap_bytes) {
    const int64_t k = (min_claims + na - 1) / na; /* claims per expert */
    int64_t r = rows / k / UNIT * UNIT;
    const int64_t cap = (int64_t)(cap_bytes / (row_bytes ? row_bytes : 1)) / UNIT * UNIT;
    if (r > cap) r = cap;
    return r < UNIT ? UNIT : r;
}

hm_status hm_moe_prepare(hm_moe *m, const void *x, hm_moe_dtype x_type, const int32_t *ids,
                         const float *w, int n_tok, int k, void *out, hm_moe_dtype out_type,
                         bool accumulate) {
    m->run_job = false;
    if (n_tok < 0 || k < 0 || k > m->p.n_experts || (n_tok > 0 && (!x || !ids || !w || !out)))
        return hm_errorf(HM_ERR_INVALID_ARG, "moe: bad batch: %d tokens, k = %d (%d experts)",
                         n_tok, k, m->p.n_experts);
    if ((x_type != HM_MOE_F32 && x_type != HM_MOE_BF16) ||
        (out_type != HM_MOE_F32 && out_type != HM_MOE_BF16))
        return hm_errorf(HM_ERR_INVALID_ARG, "moe: input/output must be f32 or bf16");
    const int E = m->p.n_experts;
    for (int64_t i = 0; i < (int64_t)n_tok * k; i++)
        if (ids[i] < -1 || ids[i] >= E)
            return hm_errorf(HM_ERR_INVALID_ARG,
                             "moe: token %lld slot %lld: expert id %d not in [0, %d)",
                             (long long)(i / k), (long long)(i % k), ids[i], E);
    const int64_t H = m->p.hidden, I = m->p.inter;
    /* route: small batches by small_order, the others (and HMOE_MOE_ROUTE=full) by a counting
     * sort of the unmasked assignments by expert */
    int32_t ord[SMALL_ASG];
    int n_parts = 0;
    m->mv_only = false;
    const int n_small = n_tok <= MATVEC_MAX && (int64_t)n_tok * k <= SMALL_ASG && !m->route_full
                            ? small_order(m, ids, n_tok * k, ord, &n_parts)
                            : -1;
    int64_t n_asg = n_small;
    if (n_small < 0) {
        memset(m->cnt, 0, sizeof *m->cnt * (size_t)E);
        n_asg = 0;
        int busiest = 0;
        for (int64_t i = 0; i < (int64_t)n_tok * k; i++)
            if (ids[i] >= 0 && !m->mask[ids[i]]) {
                const int c = ++m->cnt[ids[i]];
                busiest = c > busiest ? c : busiest;
                n_asg++;
            }
        /* A decode-sized batch (several sequences' tokens spread over most experts, 1-3 each)
         * whose few busier repacked experts would cross to the AMX tiles (from 5 tokens) would
         * lose the decode path for all of them; below the per-call crossover those experts stay
         * on the matvec kernels, which read their original weights twice for 5-8 tokens, about
         * the int8 copy's bytes. Development machine (2 threads, Qwen3-30B-A3B Q4_K, --repack,
         * three alternations): 32 tokens 12.9-13.2 against 13.8-14.0 ms per 4 layers. */
        m->mv_only = m->amx && m->packed && !m->no_mv_only && !m->no_decode_path &&
                     n_asg <= DECODE_ROWS_MAX && n_asg <= (int64_t)m->p.max_tokens * 8 &&
                     busiest < m->tile_min[0];
        /* an AMX expert with more tokens than a tile block (hm_tile_token_block) runs as parts
         * of consecutive tokens, each an active expert of its own: a part's packed activations
         * then fit the L2 of the cores that take its claims, and its claims get the fused path */
        const int tlim = m->amx ? hm_tile_token_cap(H, INT_MAX) : 0; /* the block limit */
        for (int e = 0; e < E; e++) {
            if (!m->cnt[e]) continue;
            m->tpart[e] = expert_amx(m, e, m->cnt[e]) ? hm_tile_split(m->cnt[e], tlim) : m->cnt[e];
            m->pbase[e] = n_parts;
            n_parts += (m->cnt[e] + m->tpart[e] - 1) / m->tpart[e];
        }
    }
    if (n_asg == 0) { /* nothing to compute here */
        if (!accumulate && n_tok > 0)
            memset(out, 0, (size_t)n_tok * (size_t)H * (out_type == HM_MOE_F32 ? 4 : 2));
        return HM_OK;
    }
    hm_moe_scratch *S = m->s;
    if (!hm_moe_grow((void **)&S->tok, &S->cap_tok, sizeof *S->tok * (size_t)n_asg,
                     "moe assignments") ||
        !hm_moe_grow((void **)&S->wt, &S->cap_wt, sizeof *S->wt * (size_t)n_asg,
                     "moe assignments")) {
        hm_moe_scratch_release(S);
        return hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory for %lld assignments",
                         (long long)n_asg);
    }
    if (hm_moe_grow_act(m, n_parts)) {
        hm_moe_scratch_release(S);
        return hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory for %d active experts", n_parts);
    }
    if (n_small > 0) { /* one active expert per run of ord, in increasing expert order */
        m->n_act = 0;
        for (int j = 0; j < n_small; j++) {
            const int e = ids[ord[j]];
            if (j == 0 || ids[ord[j - 1]] != e)
                m->act[m->n_act++] =
                    (active_expert){.e = e, .n = 0, .part = 0, .amx = false, .off = j};
            m->act[m->n_act - 1].n++;
            S->tok[j] = ord[j] / k;
            S->wt[j] = w[ord[j]];
        }
    } else {
        route_counting(m, ids, w, n_tok, k);
    }
    /* chunks of whole experts with at most max_tokens * 8 assignments (at least one expert) */
    const int64_t cap = (int64_t)m->p.max_tokens * 8;
    m->n_chunks = 0;
    int64_t chunk_rows = 0;
    size_t px_need = 0, ph_need = 0, px = 0, ph = 0, tb_floats = 0, own_x = 0;
    for (int a = 0; a < m->n_act; a++) {
        active_expert *ae = &m->act[a];
        if (m->n_chunks == 0 || m->chunks[m->n_chunks - 1].rows + ae->n > cap) {
            chunk *c = &m->chunks[m->n_chunks++];
            c->a0 = a, c->a1 = a, c->rows = 0, c->any_amx = c->any_px = false;
            c->flow = !m->no_flow;
            atomic_init(&c->gu_next, 0);
            atomic_init(&c->dn_next, 0);
            if (++m->dn_epoch == 0) m->dn_epoch = 1; /* 0: the states' initial tag */
            c->epoch = m->dn_epoch;
            px = ph = 0;
        }
        chunk *c = &m->chunks[m->n_chunks - 1];
        c->a1 = a + 1;
        c->rows += ae->n;
        /* gate/up claims: an AMX expert in claims of BLOCK units, so that the claiming core
         * reads its activations from L3 once for 4 units (single-unit claims measured 1.7x
         * slower at 256 tokens per expert); one that alone is a large share of the batch (1024+
         * tokens: its activations no longer fit L2 anyway) in single units, so it spreads over
         * every thread */
        ae->g = !ae->amx || ae->n >= 1024 ? 1 : BLOCK;
        /* and where a claim can be one scale group of h (256 rows), it packs that group for
         * the down projection itself: h then goes from the claiming core's L2 to the packing,
         * instead of to memory and back in a phase of its own */
#if defined(__x86_64__)
        ae->fused = ae->amx && ae->g > 1 && !m->no_fused_h;
        if (ae->fused) ae->g = HM_AMX_GROUP / UNIT;
#else
        ae->fused = false;
#endif
        /* the float tile: the products of a gate/up claim (g units) or, on the AMX path
         * without repacked down weights, of a down claim (up to BLOCK units) */
        const size_t tbn = (size_t)ae->n * UNIT * (size_t)(ae->g > BLOCK ? ae->g : BLOCK);
        tb_floats = tbn > tb_floats ? tbn : tb_floats;
        ae->claims = (int)((I + (int64_t)UNIT * ae->g - 1) / ((int64_t)UNIT * ae->g));
        atomic_store_explicit(&m->taken[a], 0, memory_order_relaxed);
        atomic_store_explicit(&m->gu_done[a], 0, memory_order_relaxed);
        c->flow = c->flow && ae->fused;
        chunk_rows = c->rows > chunk_rows ? c->rows : chunk_rows;
#if defined(__x86_64__)
        ae->own_x = false;
        if (ae->amx) {
            c->any_amx = true;
            ae->ph_off = ph;
            ph += (hm_amx_act_bytes(m->td, I, ae->n) + 63) & ~(size_t)63;
            /* a fused claim on the swapped kernels packs its expert's x itself, from the rows
             * quantized once, into its core's L2 (once per thread that takes claims of the
             * expert: see gate_up_phase), so no packing phase writes every expert's x out to
             * memory and no claim reads it back from there */
            const size_t xb = hm_amx_act_bytes(m->tg, H, ae->n);
            ae->own_x = ae->fused && swapped(m, ae) && plain_silu(m, ae);
            if (ae->own_x) {
                own_x = xb > own_x ? xb : own_x;
            } else {
                c->any_px = true;
                ae->px_off = px;
                px += (xb + 63) & ~(size_t)63;
            }
        }
#endif
        px_need = px > px_need ? px : px_need;
        ph_need = ph > ph_need ? ph : ph_need;
    }
    /* the sums go straight into a float32 output that is overwritten, unless it overlaps x
     * (the job reads x while it clears its share of the sums) or its rows are not 64-byte
     * aligned (threads' 32-row shares would then share cache lines at their edges); only
     * otherwise do they need the scratch acc */
    const uintptr_t xa = (uintptr_t)x, oa = (uintptr_t)out,
                    xe = xa + (size_t)n_tok * (size_t)H * (x_type == HM_MOE_F32 ? 4 : 2),
                    oe = oa + (size_t)n_tok * (size_t)H * sizeof(float);
    const bool direct = out_type == HM_MOE_F32 && !accumulate && !m->no_direct_out &&
                        (oe <= xa || xe <= oa) && oa % 64 == 0 &&
                        (size_t)H * sizeof(float) % 64 == 0;
    /* scratch */
    const size_t act_bytes = sizeof(float) * (size_t)n_tok * (size_t)H;
    bool ok =
        (direct || hm_moe_grow((void **)&S->acc, &S->cap_acc, act_bytes, "moe output")) &&
        hm_moe_grow((void **)&S->xq_need, &S->cap_xq_need, (size_t)n_tok, "moe activations") &&
        hm_moe_grow((void **)&S->xq, &S->cap_xq, m->xq_bytes * (size_t)n_tok + 64,
                    "moe activations") &&
        (x_type != HM_MOE_BF16 ||
         hm_moe_grow((void **)&S->xf, &S->cap_xf, act_bytes, "moe input")) &&
        hm_moe_grow((void **)&S->h, &S->cap_h, sizeof(float) * (size_t)chunk_rows * (size_t)I,
                    "moe hidden") &&
        hm_moe_grow((void **)&S->hq, &S->cap_hq, m->hq_bytes * (size_t)chunk_rows + 64,
                    "moe hidden q");
    m->xa_need = false;
    for (int ci = 0; ci < m->n_chunks; ci++) m->xa_need |= m->chunks[ci].any_amx;
#if defined(__x86_64__)
    if (m->xa_need) {
        m->xa_bytes = hm_amx_qrow_bytes(H);
        if (m->xa_bytes * (size_t)n_tok >= ((size_t)1 << 31))
            return hm_errorf(HM_ERR_INVALID_ARG,
                             "moe: %d tokens of hidden %lld exceed the AMX packing's 2 GiB", n_tok,
                             (long long)H);
        ok = ok &&
             hm_moe_grow((void **)&S->xa, &S->cap_xa, m->xa_bytes * (size_t)n_tok, "moe int8 x");
    }
#endif
    ok = ok && (px_need == 0 || hm_moe_grow((void **)&S->px, &S->cap_px, px_need, "moe packed x"));
    ok = ok && (ph_need == 0 || hm_moe_grow((void **)&S->ph, &S->cap_ph, ph_need, "moe packed h"));
    /* per-thread: AMX scratch + a [tokens of an expert][rows of its claims] float tile (the
     * largest) + the largest own-packed x; the size is kept in a header word before the
     * buffer */
    m->tb_bytes = (sizeof(float) * tb_floats + 63) & ~(size_t)63;
    ok = ok && hm_moe_thread_scratch(m, m->tscratch_bytes + m->tb_bytes + own_x + 64) == HM_OK;
    if (!ok) {
        hm_moe_scratch_release(S);
        return hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory for a batch of %d tokens", n_tok);
    }
    m->x = x, m->x_type = x_type, m->out = out, m->out_type = out_type;
    memset(S->xq_need, 0, (size_t)n_tok);
    for (int a = 0; a < m->n_act; a++)
        if (!m->act[a].amx)
            for (int t = 0; t < m->act[a].n; t++) S->xq_need[S->tok[m->act[a].off + t]] = 1;
    m->accumulate = accumulate, m->n_tok = n_tok;
    m->acc = direct ? (float *)out : S->acc;
    /* the decode path for batches of matvec experts only, up to DECODE_ROWS_MAX assignments (64
     * until the per-format tile crossovers kept experts of up to 16 tokens on the matvec kernels
     * on AMX machines too) */
    m->decode = m->n_chunks == 1 && !m->chunks[0].any_amx && m->chunks[0].rows <= DECODE_ROWS_MAX &&
                !m->no_decode_path;
    if (m->decode) {
        const chunk *c0 = &m->chunks[0];
        const hm_moe_expert *x0 = &m->experts[m->act[c0->a0].e];
        const int na = c0->a1 - c0->a0, nth = m->nth;
        m->dec_gu = m->dec_rows_env ? m->dec_rows_env
                                    : decode_rows(I, x0->gate.row_bytes + x0->up.row_bytes, na,
                                                  4 * (int64_t)nth, DECODE_GU_BYTES);
        m->dec_du = m->dec_rows_env ? m->dec_rows_env
                                    : decode_rows(H, x0->down.row_bytes, na, 8 * (int64_t)nth,
                                                  DECODE_DOWN_BYTES);
        const size_t need = sizeof(float) * (size_t)m->chunks[0].rows * (size_t)H;
        if (!hm_moe_grow((void **)&S->part, &S->cap_part, need, "moe decode rows")) {
            hm_moe_scratch_release(S);
            return hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory for a batch of %d tokens",
                             n_tok);
        }
        for (int a = m->chunks[0].a0; a < m->chunks[0].a1; a++) /* gu_done: cleared above */
            atomic_store_explicit(&m->h_ready[a], 0, memory_order_relaxed);
    }
    /* one or two tokens: converting them here costs the caller about what its share would, and
     * the job then needs no barrier before the experts start (~4 us of 16 threads' time) */
    m->pre_done = m->decode && n_tok <= 2;
    if (m->pre_done) hm_moe_phase_pre(m, 0, 1);
    m->run_job = true;
    return HM_OK;
}
