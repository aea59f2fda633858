/* moe.c - the CPU expert engine (include/hmoe_moe.h): create, free, submit, wait, statistics.
 *
 * One submit = one pool job. The caller thread routes (a counting sort of the (token, expert)
 * pairs into per-expert lists) and splits the active experts into chunks whose assignments fit
 * the scratch; the job then runs, per chunk, with barriers between phases:
 *   pre  convert the activations once per token for the matvec kernels (and bf16 input to f32)
 *   B    quantize + pack the tokens of the AMX experts (16-token groups spread over threads)
 *   C    gate and up: the chunk's rows (all experts concatenated) in 32-row units spread evenly
 *        over the threads; each unit is gate + up + activation in one pass into h
 *   D    convert h for the down projection (matvec) or pack it (AMX)
 *   E    down: every thread owns 32-row units of the output and adds w * down_e(h) of every
 *        expert of the chunk into them - no reduction across threads, no further barrier.
 * Where every expert's claims pack their own h (AMX, fused), D is empty and E starts without a
 * barrier: down waits per expert for that expert's gate/up claims (chunk.flow).
 * After the last chunk each thread writes its own output rows (f32 or bf16, set or add), unless
 * the sums went straight into a float32 output (hm_moe.acc).
 * Weights are read exactly once per submit: every row of every active expert belongs to one unit.
 *
 * The files: route.c routes a batch (prepare), prefill.c runs the phased job above, decode.c the
 * decode path, expert.c the work both share; scratch.c the batch scratch, repack.c the AMX
 * repacking, slices.c the NUMA slices; router.c the routers' top-k; moe_int.h the structs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe_int.h"
#include "core/log.h"
#include "core/timer.h"
#include "quant/types.h"

hm_moe_params hm_moe_default_params(void) {
    hm_moe_params p;
    memset(&p, 0, sizeof p);
    p.act = HM_MOE_SILU;
    p.swiglu_alpha = 1.702f;
    p.swiglu_limit = 7.0f;
    return p;
}

static hm_status check_matrix(const hm_moe_matrix *m, int64_t rows, int64_t cols, int e,
                              const char *what, uint32_t type0, size_t *rb_out) {
    uint64_t rb;
    if (!m->data)
        return hm_errorf(HM_ERR_INVALID_ARG, "moe: expert %d %s weights are NULL", e, what);
    if (m->type != type0)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "moe: expert %d %s has type %s, expert 0 has %s (one type per projection)",
                         e, what, hm_type_name(m->type), hm_type_name(type0));
    if (!hm_type_row_bytes(m->type, (uint64_t)cols, &rb))
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "moe: %s rows of %lld values are not a whole number of %s blocks", what,
                         (long long)cols, hm_type_name(m->type));
    if (m->row_bytes && m->row_bytes < rb)
        return hm_errorf(HM_ERR_INVALID_ARG, "moe: expert %d %s row stride %zu < row size %llu", e,
                         what, m->row_bytes, (unsigned long long)rb);
    hm_status st = hm_kernel_check(m->type, what);
    if (st) return st;
    (void)rows;
    *rb_out = m->row_bytes ? m->row_bytes : (size_t)rb;
    return HM_OK;
}

/* whether environment variable name is set to value (the A/B switches, read once at create) */
static bool env_is(const char *name, const char *value) {
    const char *v = getenv(name);
    return v && !strcmp(v, value);
}

/* a row count from the environment (an A/B switch): 0 when unset; a value that is not a whole
 * number in [1, 1 << 20] is ignored with a warning, as HMOE_SPIN_US is */
static int env_rows(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end;
    const long n = strtol(v, &end, 10);
    if (*end == '\0' && n >= 1 && n <= (1L << 20)) return (int)n;
    HM_WARN("%s='%s' is not a row count in [1, 1048576]; ignored", name, v);
    return 0;
}

hm_status hm_moe_create(const hm_moe_params *params, hm_moe **out) {
    *out = NULL;
    const hm_moe_params *p = params;
    if (!p || !p->pool || !p->experts)
        return hm_errorf(HM_ERR_INVALID_ARG, "moe: params, pool and experts are required");
    if (p->n_experts < 1 || p->n_experts > (1 << 16) || p->hidden < 1 || p->inter < 1 ||
        p->hidden > (1 << 20) || p->inter > (1 << 20))
        return hm_errorf(HM_ERR_INVALID_ARG, "moe: bad shape: %d experts, hidden %lld, inter %lld",
                         p->n_experts, (long long)p->hidden, (long long)p->inter);
    if (p->act != HM_MOE_SILU && p->act != HM_MOE_GELU && p->act != HM_MOE_SWIGLU_OAI)
        return hm_errorf(HM_ERR_INVALID_ARG, "moe: unknown activation %d", (int)p->act);
    if (p->max_tokens < 0)
        return hm_errorf(HM_ERR_INVALID_ARG, "moe: max_tokens %d < 0", p->max_tokens);
    if (p->n_slices > 1) return hm_moe_create_sliced(p, out);
    return hm_moe_create_one(p, NULL, out);
}

/* The per-active-expert arrays for at least n entries (between batches); nonzero when out of
 * memory (the old arrays are kept then). */
int hm_moe_grow_act(hm_moe *m, int n) {
    if (n <= m->cap_act) return 0;
    active_expert *act = calloc((size_t)n, sizeof *act);
    chunk *chunks = calloc((size_t)n, sizeof *chunks);
    atomic_int *gu_done = calloc((size_t)n, sizeof *gu_done),
               *taken = calloc((size_t)n, sizeof *taken),
               *h_ready = calloc((size_t)n, sizeof *h_ready);
    int *pidx = calloc((size_t)n, sizeof *pidx);
    if (!act || !chunks || !gu_done || !taken || !h_ready || !pidx) {
        free(act), free(chunks), free(gu_done), free(taken), free(h_ready), free(pidx);
        return 1;
    }
    free(m->act), free(m->chunks), free(m->gu_done), free(m->taken), free(m->h_ready);
    free(m->pidx);
    m->act = act, m->chunks = chunks, m->gu_done = gu_done, m->taken = taken;
    m->h_ready = h_ready, m->pidx = pidx, m->cap_act = n;
    return 0;
}

/* An engine over the whole pool (bar NULL) or a slice's child, run by one group of the pool's
 * participants with barrier bar; a child's repacking is left to its parent (hm_moe_create_sliced).
 */
hm_status hm_moe_create_one(const hm_moe_params *p, hm_barrier *bar, hm_moe **out) {
    hm_moe *m = calloc(1, sizeof *m);
    if (!m) return hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory");
    m->p = *p;
    m->bar = bar;
    if (!m->p.max_tokens) m->p.max_tokens = DEFAULT_MAX;
    m->experts = malloc(sizeof *m->experts * (size_t)p->n_experts);
    m->mask = calloc((size_t)p->n_experts, 1);
    m->cnt = calloc((size_t)p->n_experts, sizeof *m->cnt);
    m->tpart = calloc((size_t)p->n_experts, sizeof *m->tpart);
    m->pbase = calloc((size_t)p->n_experts, sizeof *m->pbase);
    const int64_t hu = (p->hidden + UNIT - 1) / UNIT;
    m->dn_st = calloc((size_t)hu, sizeof *m->dn_st);
    m->dn_done = calloc((size_t)hu, sizeof *m->dn_done);
    m->no_decode_path = env_is("HMOE_MOE_DECODE", "0");
    m->route_full = env_is("HMOE_MOE_ROUTE", "full");
    m->no_mv_only = env_is("HMOE_MOE_DECODE_MV", "0");
    m->no_fused_h = env_is("HMOE_MOE_FUSE_H", "0");
    m->no_direct_out = env_is("HMOE_MOE_DIRECT_OUT", "0");
    m->no_flow = env_is("HMOE_MOE_FLOW", "0");
    m->dec_rows_env = env_rows("HMOE_MOE_DECODE_ROWS");
    m->no_steal = env_is("HMOE_MOE_STEAL", "0");
    m->steal_test = env_is("HMOE_MOE_STEAL", "test");
    m->no_static = env_is("HMOE_MOE_STATIC", "0");
    hm_status st = HM_OK;
    if (!m->experts || !m->mask || !m->cnt || !m->tpart || !m->pbase || !m->dn_st || !m->dn_done ||
        hm_moe_grow_act(m, p->n_experts)) {
        st = hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory");
        goto fail;
    }
    memcpy(m->experts, p->experts, sizeof *m->experts * (size_t)p->n_experts);
    if (p->mask) memcpy(m->mask, p->mask, (size_t)p->n_experts);
    m->tg = p->experts[0].gate.type;
    m->tu = p->experts[0].up.type;
    m->td = p->experts[0].down.type;
    if (hm_act_type(m->tg) != hm_act_type(m->tu)) {
        st = hm_errorf(HM_ERR_UNSUPPORTED, "moe: gate (%s) and up (%s) need different activations",
                       hm_type_name(m->tg), hm_type_name(m->tu));
        goto fail;
    }
    for (int e = 0; e < p->n_experts; e++) {
        hm_moe_expert *x = &m->experts[e];
        if ((st = check_matrix(&x->gate, p->inter, p->hidden, e, "gate", m->tg,
                               &x->gate.row_bytes)) ||
            (st = check_matrix(&x->up, p->inter, p->hidden, e, "up", m->tu, &x->up.row_bytes)) ||
            (st =
                 check_matrix(&x->down, p->hidden, p->inter, e, "down", m->td, &x->down.row_bytes)))
            goto fail;
    }
    if ((st = hm_cpu_ops_get(&m->ops))) goto fail;
    m->dot_g = hm_vec_dot_for(m->ops, m->tg);
    m->dot_u = hm_vec_dot_for(m->ops, m->tu);
    m->dot_d = hm_vec_dot_for(m->ops, m->td);
    m->dotn_g = hm_vec_dot_n_for(m->ops, m->tg);
    m->dotn_u = hm_vec_dot_n_for(m->ops, m->tu);
    m->dotn_d = hm_vec_dot_n_for(m->ops, m->td);
    m->d46_g = hm_vec_dot_46_for(m->ops, m->tg);
    m->d46_u = hm_vec_dot_46_for(m->ops, m->tu);
    m->d46_d = hm_vec_dot_46_for(m->ops, m->td);
#if defined(__x86_64__)
    m->amx = hm_moe_amx_wanted(p, m->ops);
#endif
    /* an expert takes the AMX path from the largest of its matrices' crossovers (per call, and
     * repacked) */
    for (int k = 0; k < 2; k++) {
        const int a = hm_tile_min_tokens(m->ops, m->tg, k),
                  b = hm_tile_min_tokens(m->ops, m->tu, k),
                  c = hm_tile_min_tokens(m->ops, m->td, k);
        m->tile_min[k] = a > b ? (a > c ? a : c) : (b > c ? b : c);
    }
    m->xq_bytes = hm_act_bytes(m->tg, p->hidden);
    m->hq_bytes = hm_act_bytes(m->td, p->inter);
    m->nth = bar ? bar->n : hm_pool_size(p->pool);
    m->dks = hm_calloc_aligned((size_t)m->nth, sizeof *m->dks, 64, "moe decode counters");
    if (!m->dks) {
        st = hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory");
        goto fail;
    }
    if ((st = hm_moe_scratch_bind(m, p->scratch))) goto fail;
    size_t amx_bytes = 0;
#if defined(__x86_64__)
    if (m->amx) {
        size_t a = hm_amx_scratch_bytes(m->tg, p->hidden),
               b = hm_amx_scratch_bytes(m->td, p->inter);
        amx_bytes = (a > b ? a : b) + 64;
    }
#endif
    m->tscratch_bytes = (amx_bytes + 63) & ~(size_t)63;
    if (m->amx && p->repack && hm_pool_busy(p->pool)) {
        st = hm_errorf(HM_ERR_INVALID_ARG,
                       "moe: cannot repack while the pool runs another submitted job");
        goto fail;
    }
    if (m->amx && p->repack && (st = hm_moe_repack(m, !bar))) goto fail;
    *out = m;
    return HM_OK;
fail:
    hm_moe_free(m);
    return st;
}

void hm_moe_free(hm_moe *m) {
    if (!m) return;
    if (m->sub) {
        hm_moe_wait(m);
        for (int i = 0; i < m->n_sub; i++) hm_moe_free(m->sub[i]);
        for (int i = 0; m->wcopy && i < m->n_sub; i++) hm_large_free(&m->wcopy[i]);
        free(m->sub), free(m->gstart), free(m->sl_i0), free(m->wcopy), free(m->copied);
        hm_free(m->bars);
        hm_moe_scratch_free(m->s);
        free(m);
        return;
    }
    hm_moe_wait(m);
    hm_moe_scratch_free(m->s);
    free(m->experts), free(m->mask), free(m->cnt), free(m->act), free(m->tpart), free(m->pbase);
    free(m->chunks), free(m->gu_done), free(m->h_ready), free(m->taken), free(m->pidx);
    free(m->packed);
    free(m->dn_st), free(m->dn_done);
    hm_free(m->dks);
    hm_large_free(&m->wpack);
    free(m);
}

hm_status hm_moe_set_mask(hm_moe *m, const uint8_t *mask) {
    if (m->in_flight)
        return hm_errorf(HM_ERR_INVALID_ARG, "moe: set_mask while a batch is in flight");
    for (int i = 0; i < m->n_sub; i++) {
        hm_status st = hm_moe_set_mask(m->sub[i], mask);
        if (st) return st;
    }
    if (m->n_sub) return HM_OK;
    if (mask)
        memcpy(m->mask, mask, (size_t)m->p.n_experts);
    else
        memset(m->mask, 0, (size_t)m->p.n_experts);
    return HM_OK;
}

const char *hm_moe_profile_name(int phase) {
    static const char *const names[HM_MOE_PROF_N] = {"activations", "pack x", "gate/up", "pack h",
                                                     "down"};
    return phase >= 0 && phase < HM_MOE_PROF_N ? names[phase] : "?";
}

void hm_moe_profile(hm_moe *m, double sec[HM_MOE_PROF_N], bool reset) {
    for (int i = 0; i < HM_MOE_PROF_N; i++) {
        double v = m->prof[i];
        for (int j = 0; j < m->n_sub; j++) v = fmax(v, m->sub[j]->prof[i]);
        if (sec) sec[i] = v;
        if (reset) {
            m->prof[i] = 0;
            for (int j = 0; j < m->n_sub; j++) m->sub[j]->prof[i] = 0;
        }
    }
}

void hm_moe_kernel_stats_get(hm_moe *m, hm_moe_kernel_stats *st, bool reset) {
    uint64_t v[KS_N] = {0};
    hm_moe *const self[1] = {m};
    hm_moe *const *all = m->n_sub ? m->sub : self;
    for (int j = 0; j < (m->n_sub ? m->n_sub : 1); j++)
        for (int i = 0; i < KS_N; i++)
            v[i] += reset ? atomic_exchange_explicit(&all[j]->ks[i], 0, memory_order_relaxed)
                          : atomic_load_explicit(&all[j]->ks[i], memory_order_relaxed);
    uint64_t d[DEC_N] = {0};
    for (int j = 0; j < (m->n_sub ? m->n_sub : 1); j++)
        for (int t = 0; t < all[j]->nth; t++) {
            for (int i = 0; i < DEC_N; i++) d[i] += all[j]->dks[t].v[i];
            if (reset) memset(all[j]->dks[t].v, 0, sizeof all[j]->dks[t].v);
        }
    if (!st) return;
    *st = (hm_moe_kernel_stats){
        .claims = v[KS_CLAIMS],
        .tokens = v[KS_TOKENS],
        .pack_x_s = 1e-9 * (double)v[KS_PACK_X],
        .glu_s = 1e-9 * (double)v[KS_GLU],
        .glu_ops = (double)v[KS_GLU_OPS],
        .pack_h_s = 1e-9 * (double)v[KS_PACK_H],
        .down_s = 1e-9 * (double)v[KS_DOWN],
        .down_ops = (double)v[KS_DOWN_OPS],
        .h_wait_s = 1e-9 * (double)v[KS_H_WAIT],
        .steals = v[KS_STEALS],
        .dec_jobs = d[DEC_JOBS],
        .dec_in_s = 1e-9 * (double)d[DEC_IN],
        .dec_gu_s = 1e-9 * (double)d[DEC_GU],
        .dec_down_s = 1e-9 * (double)d[DEC_DOWN],
        .dec_h_wait_s = 1e-9 * (double)d[DEC_HWAIT],
        .dec_barrier_s = 1e-9 * (double)d[DEC_BAR],
        .dec_sum_s = 1e-9 * (double)d[DEC_SUM],
        .dec_prep_s = 1e-9 * (double)v[KS_DEC_PREP],
        .dec_start_s = 1e-9 * (double)d[DEC_START],
    };
}

/* Starts fn on the pool: an async pool returns at once (the batch in flight until hm_moe_wait), a
 * sync one runs it to completion. */
void hm_moe_launch(hm_moe *m, hm_task_fn fn) {
    if (hm_pool_submit(m->p.pool, fn, m) == HM_OK) {
        m->in_flight = true;
        m->s->busy = m;
        return;
    }
    hm_pool_run(m->p.pool, fn, m);
}

hm_status hm_moe_submit(hm_moe *m, const void *x, hm_moe_dtype x_type, const int32_t *ids,
                        const float *w, int n_tok, int k, void *out, hm_moe_dtype out_type,
                        bool accumulate) {
    if (m->in_flight)
        return hm_errorf(HM_ERR_INVALID_ARG, "moe: submit while a batch is in flight");
    if (m->s->busy)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "moe: the scratch shared with another engine is in use by its batch in "
                         "flight (wait for it first)");
    if (hm_pool_busy(m->p.pool))
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "moe: the pool is still running another submitted job (wait for it "
                         "first)");
    if (m->n_sub)
        return hm_moe_submit_sliced(m, x, x_type, ids, w, n_tok, k, out, out_type, accumulate);
    const uint64_t t0 = hm_time_ns();
    hm_status st = hm_moe_prepare(m, x, x_type, ids, w, n_tok, k, out, out_type, accumulate);
    if (st || !m->run_job) return st;
    m->t_launch = hm_time_ns();
    if (m->decode)
        atomic_fetch_add_explicit(&m->ks[KS_DEC_PREP], m->t_launch - t0, memory_order_relaxed);
    hm_moe_launch(m, hm_moe_job);
    return HM_OK;
}

void hm_moe_wait(hm_moe *m) {
    if (!m || !m->in_flight) return;
    hm_pool_wait(m->p.pool);
    m->in_flight = false;
    m->s->busy = NULL;
}
