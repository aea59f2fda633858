/* slices.c - NUMA slices: a parent engine of child engines over slices of the intermediate size,
 * each run by one group of the pool's threads, with optional copies of its share of the weights. */
#include <stdlib.h>
#include <string.h>

#include "moe/moe_int.h"
#include "core/cpu.h"
#include "core/log.h"
#include "core/timer.h"
#include "quant/fp16.h"
#include "quant/types.h"

static uint64_t block_of(uint32_t type) {
    const hm_type_info *ti = hm_type_get(type);
    return ti && ti->block ? ti->block : 1;
}

/* Expert x's share of the intermediate slice from i0 as views into its weights: gate and up
 * rows i0.., the down columns i0.. of every row (whole blocks), the biases' share; the down bias
 * only in slice 0 (added once). The rows are whole blocks (checked in hm_moe_create_sliced). */
static void slice_view(const hm_moe_expert *x, int64_t hidden, int64_t inter, int64_t i0,
                       bool first, hm_moe_expert *v) {
    uint64_t rbg = 0, rbu = 0, rbd = 0;
    hm_type_row_bytes(x->gate.type, (uint64_t)hidden, &rbg);
    hm_type_row_bytes(x->up.type, (uint64_t)hidden, &rbu);
    hm_type_row_bytes(x->down.type, (uint64_t)inter, &rbd);
    const size_t sg = x->gate.row_bytes ? x->gate.row_bytes : rbg;
    const size_t su = x->up.row_bytes ? x->up.row_bytes : rbu;
    const size_t sd = x->down.row_bytes ? x->down.row_bytes : rbd;
    const hm_type_info *ti = hm_type_get(x->down.type);
    *v = *x;
    v->gate.data = x->gate.data ? (const uint8_t *)x->gate.data + (size_t)i0 * sg : NULL;
    v->gate.row_bytes = sg;
    v->up.data = x->up.data ? (const uint8_t *)x->up.data + (size_t)i0 * su : NULL;
    v->up.row_bytes = su;
    v->down.data = x->down.data ? (const uint8_t *)x->down.data +
                                      (size_t)(i0 / (int64_t)block_of(x->down.type)) * ti->bytes
                                : NULL;
    v->down.row_bytes = sd; /* a column slice of every row */
    v->gate_bias = x->gate_bias ? x->gate_bias + i0 : NULL;
    v->up_bias = x->up_bias ? x->up_bias + i0 : NULL;
    v->down_bias = first ? x->down_bias : NULL;
}

/* The slices' bounds b[0..n] on whole blocks of the down type and its activation type. */
static hm_status slice_bounds(const hm_moe_params *p, int64_t *b) {
    const int n = p->n_slices;
    const uint32_t td = p->experts[0].down.type;
    uint64_t align = block_of(td), ab = block_of(hm_act_type(td));
    align = align > ab ? align : ab;
    const int64_t units = p->inter / (int64_t)align;
    if (p->inter % (int64_t)align || units < n)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "moe: intermediate size %lld cannot be split into %d slices of whole "
                         "%llu-value blocks (down type %s)",
                         (long long)p->inter, n, (unsigned long long)align, hm_type_name(td));
    for (int i = 0; i <= n; i++) b[i] = units * i / n * (int64_t)align;
    return HM_OK;
}

/* bytes of one expert's copy for a slice of ni rows: gate, up, down, each 64-byte aligned */
/* One expert's copy for a slice of ni rows: gate, up and down at off[0..2] (each 64-byte aligned,
 * rows packed at rb[0..2] bytes); returns its bytes. */
static size_t slice_copy_expert(const hm_moe_params *p, int64_t ni, size_t off[3], size_t rb[3]) {
    uint64_t g = 0, u = 0, d = 0;
    hm_type_row_bytes(p->experts[0].gate.type, (uint64_t)p->hidden, &g);
    hm_type_row_bytes(p->experts[0].up.type, (uint64_t)p->hidden, &u);
    hm_type_row_bytes(p->experts[0].down.type, (uint64_t)ni, &d);
    rb[0] = (size_t)g, rb[1] = (size_t)u, rb[2] = (size_t)d;
    off[0] = 0;
    off[1] = hm_align_up((size_t)ni * rb[0], 64);
    off[2] = off[1] + hm_align_up((size_t)ni * rb[1], 64);
    return off[2] + hm_align_up((size_t)p->hidden * rb[2], 64);
}

size_t hm_moe_slice_copy_bytes(const hm_moe_params *p) {
    if (!p || !p->experts || p->n_slices < 2 || p->n_slices > 64 || p->n_experts < 1 ||
        p->hidden < 1 || p->inter < 1)
        return 0;
    int64_t b[65];
    if (hm_kernel_check(p->experts[0].down.type, "down") || slice_bounds(p, b)) return 0;
    size_t n = 0;
    for (int e = 0; e < p->n_experts; e++) n += !(p->mask && p->mask[e]);
    size_t total = 0;
    size_t off[3], rb[3];
    for (int i = 0; i < p->n_slices; i++)
        total += n * slice_copy_expert(p, b[i + 1] - b[i], off, rb);
    return total;
}

/* NUMA node of a logical CPU, -1 if unknown */
static int cpu_node(int cpu) {
    const hm_topology *t = hm_topology_get();
    for (int i = 0; i < t->n_cpus; i++)
        if (t->cpus[i].cpu == cpu) return t->cpus[i].node;
    return -1;
}

/* The participants of each slice: g[i] .. g[i + 1] - 1 (see hm_moe_params.slice_threads); b: the
 * slices' bounds. */
static hm_status slice_groups(const hm_moe_params *p, int nth, const int64_t *b, int *g) {
    const int n = p->n_slices;
    g[0] = 0;
    if (p->slice_threads) {
        for (int i = 0; i < n; i++) {
            if (p->slice_threads[i] < 1)
                return hm_errorf(HM_ERR_INVALID_ARG, "moe: slice %d has %d threads", i,
                                 p->slice_threads[i]);
            g[i + 1] = g[i] + p->slice_threads[i];
            if (g[i + 1] > nth) break;
        }
        if (g[n] != nth)
            return hm_errorf(HM_ERR_INVALID_ARG,
                             "moe: the slices' threads do not add up to the pool's %d", nth);
        return HM_OK;
    }
    /* by node: the participants' CPUs form exactly n runs of one node each */
    int runs = 0, prev = -2;
    for (int i = 0; i < nth && runs <= n; i++) {
        const int cpu = hm_pool_cpu(p->pool, i), node = cpu < 0 ? -1 : cpu_node(cpu);
        if (node < 0) {
            runs = -1;
            break;
        }
        if (node != prev) {
            if (runs < n) g[runs] = i;
            runs++;
        }
        prev = node;
    }
    if (runs == n) {
        g[n] = nth;
        return HM_OK;
    }
    /* else threads in proportion to the slices' widths (blocks may make them uneven), at least
     * one each */
    for (int i = 1; i < n; i++) {
        const int v = (int)((nth * b[i] * 2 + b[n]) / (2 * b[n])), lo = g[i - 1] + 1,
                  hi = nth - (n - i);
        g[i] = v < lo ? lo : v > hi ? hi : v;
    }
    g[n] = nth;
    return HM_OK;
}

static int group_of(const hm_moe *m, int ith) {
    int s = 0;
    while (ith >= m->gstart[s + 1]) s++;
    return s;
}

typedef struct {
    hm_moe *m;             /* the sliced parent */
    atomic_llong next[64]; /* per slice: the next (expert, projection) to copy */
    repack_job rj[64];
} slice_init_job;

/* Each slice's group copies its share of the experts' weights into its own buffer (first touch:
 * the pages land on the group's node), then repacks from the copies. */
static void slice_init_task(int ith, int nth, void *arg) {
    (void)nth;
    slice_init_job *j = arg;
    hm_moe *m = j->m;
    const int s = group_of(m, ith), E = m->p.n_experts;
    hm_moe *c = m->sub[s];
    if (m->wcopy[s].ptr) {
        const int64_t ni = m->sl_i0[s + 1] - m->sl_i0[s];
        for (long long it;
             (it = atomic_fetch_add_explicit(&j->next[s], 1, memory_order_relaxed)) < 3LL * E;) {
            const int e = (int)(it / 3), k = (int)(it % 3);
            if (!m->copied[(size_t)s * (size_t)E + (size_t)e]) continue;
            hm_moe_expert src;
            slice_view(&m->p.experts[e], m->p.hidden, m->p.inter, m->sl_i0[s], s == 0, &src);
            const hm_moe_matrix *sm = k == 0 ? &src.gate : k == 1 ? &src.up : &src.down;
            const hm_moe_matrix *dm = k == 0   ? &c->experts[e].gate
                                      : k == 1 ? &c->experts[e].up
                                               : &c->experts[e].down;
            const int64_t rows = k < 2 ? ni : m->p.hidden;
            for (int64_t r = 0; r < rows; r++)
                memcpy((uint8_t *)dm->data + (size_t)r * dm->row_bytes,
                       (const uint8_t *)sm->data + (size_t)r * sm->row_bytes, dm->row_bytes);
        }
        hm_barrier_wait(&m->bars[s]);
    }
    if (c->wpack.ptr)
        hm_moe_repack_task(ith - m->gstart[s], m->gstart[s + 1] - m->gstart[s], &j->rj[s]);
}

hm_status hm_moe_create_sliced(const hm_moe_params *p, hm_moe **out) {
    const int n = p->n_slices, E = p->n_experts;
    if (n > 64) return hm_errorf(HM_ERR_INVALID_ARG, "moe: %d slices (at most 64)", n);
    const int nth = hm_pool_size(p->pool);
    if (nth < n)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "moe: %d slices need at least as many threads, the "
                         "pool has %d",
                         n, nth);
    if (hm_pool_busy(p->pool))
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "moe: cannot create a sliced engine while the pool runs another job");
    for (int e = 0; e < E; e++) {
        const hm_moe_expert *x = &p->experts[e];
        uint64_t rb;
        if (!hm_type_row_bytes(x->gate.type, (uint64_t)p->hidden, &rb) ||
            !hm_type_row_bytes(x->up.type, (uint64_t)p->hidden, &rb) ||
            !hm_type_row_bytes(x->down.type, (uint64_t)p->inter, &rb) ||
            x->down.type != p->experts[0].down.type || !hm_type_get(x->down.type))
            return hm_errorf(HM_ERR_INVALID_ARG,
                             "moe: expert %d: rows are not whole blocks, or its down type is not "
                             "expert 0's",
                             e);
    }
    hm_moe *m = calloc(1, sizeof *m);
    if (!m) return hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory");
    m->p = *p;
    m->n_sub = n;
    m->sub = calloc((size_t)n, sizeof *m->sub);
    m->gstart = calloc((size_t)n + 1, sizeof *m->gstart);
    m->sl_i0 = calloc((size_t)n + 1, sizeof *m->sl_i0);
    m->bars = hm_calloc_aligned((size_t)n, sizeof *m->bars, 64, "moe slice barriers");
    m->wcopy = calloc((size_t)n, sizeof *m->wcopy);
    m->copied = calloc((size_t)n * (size_t)E, 1);
    hm_moe_expert *ex = malloc(sizeof *ex * (size_t)E);
    hm_status st = HM_OK;
    if (!m->sub || !m->gstart || !m->sl_i0 || !m->bars || !m->wcopy || !m->copied || !ex) {
        st = hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory");
        goto done;
    }
    m->nth = nth;
    if ((st = slice_bounds(p, m->sl_i0)) || (st = slice_groups(p, nth, m->sl_i0, m->gstart)) ||
        (st = hm_moe_scratch_bind(m, p->scratch)))
        goto done;
    bool init = false;
    for (int i = 0; i < n && st == HM_OK; i++) {
        const int64_t i0 = m->sl_i0[i], ni = m->sl_i0[i + 1] - i0;
        hm_barrier_init(&m->bars[i], m->gstart[i + 1] - m->gstart[i], hm_pool_spin_us(p->pool));
        for (int e = 0; e < E; e++)
            slice_view(&p->experts[e], p->hidden, p->inter, i0, i == 0, &ex[e]);
        if (p->slice_copy) { /* views into the copy, filled by slice_init_task */
            size_t off[3], rb[3];
            const size_t per = slice_copy_expert(p, ni, off, rb);
            size_t need = 0;
            for (int e = 0; e < E; e++) need += !(p->mask && p->mask[e]) ? per : 0;
            if (need && (st = hm_large_alloc(need, true, "NUMA slice weights", &m->wcopy[i])))
                break;
            uint8_t *dst = m->wcopy[i].ptr;
            for (int e = 0; e < E && need; e++) {
                if (p->mask && p->mask[e]) continue; /* GPU-resident: left where it is */
                m->copied[(size_t)i * (size_t)E + (size_t)e] = 1;
                ex[e].gate.data = dst + off[0], ex[e].gate.row_bytes = rb[0];
                ex[e].up.data = dst + off[1], ex[e].up.row_bytes = rb[1];
                ex[e].down.data = dst + off[2], ex[e].down.row_bytes = rb[2];
                dst += per;
            }
            init |= need > 0;
        }
        hm_moe_params cp = *p;
        cp.n_slices = 0, cp.slice_threads = NULL, cp.slice_copy = false;
        /* the slices run at once: each its own scratch, shared with the same slice of the
         * engines that share this one's */
        if (!m->s->slice[i] && (st = hm_moe_scratch_create(&m->s->slice[i]))) break;
        cp.scratch = m->s->slice[i];
        cp.inter = ni;
        cp.experts = ex;
        if ((st = hm_moe_create_one(&cp, &m->bars[i], &m->sub[i]))) {
            st = hm_errorf(st, "moe: slice %d (inter %lld..%lld): %s", i, (long long)i0,
                           (long long)(i0 + ni), hm_last_error());
            break;
        }
        init |= m->sub[i]->wpack.ptr != NULL;
    }
    if (st == HM_OK && init) { /* copies and repacking, each slice by its own group */
        const uint64_t t0 = hm_time_ns();
        slice_init_job *j = calloc(1, sizeof *j);
        if (!j) {
            st = hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory");
            goto done;
        }
        j->m = m;
        for (int i = 0; i < n; i++) {
            atomic_init(&j->next[i], 0);
            j->rj[i].m = m->sub[i];
            atomic_init(&j->rj[i].next, 0);
        }
        hm_pool_run(p->pool, slice_init_task, j);
        free(j);
        size_t cb = 0;
        for (int i = 0; i < n; i++) cb += m->wcopy[i].size;
        hm_log(HM_LOG_DEBUG, "moe: %d slices: %.1f MB of weights copied, repacked, in %.1f ms", n,
               (double)cb * 1e-6, (double)(hm_time_ns() - t0) * 1e-6);
    }
done:
    free(ex);
    if (st) {
        hm_moe_free(m);
        return st;
    }
    *out = m;
    return HM_OK;
}

int hm_moe_slice_threads(const hm_moe *m, int *threads, int max) {
    if (!m || !m->n_sub) return 0;
    for (int i = 0; i < m->n_sub && i < max; i++) threads[i] = m->gstart[i + 1] - m->gstart[i];
    return m->n_sub;
}

/* A sliced engine's job: each group runs its slice's child job, then every participant sums its
 * share of the slices' partial outputs (in slice order) into the output. */
static void sliced_job(int ith, int nth, void *arg) {
    hm_moe *m = arg;
    const int s = group_of(m, ith);
    hm_moe *c = m->sub[s];
    if (c->run_job) hm_moe_job(ith - m->gstart[s], m->gstart[s + 1] - m->gstart[s], c);
    hm_pool_barrier(m->p.pool);
    const size_t per = (size_t)m->n_tok * (size_t)m->p.hidden, lines = (per + 15) / 16;
    const size_t j0 = lines * (size_t)ith / (size_t)nth * 16,
                 j1e = lines * (size_t)(ith + 1) / (size_t)nth * 16, j1 = j1e < per ? j1e : per;
    for (size_t j = j0; j < j1; j++) {
        float v = 0.0f;
        for (int i = 0; i < m->n_sub; i++) v += m->s->sub_out[per * (size_t)i + j];
        if (m->out_type == HM_MOE_F32) {
            float *o = (float *)m->out + j;
            *o = m->accumulate ? *o + v : v;
        } else {
            hm_bf16 *o = (hm_bf16 *)m->out + j;
            *o = hm_f32_to_bf16(m->accumulate ? hm_bf16_to_f32(*o) + v : v);
        }
    }
}

hm_status hm_moe_submit_sliced(hm_moe *m, const void *x, hm_moe_dtype x_type, const int32_t *ids,
                               const float *w, int n_tok, int k, void *out, hm_moe_dtype out_type,
                               bool accumulate) {
    if ((out_type != HM_MOE_F32 && out_type != HM_MOE_BF16) || n_tok < 0 || (n_tok && !out))
        return hm_errorf(HM_ERR_INVALID_ARG, "moe: bad output (type %d, %d tokens)", (int)out_type,
                         n_tok);
    const size_t per = (size_t)n_tok * (size_t)m->p.hidden;
    hm_moe_scratch *S = m->s;
    if (!hm_moe_grow((void **)&S->sub_out, &S->cap_sub_out,
                     sizeof(float) * per * (size_t)m->n_sub + 64, "moe slice outputs"))
        return hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory for a batch of %d tokens", n_tok);
    for (int i = 0; i < m->n_sub; i++) {
        hm_status st = hm_moe_prepare(m->sub[i], x, x_type, ids, w, n_tok, k,
                                      S->sub_out + per * (size_t)i, HM_MOE_F32, false);
        if (st) return st;
    }
    if (per == 0) return HM_OK;
    m->out = out, m->out_type = out_type, m->accumulate = accumulate, m->n_tok = n_tok;
    const uint64_t t_launch = hm_time_ns(); /* the children's decode statistics start here */
    for (int i = 0; i < m->n_sub; i++) m->sub[i]->t_launch = t_launch;
    hm_moe_launch(m, sliced_job);
    return HM_OK;
}
