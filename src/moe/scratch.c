/* scratch.c - the expert engine's batch scratch: grown on demand, shared by the engines of a pool
 * (or of params.scratch), and each thread's own scratch. */
#include <pthread.h>
#include <stdlib.h>

#include "moe/moe_int.h"

/* Frees the scratch's buffers (it stays usable: they grow again on the next batch). */
void hm_moe_scratch_release(hm_moe_scratch *s) {
    void **bufs[] = {(void **)&s->tok,     (void **)&s->wt, (void **)&s->xf,  (void **)&s->xq,
                     (void **)&s->xq_need, (void **)&s->xa, (void **)&s->h,   (void **)&s->hq,
                     (void **)&s->px,      (void **)&s->ph, (void **)&s->acc, (void **)&s->part,
                     (void **)&s->sub_out};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        hm_free(*bufs[i]);
        *bufs[i] = NULL;
    }
    s->cap_tok = s->cap_wt = s->cap_xf = s->cap_xq = s->cap_xq_need = s->cap_xa = s->cap_h =
        s->cap_hq = s->cap_px = s->cap_ph = s->cap_acc = s->cap_part = s->cap_sub_out = 0;
    if (s->tscratch)
        for (int i = 0; i < s->nth; i++) {
            if (s->tscratch[i]) hm_free((size_t *)s->tscratch[i] - 8);
            s->tscratch[i] = NULL;
        }
}

hm_status hm_moe_scratch_create(hm_moe_scratch **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory for a scratch");
    atomic_init(&(*out)->refs, 1);
    return HM_OK;
}

/* The default scratch of the engines created without one: one per pool, shared by every engine
 * on it (a pool runs one job at a time, so they take turns anyway). A model's 48 layers with a
 * scratch each would hold 48 copies of the largest batch's buffers, and each layer's routing
 * would find its own cold (1 token on the device: 15-18 us per layer against 4-6 with one
 * scratch, bench moe --own-scratch, bench/RESULTS.md, 2026-12-01). The list is looked up and a
 * scratch's last reference dropped under one lock, so engines made and freed from different threads
 * (on different pools) stay safe. */
static pthread_mutex_t pool_scratch_mu = PTHREAD_MUTEX_INITIALIZER;
typedef struct pool_scratch {
    hm_moe_scratch *s;
    struct pool_scratch *next;
} pool_scratch;
static pool_scratch *pool_scratch_list;

void hm_moe_scratch_free(hm_moe_scratch *s) {
    if (!s) return;
    if (s->pool_key) {
        pthread_mutex_lock(&pool_scratch_mu);
        const bool last = atomic_fetch_sub(&s->refs, 1) == 1;
        for (pool_scratch **pp = &pool_scratch_list; last && *pp; pp = &(*pp)->next)
            if ((*pp)->s == s) {
                pool_scratch *e = *pp;
                *pp = e->next;
                free(e);
                break;
            }
        pthread_mutex_unlock(&pool_scratch_mu);
        if (!last) return;
    } else if (atomic_fetch_sub(&s->refs, 1) != 1) {
        return;
    }
    for (int i = 0; i < 64; i++) hm_moe_scratch_free(s->slice[i]);
    hm_moe_scratch_release(s);
    free(s->tscratch);
    free(s);
}

/* pool's default scratch, with a reference for the caller (created with the first engine) */
static hm_status pool_scratch_get(const hm_pool *pool, hm_moe_scratch **out) {
    hm_status st = HM_OK;
    pthread_mutex_lock(&pool_scratch_mu);
    pool_scratch *e = pool_scratch_list;
    while (e && e->s->pool_key != pool) e = e->next;
    if (e) {
        atomic_fetch_add(&e->s->refs, 1);
        *out = e->s;
    } else if ((e = calloc(1, sizeof *e)) == NULL || (st = hm_moe_scratch_create(&e->s))) {
        free(e);
        st = st ? st : hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory for a scratch");
    } else {
        e->s->pool_key = pool;
        e->next = pool_scratch_list;
        pool_scratch_list = e;
        *out = e->s;
    }
    pthread_mutex_unlock(&pool_scratch_mu);
    return st;
}

/* Binds the engine to its scratch (params.scratch, else its pool's default one; a sliced engine's
 * own, since its slices' scratches serve one split of the threads) for a pool of nth threads. */
hm_status hm_moe_scratch_bind(hm_moe *m, hm_moe_scratch *shared) {
    if (!shared) {
        hm_status st =
            m->p.n_slices > 1 ? hm_moe_scratch_create(&m->s) : pool_scratch_get(m->p.pool, &m->s);
        if (st) return st;
    } else {
        atomic_fetch_add(&shared->refs, 1);
        m->s = shared;
    }
    /* also the pool's default: a pool freed while its engines live on, and another made at its
     * address, would otherwise get per-thread slots for the old pool's thread count */
    if (m->s->nth && m->s->nth != m->nth) {
        const int had = m->s->nth;
        hm_moe_scratch_free(m->s);
        m->s = NULL;
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "moe: the shared scratch serves a pool of %d threads, this engine's pool "
                         "has %d",
                         had, m->nth);
    }
    if (!m->s->tscratch) {
        m->s->tscratch = calloc((size_t)m->nth, sizeof(void *));
        if (!m->s->tscratch) return hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory");
        m->s->nth = m->nth;
    }
    return HM_OK;
}

/* every thread's scratch at least need bytes (kept in a header word before the buffer) */
hm_status hm_moe_thread_scratch(hm_moe *m, size_t need) {
    for (int i = 0; i < m->nth; i++) {
        size_t *hdr = m->s->tscratch[i] ? (size_t *)m->s->tscratch[i] - 8 : NULL;
        if (hdr && hdr[0] >= need) continue;
        hm_free(hdr);
        hdr = hm_malloc_aligned(need + 64, 64, "moe thread scratch");
        m->s->tscratch[i] = hdr ? hdr + 8 : NULL;
        if (!hdr) return hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory for thread scratch");
        hdr[0] = need;
    }
    return HM_OK;
}

bool hm_moe_grow(void **p, size_t *cap, size_t need, const char *what) {
    if (need <= *cap) return true;
    hm_free(*p);
    *p = hm_malloc_aligned(need, 64, what);
    *cap = *p ? need : 0;
    return *p != NULL;
}
