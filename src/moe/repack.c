/* repack.c - the expert engine's AMX int8 path: whether experts take it, and their weights
 * repacked once into tile units at create (hm_moe_params.repack). */
#include <stdlib.h>

#include "moe/moe_int.h"
#include "core/log.h"
#include "core/timer.h"

/* whether experts with many tokens take the AMX int8 path: integer-quantized weights only (float
 * weights keep the exact kernels rather than losing precision to an int8 re-quantization) */
bool hm_moe_amx_wanted(const hm_moe_params *p, const hm_cpu_ops *ops) {
    return !p->no_amx && hm_i8_matmul_ok(ops) && p->experts &&
           hm_act_type(p->experts[0].gate.type) != HM_TYPE_F32 &&
           hm_act_type(p->experts[0].down.type) != HM_TYPE_F32;
}

static void repack_sizes(const hm_moe_params *p, size_t *gu, size_t *expert) {
    size_t g = 0, d = 0;
#if defined(__x86_64__)
    g = hm_align_up(hm_amx_wpack_bytes(p->inter, p->hidden), 64);
    d = hm_align_up(hm_amx_wpack_bytes(p->hidden, p->inter), 64);
#endif
    *gu = g;
    *expert = 2 * g + d;
}

size_t hm_moe_repack_bytes(const hm_moe_params *p) {
    const hm_cpu_ops *ops;
    if (!p || !p->experts || p->n_experts < 1 || hm_cpu_ops_get(&ops) || !hm_moe_amx_wanted(p, ops))
        return 0;
    size_t gu, ex, n = 0;
    repack_sizes(p, &gu, &ex);
    for (int e = 0; e < p->n_experts; e++) n += !(p->mask && p->mask[e]);
    return n * ex;
}

/* work items: (expert, projection, 8 units); scratch from the thread's tscratch */
void hm_moe_repack_task(int ith, int nth, void *arg) {
    (void)nth;
#if defined(__x86_64__)
    repack_job *j = arg;
    hm_moe *m = j->m;
    const int64_t H = m->p.hidden, I = m->p.inter;
    const int64_t ug = (I + UNIT - 1) / UNIT, ud = (H + UNIT - 1) / UNIT;
    const int64_t ig = (ug + 7) / 8, id = (ud + 7) / 8, per = 2 * ig + id;
    const int64_t total = per * m->p.n_experts;
    for (;;) {
        const int64_t it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (it >= total) break;
        const int e = (int)(it / per);
        if (!m->packed[e]) continue;
        int64_t k = it % per;
        const hm_moe_expert *x = &m->experts[e];
        uint8_t *base = (uint8_t *)m->wpack.ptr + (size_t)e * m->wp_expert;
        /* in the swapped kernels' layout where the variant has them */
        void (*pack)(uint32_t, const void *, size_t, int64_t, int64_t, int64_t, int64_t, void *,
                     void *) = m->ops->i8_down_acc ? hm_amx_wpack_vnni : hm_amx_wpack;
        if (k < 2 * ig) {
            const hm_moe_matrix *w = k < ig ? &x->gate : &x->up;
            const int64_t u0 = (k % ig) * 8;
            pack(w->type, w->data, w->row_bytes, I, H, u0, u0 + 8, base + (k < ig ? 0 : m->wp_gu),
                 m->s->tscratch[ith]);
        } else {
            const int64_t u0 = (k - 2 * ig) * 8;
            pack(x->down.type, x->down.data, x->down.row_bytes, H, I, u0, u0 + 8,
                 base + 2 * m->wp_gu, m->s->tscratch[ith]);
        }
    }
#else
    (void)ith, (void)arg;
#endif
}

/* run false: a child engine's repacking, which its parent runs for every slice in one job */
hm_status hm_moe_repack(hm_moe *m, bool run) {
    const uint64_t t0 = hm_time_ns();
    repack_sizes(&m->p, &m->wp_gu, &m->wp_expert);
    m->packed = calloc((size_t)m->p.n_experts, 1);
    if (!m->packed) return hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory");
    size_t n = 0;
    for (int e = 0; e < m->p.n_experts; e++) n += m->packed[e] = !m->mask[e];
    if (!n) return HM_OK;
    hm_status st = hm_large_alloc(m->wp_expert * (size_t)m->p.n_experts, true,
                                  "repacked expert weights", &m->wpack);
    if (st) return st;
    if ((st = hm_moe_thread_scratch(m, m->tscratch_bytes + 64))) return st;
    if (!run) return HM_OK;
    repack_job j = {m, 0};
    hm_pool_run(m->p.pool, hm_moe_repack_task, &j);
    hm_log(HM_LOG_DEBUG, "moe: repacked %zu experts (%.1f MB) in %.1f ms", n,
           (double)(n * m->wp_expert) * 1e-6, (double)(hm_time_ns() - t0) * 1e-6);
    return HM_OK;
}
