/* moe.c - the CPU expert engine (include/hmoe_moe.h).
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
 */
#include "hmoe_moe.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/cpu.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/timer.h"
#include "cpu/matvec.h"
#include "cpu/ops.h"
#include "quant/fp16.h"
#include "quant/types.h"

/* hm_moe_kernel_stats counters */
enum {
    KS_CLAIMS,
    KS_TOKENS,
    KS_PACK_X,
    KS_GLU,
    KS_PACK_H,
    KS_GLU_OPS,
    KS_DOWN,
    KS_DOWN_OPS,
    KS_H_WAIT,
    KS_STEALS,
    KS_DEC_PREP, /* the caller's routing of decode batches (it alone adds) */
    KS_N
};

/* The decode path's counters of hm_moe_kernel_stats, per participant: each thread adds to its
 * own line with plain stores at the end of a job (one contended atomic per counter and thread
 * would sit at every layer's end, where the job waits for its slowest participant) */
enum { DEC_IN, DEC_GU, DEC_DOWN, DEC_HWAIT, DEC_BAR, DEC_SUM, DEC_JOBS, DEC_START, DEC_N };
typedef struct {
    _Alignas(64) uint64_t v[DEC_N];
} dec_slot;

#define UNIT 32 /* rows per work unit (the AMX row group) */
/* units per claim in the phased AMX path (an expert's activations, or a chunk's hidden rows, then
 * serve 4 units from the claiming core's L2) */
#define BLOCK 4
/* tokens per weight read of the matvec kernels (batches of more: their experts busiest first) */
#define MATVEC_MAX  4
#define DEFAULT_MAX 1024
/* The decode path (job_decode) takes batches of up to this many assignments when no expert is on
 * the AMX path. Device (16 threads, bench moe --layers 8, 3 rounds), against the phased path
 * (HMOE_MOE_DECODE=0), Q4_K: 8 tokens 8.4-9.6 ms against 10.5-11.3, 32 tokens 24.4-26.1 against
 * 28.9-31.4, 64 tokens (512 assignments) 39.1-40.7 against 44.9-45.7; Q6_K 4-20% faster too
 * (bench/RESULTS.md, thirteenth session). */
#define DECODE_ROWS_MAX 512

typedef struct {
    int e, n;    /* expert, its token count in this batch (this part's) */
    int part;    /* an expert with more tokens than a tile block is split into parts */
    int64_t off; /* first assignment (index into tok/wt and the rows of h) */
    bool amx;
    size_t px_off, ph_off; /* packed activations (AMX) in px / ph */
    int claims;            /* its gate/up claims */
    int g;                 /* units per gate/up claim */
    bool fused;            /* AMX claims of one scale group: h packed for down as it is made */
    bool own_x; /* each fused claim packs the expert's x into its own thread's tile (not px) */
} active_expert;

typedef struct {
    int a0, a1;   /* active experts [a0, a1) */
    int64_t rows; /* assignments of the chunk */
    bool any_amx;
    bool any_px; /* some expert's x is packed into px, in the phase before gate/up */
    /* every expert's h is packed by its own gate/up claims (fused): down then takes each expert
     * once its claims are done (gu_done), with no barrier between the phases */
    bool flow;
    /* next expert not yet taken in the gate/up phase, next unclaimed unit of down: threads
     * claim work a little at a time, so a thread slowed down (a busy core, a far memory
     * channel) takes less of it */
    atomic_llong gu_next, dn_next;
    uint32_t epoch; /* tags this chunk's down claim states (hm_moe.dn_st) */
} chunk;

/* Batch scratch, grown on demand between batches (every capacity in bytes, so engines of other
 * types and shapes can share it); shared by engines that run one after another (a model's
 * layers), see hm_moe_scratch_create. */
struct hm_moe_scratch {
    atomic_int refs;
    int nth;            /* threads of the pool it serves (0: not yet bound) */
    const hm_moe *busy; /* the engine whose batch is in flight on it, or NULL */
    int32_t *tok;       /* [assignments] token of each assignment, sorted by expert */
    float *wt;          /* [assignments] its weight */
    float *xf;          /* [n_tok][hidden] bf16 input as f32 */
    uint8_t *xq;        /* [n_tok][xq_bytes] */
    uint8_t *xq_need;   /* [n_tok] 1: the token goes to a matvec expert and needs xq */
    uint8_t *xa;        /* [n_tok][xa_bytes] int8 rows for the AMX experts (quantized once) */
    float *h;           /* [chunk assignments][inter] */
    uint8_t *hq;        /* [chunk assignments][hq_bytes] */
    uint8_t *px, *ph;   /* packed AMX activations of the chunk */
    float *acc;         /* [n_tok][hidden] */
    float *part;        /* decode: [chunk assignments][hidden] weighted down outputs */
    void **tscratch;    /* [nth] per thread: AMX scratch + gate/up/down tiles */
    size_t cap_tok, cap_wt, cap_xf, cap_xq, cap_xq_need, cap_xa, cap_h, cap_hq, cap_px, cap_ph,
        cap_acc, cap_part;
    /* sliced engines: their partial outputs [slices][n_tok][hidden], and one scratch per slice
     * for their children (created when first needed, released with this one) */
    float *sub_out;
    size_t cap_sub_out;
    hm_moe_scratch *slice[64];
    const hm_pool *pool_key; /* a pool's default scratch (pool_scratch_get): that pool */
};

struct hm_moe {
    hm_moe_params p;
    hm_moe_expert *experts;
    uint8_t *mask;
    const hm_cpu_ops *ops;
    bool amx;
    int tile_min[2]; /* tokens from which an expert takes the AMX path: per call, repacked */
    uint32_t tg, tu, td;
    hm_vec_dot_fn dot_g, dot_u, dot_d;
    hm_vec_dot_n_fn dotn_g, dotn_u, dotn_d; /* their multi-token twins (NULL: none) */
    hm_vec_dot_46_fn d46_g, d46_u, d46_d;   /* 4 rows by 6 tokens (NULL: none; float types) */
    size_t xq_bytes, hq_bytes;              /* matvec activation bytes per token (hidden / inter) */
    int nth;
    /* per-batch state */
    bool in_flight;
    const void *x;
    hm_moe_dtype x_type, out_type;
    void *out;
    bool accumulate;
    int n_tok;
    int *cnt;           /* [n_experts] */
    active_expert *act; /* [cap_act] */
    int n_act, cap_act;
    chunk *chunks;      /* [cap_act], as gu_done, taken, h_ready and pidx */
    int *pidx;          /* [cap_act] active index of (expert e, part p) at pbase[e] + p */
    int *tpart, *pbase; /* [n_experts] tokens per part of each expert, its first pidx slot */
    int n_chunks;
    hm_moe_scratch *s; /* batch scratch: the engine's own or one shared (params.scratch) */
    /* this batch's sums [n_tok][hidden]: the output itself where it is float32, overwritten and
     * apart from x (no copy at the end), else s->acc (written out converted or added) */
    float *acc;
    size_t xa_bytes;
    bool xa_need; /* this batch has AMX experts */
    size_t tscratch_bytes;
    size_t tb_bytes; /* this batch's float tile per thread, after tscratch_bytes; then own x */
    /* decode path (one chunk, matvec only): per active expert, gate/up units done and h ready;
     * part: [chunk assignments][hidden] weighted down outputs, summed per token at the end */
    atomic_int *gu_done, *h_ready;
    atomic_int *taken; /* [active experts] gate/up claims taken (prefill) */
    /* down claims, by their first output unit u: dn_st[u] = the chunk's epoch << 32 | units the
     * owner still has << 24 | the next walk position it starts; dn_done[u] = walk positions it
     * has finished (see down_phase) */
    _Atomic uint64_t *dn_st;
    atomic_int *dn_done;
    uint32_t dn_epoch;
    bool no_steal;   /* HMOE_MOE_STEAL=0: down claims are never split (A/B) */
    bool no_static;  /* HMOE_MOE_STATIC=0: down claims in arrival order, not own shares (A/B) */
    bool steal_test; /* HMOE_MOE_STEAL=test: participant 0 only splits claims, whose owners
                        pause after each expert (tests: claims are split) */
    /* hm_moe_kernel_stats: counts, thread-nanoseconds and int8 ops in the AMX paths' parts,
     * added once per phase from each thread's own counters */
    _Atomic uint64_t ks[KS_N];
    bool decode;
    int64_t dec_gu, dec_du; /* decode: gate/up and down rows per claim (decode_rows) */
    int dec_rows_env;       /* HMOE_MOE_DECODE_ROWS=N: N rows per decode claim (A/B), else 0 */
    uint64_t t_launch;      /* hm_time_ns() when the job was launched (decode statistics) */
    dec_slot *dks;          /* [nth] the decode counters, one line per participant */
    bool pre_done;   /* decode of 1-2 tokens: the caller converted x before the job (no barrier) */
    bool route_full; /* HMOE_MOE_ROUTE=full: the counting sort for every batch (A/B, tests) */
    bool no_decode_path; /* HMOE_MOE_DECODE=0: always the phased path (A/B benchmarks) */
    bool no_fused_h;     /* HMOE_MOE_FUSE_H=0: h packed in its own phase (A/B, tests) */
    bool no_direct_out;  /* HMOE_MOE_DIRECT_OUT=0: sums always in s->acc, then copied (A/B) */
    bool no_flow;        /* HMOE_MOE_FLOW=0: a barrier between gate/up and down (A/B) */
    /* NUMA slices: child engines over slices of inter [sl_i0[i], sl_i0[i + 1]), each run by one
     * group of the pool's participants [gstart[i], gstart[i + 1]) with its own barrier, into its
     * own output; with slice_copy, each slice's share of the experts' weights in wcopy[i] */
    int n_sub;
    hm_moe **sub;
    int *gstart;      /* [n_sub + 1] */
    int64_t *sl_i0;   /* [n_sub + 1] */
    hm_barrier *bars; /* [n_sub] */
    hm_large *wcopy;  /* [n_sub] */
    uint8_t *copied;  /* [n_sub][n_experts] 1: the child's views of expert e point into wcopy */
    /* a child engine: its group's barrier (NULL: the whole pool's), and whether the batch it
     * prepared has work for the job */
    hm_barrier *bar;
    bool run_job;
    /* repack: expert e's gate, up, down int8 tile units at wpack + e * wp_expert (+ wp_gu for
     * up, + 2 * wp_gu for down) when packed[e] */
    hm_large wpack;
    size_t wp_expert, wp_gu;
    uint8_t *packed;
    /* participant 0's seconds per phase of the phased path, barrier waits included */
    double prof[HM_MOE_PROF_N];
};

hm_moe_params hm_moe_default_params(void) {
    hm_moe_params p;
    memset(&p, 0, sizeof p);
    p.act = HM_MOE_SILU;
    p.swiglu_alpha = 1.702f;
    p.swiglu_limit = 7.0f;
    return p;
}

/* Frees the scratch's buffers (it stays usable: they grow again on the next batch). */
static void scratch_release(hm_moe_scratch *s) {
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
 * scratch each held 48 copies of the largest batch's buffers, and each layer's routing found its
 * own cold (1 token on the device: 15-18 us per layer against 4-6 with one scratch, bench
 * moe --own-scratch, bench/RESULTS.md sixteenth session). The list is looked up and a scratch's
 * last reference dropped under one lock, so engines made and freed from different threads (on
 * different pools) stay safe. */
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
    scratch_release(s);
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
static hm_status scratch_bind(hm_moe *m, hm_moe_scratch *shared) {
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

static hm_status create_sliced(const hm_moe_params *p, hm_moe **out);
static hm_status create_one(const hm_moe_params *p, hm_barrier *bar, hm_moe **out);

/* whether experts with many tokens take the AMX int8 path: integer-quantized weights only (float
 * weights keep the exact kernels rather than losing precision to an int8 re-quantization) */
static bool amx_wanted(const hm_moe_params *p, const hm_cpu_ops *ops) {
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
    if (!p || !p->experts || p->n_experts < 1 || hm_cpu_ops_get(&ops) || !amx_wanted(p, ops))
        return 0;
    size_t gu, ex, n = 0;
    repack_sizes(p, &gu, &ex);
    for (int e = 0; e < p->n_experts; e++) n += !(p->mask && p->mask[e]);
    return n * ex;
}

typedef struct {
    hm_moe *m;
    atomic_llong next;
} repack_job;

/* work items: (expert, projection, 8 units); scratch from the thread's tscratch */
static void repack_task(int ith, int nth, void *arg) {
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

/* every thread's scratch at least need bytes (kept in a header word before the buffer) */
static hm_status thread_scratch(hm_moe *m, size_t need) {
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

/* run false: a child engine's repacking, which its parent runs for every slice in one job */
static hm_status repack(hm_moe *m, bool run) {
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
    if ((st = thread_scratch(m, m->tscratch_bytes + 64))) return st;
    if (!run) return HM_OK;
    repack_job j = {m, 0};
    hm_pool_run(m->p.pool, repack_task, &j);
    hm_log(HM_LOG_DEBUG, "moe: repacked %zu experts (%.1f MB) in %.1f ms", n,
           (double)(n * m->wp_expert) * 1e-6, (double)(hm_time_ns() - t0) * 1e-6);
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
    if (p->n_slices > 1) return create_sliced(p, out);
    return create_one(p, NULL, out);
}

/* The per-active-expert arrays for at least n entries (between batches); nonzero when out of
 * memory (the old arrays are kept then). */
static int grow_act(hm_moe *m, int n) {
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
 * participants with barrier bar; a child's repacking is left to its parent (create_sliced). */
static hm_status create_one(const hm_moe_params *p, hm_barrier *bar, hm_moe **out) {
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
    m->no_fused_h = env_is("HMOE_MOE_FUSE_H", "0");
    m->no_direct_out = env_is("HMOE_MOE_DIRECT_OUT", "0");
    m->no_flow = env_is("HMOE_MOE_FLOW", "0");
    m->dec_rows_env = env_rows("HMOE_MOE_DECODE_ROWS");
    m->no_steal = env_is("HMOE_MOE_STEAL", "0");
    m->steal_test = env_is("HMOE_MOE_STEAL", "test");
    m->no_static = env_is("HMOE_MOE_STATIC", "0");
    hm_status st = HM_OK;
    if (!m->experts || !m->mask || !m->cnt || !m->tpart || !m->pbase || !m->dn_st || !m->dn_done ||
        grow_act(m, p->n_experts)) {
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
    m->amx = amx_wanted(p, m->ops);
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
    if ((st = scratch_bind(m, p->scratch))) goto fail;
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
    if (m->amx && p->repack && (st = repack(m, !bar))) goto fail;
    *out = m;
    return HM_OK;
fail:
    hm_moe_free(m);
    return st;
}

static uint64_t block_of(uint32_t type) {
    const hm_type_info *ti = hm_type_get(type);
    return ti && ti->block ? ti->block : 1;
}

/* Expert x's share of the intermediate slice from i0 as views into its weights: gate and up
 * rows i0.., the down columns i0.. of every row (whole blocks), the biases' share; the down bias
 * only in slice 0 (added once). The rows are whole blocks (checked in create_sliced). */
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
    if (c->wpack.ptr) repack_task(ith - m->gstart[s], m->gstart[s + 1] - m->gstart[s], &j->rj[s]);
}

static hm_status create_sliced(const hm_moe_params *p, hm_moe **out) {
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
        (st = scratch_bind(m, p->scratch)))
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
        if ((st = create_one(&cp, &m->bars[i], &m->sub[i]))) {
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

/* ---------------------------------------------------------------- activations */

static inline float act_fn(const hm_moe *m, float g, float u) {
    switch (m->p.act) {
    case HM_MOE_GELU:
        return 0.5f * g * (1.0f + erff(g * 0.70710678118654752f)) * u;
    case HM_MOE_SWIGLU_OAI: {
        const float lim = m->p.swiglu_limit;
        g = g < lim ? g : lim;
        u = u < -lim ? -lim : (u > lim ? lim : u);
        return (u + 1.0f) * (g / (1.0f + expf(-m->p.swiglu_alpha * g)));
    }
    default:
        return g / (1.0f + expf(-g)) * u;
    }
}

static inline const float *x_row(const hm_moe *m, int t) {
    return m->x_type == HM_MOE_BF16 ? m->s->xf + (size_t)t * (size_t)m->p.hidden
                                    : (const float *)m->x + (size_t)t * (size_t)m->p.hidden;
}

/* ---------------------------------------------------------------- the job */

static void span(int64_t n, int ith, int nth, int64_t *a, int64_t *b) {
    *a = n * ith / nth;
    *b = n * (ith + 1) / nth;
}

static void phase_pre(hm_moe *m, int ith, int nth) {
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

/* Whether expert ae runs the swapped-operand tile kernels (repacked weights on an AMX variant):
 * its inputs and hidden rows are then packed as row tiles (the _rt packers). */
static bool swapped(const hm_moe *m, const active_expert *ae) {
    return ae->amx && m->packed && m->packed[ae->e] && m->ops->i8_down_acc;
}

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

/* SiLU without biases: the activation the GLU tile kernels compute themselves */
static bool plain_silu(const hm_moe *m, const active_expert *ae) {
    const hm_moe_expert *x = &m->experts[ae->e];
    return m->p.act == HM_MOE_SILU && !x->gate_bias && !x->up_bias;
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
static void gate_up_unit(hm_moe *m, const active_expert *ae, int64_t hrow0, int64_t r0, int64_t r1,
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

/* Down rows [r0, r1) of expert ae on the matvec kernels, its tokens' h at rows hq0.. of hq, in
 * chunks and blocks as gate_up_rows. Each product d goes out weighted, w (d + bias): into the
 * assignment's row of `part` (to_part: the decode path) or added to the token's row of acc. */
static inline __attribute__((always_inline)) void down_rows(hm_moe *m, const active_expert *ae,
                                                            int64_t hq0, int64_t r0, int64_t r1,
                                                            const bool to_part) {
    const hm_moe_expert *x = &m->experts[ae->e];
    const int64_t I = m->p.inter, H = m->p.hidden;
    const size_t rb = x->down.row_bytes;
    const uint8_t *dw = (const uint8_t *)x->down.data;
    /* DOWN_OUT(t, r, dv, b): out with the product dv of row r and the expert's token t, bias b */
#define DOWN_OUT(t, r, dv, b)                                                                      \
    do {                                                                                           \
        const float v_ = m->s->wt[ae->off + (t)] * ((dv) + (b));                                   \
        if (to_part)                                                                               \
            m->s->part[(size_t)(ae->off + (t)) * (size_t)H + (size_t)(r)] = v_;                    \
        else                                                                                       \
            m->acc[(size_t)m->s->tok[ae->off + (t)] * (size_t)H + (size_t)(r)] += v_;              \
    } while (0)
    const bool b46 = m->d46_d && ae->n >= HM_D46_MIN_TOKENS;
    const int n6 = b46 ? ae->n / 6 * 6 : 0;
    const int64_t ch = b46 ? 32 : r1 - r0;
    for (int64_t rc = r0; rc < r1; rc += ch) {
        const int64_t re = r1 - rc < ch ? r1 : rc + ch, r4 = rc + (re - rc) / 4 * 4;
        for (int t6 = 0; t6 < n6; t6 += 6) {
            const void *hs[6];
            for (int t = 0; t < 6; t++) hs[t] = m->s->hq + (size_t)(hq0 + t6 + t) * m->hq_bytes;
            for (int64_t r = rc; r < r4; r += 4) {
                float d[24];
                m->d46_d(I, dw + (size_t)r * rb, rb, hs, d);
                for (int i = 0; i < 4; i++) {
                    const float b = x->down_bias ? x->down_bias[r + i] : 0.0f;
                    for (int t = 0; t < 6; t++) DOWN_OUT(t6 + t, r + i, d[t * 4 + i], b);
                }
            }
        }
        /* each weight row read once for up to 4 tokens */
        for (int64_t r = rc; r < re; r++) {
            const float b = x->down_bias ? x->down_bias[r] : 0.0f;
            for (int t0 = r < r4 ? n6 : 0; t0 < ae->n; t0 += 4) {
                const int nt = ae->n - t0 < 4 ? ae->n - t0 : 4;
                const void *hs[4];
                for (int t = 0; t < nt; t++)
                    hs[t] = m->s->hq + (size_t)(hq0 + t0 + t) * m->hq_bytes;
                float d[4];
                hm_dot_rows(m->dot_d, m->dotn_d, I, dw + (size_t)r * rb, hs, nt, d);
                for (int t = 0; t < nt; t++) DOWN_OUT(t0 + t, r, d[t], b);
            }
        }
    }
#undef DOWN_OUT
}

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
    gate_up_unit(m, ae, ae->off - base, r0, re, scr, tb);
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

/* this thread's output rows [r0, r1) of every token, from acc to out */
static void write_out(hm_moe *m, int64_t r0, int64_t r1) {
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

/* Rows per decode claim of a matrix of `rows` rows over na experts: whole UNITs, as many as keep
 * at least min_claims claims and a claim within cap bytes. Every claim is a stream of its own: its
 * first lines arrive with nothing prefetched ahead of them, and its last prefetches (the kernels
 * fetch a fixed distance ahead) run into rows another thread reads. Fixed 32-row claims (a
 * Qwen3-30B down claim is 13.8 KiB) decoded 14-17% slower on the development machine (2 threads,
 * means of 8 alternations; bench/RESULTS.md); the gate/up claims, larger, come first and the
 * small down claims last, so the threads still end together. Gate/up claims take up to 1 MiB
 * since the nineteenth session (256 KiB had cut them to 32 rows for models with long rows:
 * DeepSeek-V3, Qwen3-235B, Mixtral); down claims stay within 256 KiB, since larger ones at the
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

/* The decode path: one chunk, every expert on the matvec kernels (1-4 tokens each). Gate/up
 * claims (expert, dec_gu rows) and then down claims (expert, dec_du output rows) are taken from
 * one sequence; the thread that finishes an expert's last gate/up claim converts its h and marks
 * it ready, and a down claim waits only for its own expert. Down writes weighted rows per
 * assignment into `part`; one barrier, then each thread sums its output rows over the assignments.
 */
/* the barrier of the participants running this engine: the pool's, or a slice group's */
static inline void moe_barrier(hm_moe *m) {
    if (m->bar)
        hm_barrier_wait(m->bar);
    else
        hm_pool_barrier(m->p.pool);
}

static void job_decode(hm_moe *m, int ith, int nth) {
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
        phase_pre(m, ith, nth);
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
            gate_up_unit(m, ae, ae->off, r0, r1, NULL, NULL);
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
    write_out(m, R0, R1);
    const uint64_t t_out = hm_time_ns();
    ks[DEC_BAR] = t_bar - t_claims;
    ks[DEC_SUM] = t_out - t_bar;
    ks[DEC_IN] = t_out - t_in;
    ks[DEC_JOBS] = 1;
    uint64_t *own = m->dks[ith].v;
    for (int i = 0; i < DEC_N; i++) own[i] += ks[i];
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
        if (last) write_out(m, u * UNIT, u * UNIT + own * UNIT < H ? u * UNIT + own * UNIT : H);
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
        if (last) write_out(m, r, re);
    }
    ks_add(m, ks);
}

static void job(int ith, int nth, void *arg) {
    hm_moe *m = arg;
    if (m->decode) {
        job_decode(m, ith, nth);
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
        write_out(m, R0, R1);
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
    phase_pre(m, ith, nth);
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

/* ---------------------------------------------------------------- submit */

static bool grow(void **p, size_t *cap, size_t need, const char *what) {
    if (need <= *cap) return true;
    hm_free(*p);
    *p = hm_malloc_aligned(need, 64, what);
    *cap = *p ? need : 0;
    return *p != NULL;
}

static hm_status prepare(hm_moe *m, const void *x, hm_moe_dtype x_type, const int32_t *ids,
                         const float *w, int n_tok, int k, void *out, hm_moe_dtype out_type,
                         bool accumulate);

/* A sliced engine's job: each group runs its slice's child job, then every participant sums its
 * share of the slices' partial outputs (in slice order) into the output. */
static void sliced_job(int ith, int nth, void *arg) {
    hm_moe *m = arg;
    const int s = group_of(m, ith);
    hm_moe *c = m->sub[s];
    if (c->run_job) job(ith - m->gstart[s], m->gstart[s + 1] - m->gstart[s], c);
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

/* Starts fn on the pool: an async pool returns at once (the batch in flight until hm_moe_wait), a
 * sync one runs it to completion. */
static void launch(hm_moe *m, hm_task_fn fn) {
    if (hm_pool_submit(m->p.pool, fn, m) == HM_OK) {
        m->in_flight = true;
        m->s->busy = m;
        return;
    }
    hm_pool_run(m->p.pool, fn, m);
}

static hm_status submit_sliced(hm_moe *m, const void *x, hm_moe_dtype x_type, const int32_t *ids,
                               const float *w, int n_tok, int k, void *out, hm_moe_dtype out_type,
                               bool accumulate) {
    if ((out_type != HM_MOE_F32 && out_type != HM_MOE_BF16) || n_tok < 0 || (n_tok && !out))
        return hm_errorf(HM_ERR_INVALID_ARG, "moe: bad output (type %d, %d tokens)", (int)out_type,
                         n_tok);
    const size_t per = (size_t)n_tok * (size_t)m->p.hidden;
    hm_moe_scratch *S = m->s;
    if (!grow((void **)&S->sub_out, &S->cap_sub_out, sizeof(float) * per * (size_t)m->n_sub + 64,
              "moe slice outputs"))
        return hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory for a batch of %d tokens", n_tok);
    for (int i = 0; i < m->n_sub; i++) {
        hm_status st = prepare(m->sub[i], x, x_type, ids, w, n_tok, k, S->sub_out + per * (size_t)i,
                               HM_MOE_F32, false);
        if (st) return st;
    }
    if (per == 0) return HM_OK;
    m->out = out, m->out_type = out_type, m->accumulate = accumulate, m->n_tok = n_tok;
    const uint64_t t_launch = hm_time_ns(); /* the children's decode statistics start here */
    for (int i = 0; i < m->n_sub; i++) m->sub[i]->t_launch = t_launch;
    launch(m, sliced_job);
    return HM_OK;
}

/* active experts by token count, descending; ties by expert id */
static int by_tokens_desc(const void *pa, const void *pb) {
    const active_expert *a = pa, *b = pb;
    if (a->n != b->n) return a->n > b->n ? -1 : 1;
    if (a->e != b->e) return a->e < b->e ? -1 : 1;
    return (a->part > b->part) - (a->part < b->part);
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
    if (m->n_sub) return submit_sliced(m, x, x_type, ids, w, n_tok, k, out, out_type, accumulate);
    const uint64_t t0 = hm_time_ns();
    hm_status st = prepare(m, x, x_type, ids, w, n_tok, k, out, out_type, accumulate);
    if (st || !m->run_job) return st;
    m->t_launch = hm_time_ns();
    if (m->decode)
        atomic_fetch_add_explicit(&m->ks[KS_DEC_PREP], m->t_launch - t0, memory_order_relaxed);
    launch(m, job);
    return HM_OK;
}

/* whether expert e, with cnt tokens in this batch, takes the AMX path (hm_tile_min_tokens:
 * the matvec kernels below that many tokens) */
static bool expert_amx(const hm_moe *m, int e, int cnt) {
    return m->amx && cnt >= m->tile_min[m->packed && m->packed[e]];
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
static hm_status prepare(hm_moe *m, const void *x, hm_moe_dtype x_type, const int32_t *ids,
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
    const int n_small = n_tok <= MATVEC_MAX && (int64_t)n_tok * k <= SMALL_ASG && !m->route_full
                            ? small_order(m, ids, n_tok * k, ord, &n_parts)
                            : -1;
    int64_t n_asg = n_small;
    if (n_small < 0) {
        memset(m->cnt, 0, sizeof *m->cnt * (size_t)E);
        n_asg = 0;
        for (int64_t i = 0; i < (int64_t)n_tok * k; i++)
            if (ids[i] >= 0 && !m->mask[ids[i]]) m->cnt[ids[i]]++, n_asg++;
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
    if (!grow((void **)&S->tok, &S->cap_tok, sizeof *S->tok * (size_t)n_asg, "moe assignments") ||
        !grow((void **)&S->wt, &S->cap_wt, sizeof *S->wt * (size_t)n_asg, "moe assignments")) {
        scratch_release(S);
        return hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory for %lld assignments",
                         (long long)n_asg);
    }
    if (grow_act(m, n_parts)) {
        scratch_release(S);
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
        (direct || grow((void **)&S->acc, &S->cap_acc, act_bytes, "moe output")) &&
        grow((void **)&S->xq_need, &S->cap_xq_need, (size_t)n_tok, "moe activations") &&
        grow((void **)&S->xq, &S->cap_xq, m->xq_bytes * (size_t)n_tok + 64, "moe activations") &&
        (x_type != HM_MOE_BF16 || grow((void **)&S->xf, &S->cap_xf, act_bytes, "moe input")) &&
        grow((void **)&S->h, &S->cap_h, sizeof(float) * (size_t)chunk_rows * (size_t)I,
             "moe hidden") &&
        grow((void **)&S->hq, &S->cap_hq, m->hq_bytes * (size_t)chunk_rows + 64, "moe hidden q");
    m->xa_need = false;
    for (int ci = 0; ci < m->n_chunks; ci++) m->xa_need |= m->chunks[ci].any_amx;
#if defined(__x86_64__)
    if (m->xa_need) {
        m->xa_bytes = hm_amx_qrow_bytes(H);
        if (m->xa_bytes * (size_t)n_tok >= ((size_t)1 << 31))
            return hm_errorf(HM_ERR_INVALID_ARG,
                             "moe: %d tokens of hidden %lld exceed the AMX packing's 2 GiB", n_tok,
                             (long long)H);
        ok = ok && grow((void **)&S->xa, &S->cap_xa, m->xa_bytes * (size_t)n_tok, "moe int8 x");
    }
#endif
    ok = ok && (px_need == 0 || grow((void **)&S->px, &S->cap_px, px_need, "moe packed x"));
    ok = ok && (ph_need == 0 || grow((void **)&S->ph, &S->cap_ph, ph_need, "moe packed h"));
    /* per-thread: AMX scratch + a [tokens of an expert][rows of its claims] float tile (the
     * largest) + the largest own-packed x; the size is kept in a header word before the
     * buffer */
    m->tb_bytes = (sizeof(float) * tb_floats + 63) & ~(size_t)63;
    ok = ok && thread_scratch(m, m->tscratch_bytes + m->tb_bytes + own_x + 64) == HM_OK;
    if (!ok) {
        scratch_release(S);
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
        if (!grow((void **)&S->part, &S->cap_part, need, "moe decode rows")) {
            scratch_release(S);
            return hm_errorf(HM_ERR_NO_MEMORY, "moe: out of memory for a batch of %d tokens",
                             n_tok);
        }
        for (int a = m->chunks[0].a0; a < m->chunks[0].a1; a++) /* gu_done: cleared above */
            atomic_store_explicit(&m->h_ready[a], 0, memory_order_relaxed);
    }
    /* one or two tokens: converting them here costs the caller about what its share would, and
     * the job then needs no barrier before the experts start (~4 us of 16 threads' time) */
    m->pre_done = m->decode && n_tok <= 2;
    if (m->pre_done) phase_pre(m, 0, 1);
    m->run_job = true;
    return HM_OK;
}

void hm_moe_wait(hm_moe *m) {
    if (!m || !m->in_flight) return;
    hm_pool_wait(m->p.pool);
    m->in_flight = false;
    m->s->busy = NULL;
}

/* ---------------------------------------------------------------- routers */

/* indices of the k largest v[0..n) (ties: lower index first), in descending order */
static void topk(const float *v, int n, int k, int32_t *ids) {
    for (int j = 0; j < k; j++) ids[j] = -1;
    for (int i = 0; i < n; i++) {
        int j = k;
        while (j > 0 && (ids[j - 1] < 0 || v[i] > v[ids[j - 1]])) j--;
        if (j >= k) continue;
        memmove(ids + j + 1, ids + j, sizeof *ids * (size_t)(k - j - 1));
        ids[j] = i;
    }
}

hm_status hm_router_softmax_topk(const float *logits, int n, int k, bool renorm, int32_t *ids,
                                 float *w) {
    if (n < 1 || k < 1 || k > n)
        return hm_errorf(HM_ERR_INVALID_ARG, "router: top-%d of %d experts", k, n);
    float mx = logits[0];
    for (int i = 1; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)logits[i] - mx);
    topk(logits, n, k, ids);
    double sel = 0;
    for (int j = 0; j < k; j++) {
        w[j] = (float)(exp((double)logits[ids[j]] - mx) / sum);
        sel += w[j];
    }
    if (renorm)
        for (int j = 0; j < k; j++) w[j] = (float)(w[j] / sel);
    return HM_OK;
}

hm_status hm_router_sigmoid_group_topk(const float *logits, const float *bias, int n, int n_group,
                                       int topk_group, int k, bool renorm, float scale,
                                       int32_t *ids, float *w) {
    if (n < 1 || n_group < 1 || n % n_group || topk_group < 1 || topk_group > n_group || k < 1 ||
        k > n / n_group * topk_group || n > 4096)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "router: top-%d of %d experts in %d groups (top %d groups)", k, n, n_group,
                         topk_group);
    float s[4096], choice[4096], gscore[4096];
    int32_t gids[4096];
    for (int i = 0; i < n; i++) {
        s[i] = 1.0f / (1.0f + expf(-logits[i]));
        choice[i] = s[i] + (bias ? bias[i] : 0.0f);
    }
    const int per = n / n_group;
    for (int g = 0; g < n_group; g++) {
        int32_t t2[2];
        topk(choice + g * per, per, per < 2 ? 1 : 2, t2);
        gscore[g] = choice[g * per + t2[0]] + (per < 2 ? 0.0f : choice[g * per + t2[1]]);
    }
    topk(gscore, n_group, topk_group, gids);
    for (int i = 0; i < n; i++) { /* experts of dropped groups can never win */
        bool kept = false;
        for (int j = 0; j < topk_group; j++) kept |= gids[j] == i / per;
        if (!kept) choice[i] = -INFINITY;
    }
    topk(choice, n, k, ids);
    double sum = 0;
    for (int j = 0; j < k; j++) sum += s[ids[j]];
    for (int j = 0; j < k; j++)
        w[j] = (float)((renorm ? s[ids[j]] / (sum + 1e-20) : s[ids[j]]) * scale);
    return HM_OK;
}
