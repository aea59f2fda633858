/* moe_int.h - the expert engine's internal header: the engine and scratch structs, the work
 * units, and the functions its files share (include/hmoe_moe.h is the public one). */
#ifndef HM_MOE_MOE_INT_H
#define HM_MOE_MOE_INT_H

#include "hmoe_moe.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/alloc.h"
#include "core/pool.h"
#include "cpu/matvec.h"
#include "cpu/ops.h"

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
/* The decode path (hm_moe_job_decode) takes batches of up to this many assignments when no expert
 * is on the AMX path. Device (16 threads, bench moe --layers 8, 3 rounds), against the phased path
 * (HMOE_MOE_DECODE=0), Q4_K: 8 tokens 8.4-9.6 ms against 10.5-11.3, 32 tokens 24.4-26.1 against
 * 28.9-31.4, 64 tokens (512 assignments) 39.1-40.7 against 44.9-45.7; Q6_K 4-20% faster too
 * (bench/RESULTS.md, 2026-11-30). */
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
    /* this batch keeps its repacked experts on the matvec kernels below the per-call crossover
     * (tile_min[0]) so that it takes the decode path (hm_moe_prepare); HMOE_MOE_DECODE_MV=0: the
     * repacked crossover always (A/B) */
    bool mv_only, no_mv_only;
    bool no_fused_h;    /* HMOE_MOE_FUSE_H=0: h packed in its own phase (A/B, tests) */
    bool no_direct_out; /* HMOE_MOE_DIRECT_OUT=0: sums always in s->acc, then copied (A/B) */
    bool no_flow;       /* HMOE_MOE_FLOW=0: a barrier between gate/up and down (A/B) */
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

typedef struct {
    hm_moe *m;
    atomic_llong next;
} repack_job;

static inline void span(int64_t n, int ith, int nth, int64_t *a, int64_t *b) {
    *a = n * ith / nth;
    *b = n * (ith + 1) / nth;
}

/* Whether expert ae runs the swapped-operand tile kernels (repacked weights on an AMX variant):
 * its inputs and hidden rows are then packed as row tiles (the _rt packers). */
static inline bool swapped(const hm_moe *m, const active_expert *ae) {
    return ae->amx && m->packed && m->packed[ae->e] && m->ops->i8_down_acc;
}

/* SiLU without biases: the activation the GLU tile kernels compute themselves */
static inline bool plain_silu(const hm_moe *m, const active_expert *ae) {
    const hm_moe_expert *x = &m->experts[ae->e];
    return m->p.act == HM_MOE_SILU && !x->gate_bias && !x->up_bias;
}

/* the barrier of the participants running this engine: the pool's, or a slice group's */
static inline void moe_barrier(hm_moe *m) {
    if (m->bar)
        hm_barrier_wait(m->bar);
    else
        hm_pool_barrier(m->p.pool);
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

/* ---------------------------------------------------------------- between the files */

/* moe.c: an engine over the whole pool (bar NULL) or a slice's child; the per-active-expert
 * arrays for at least n entries (nonzero when out of memory); fn started on the pool */
hm_status hm_moe_create_one(const hm_moe_params *p, hm_barrier *bar, hm_moe **out);
int hm_moe_grow_act(hm_moe *m, int n);
void hm_moe_launch(hm_moe *m, hm_task_fn fn);

/* scratch.c: the batch scratch's buffers, per-thread scratch, and one buffer grown on demand */
void hm_moe_scratch_release(hm_moe_scratch *s);
hm_status hm_moe_scratch_bind(hm_moe *m, hm_moe_scratch *shared);
hm_status hm_moe_thread_scratch(hm_moe *m, size_t need);
bool hm_moe_grow(void **p, size_t *cap, size_t need, const char *what);

/* repack.c: whether experts take the AMX int8 path; the repacking and its pool task (a
 * repack_job) */
bool hm_moe_amx_wanted(const hm_moe_params *p, const hm_cpu_ops *ops);
hm_status hm_moe_repack(hm_moe *m, bool run);
void hm_moe_repack_task(int ith, int nth, void *arg);

/* slices.c: an engine of NUMA slices and its submit */
hm_status hm_moe_create_sliced(const hm_moe_params *p, hm_moe **out);
hm_status hm_moe_submit_sliced(hm_moe *m, const void *x, hm_moe_dtype x_type, const int32_t *ids,
                               const float *w, int n_tok, int k, void *out, hm_moe_dtype out_type,
                               bool accumulate);

/* route.c: checks and routes a batch and sizes the scratch for it */
hm_status hm_moe_prepare(hm_moe *m, const void *x, hm_moe_dtype x_type, const int32_t *ids,
                         const float *w, int n_tok, int k, void *out, hm_moe_dtype out_type,
                         bool accumulate);

/* expert.c: the work both jobs share */
void hm_moe_phase_pre(hm_moe *m, int ith, int nth);
void hm_moe_gate_up_unit(hm_moe *m, const active_expert *ae, int64_t hrow0, int64_t r0, int64_t r1,
                         void *scr, float *tb);
void hm_moe_write_out(hm_moe *m, int64_t r0, int64_t r1);

/* prefill.c: the job (the phased path; it hands decode batches to decode.c's) */
void hm_moe_job(int ith, int nth, void *arg);
/* decode.c */
void hm_moe_job_decode(hm_moe *m, int ith, int nth);

#endif
