/* ctx_int.h - the context's internals, shared by ctx.c and the per-architecture block files. */
#ifndef HM_MODEL_CTX_INT_H
#define HM_MODEL_CTX_INT_H

#include "core/pool.h"
#include "cpu/nn.h"
#include "core/timer.h"
#include "model/backend.h"
#include "model/graph.h"
#include "model/model.h"
#include "model/place.h"

struct hm_ctx {
    const hm_model *m;
    hm_ctx_params p;
    hm_pool *pool;
    int nth;
    hm_moe **moe; /* [n_layers], NULL for dense layers */
    /* KV cache: (layer, seq, kv head) -> kv_ctx positions of head_dim values, K and V, so one
     * head's positions are contiguous (K in transposed 16-position blocks, see hm_nn_kv); huge
     * pages (attention walks every position of every head) */
    hm_large kv_k, kv_v;
    size_t kv_dim;
    size_t kv_elem;       /* 4 (f32) or 2 (f16) */
    size_t kv_ctx;        /* positions per cache head: n_ctx rounded up to HM_NN_KBLK */
    int32_t *seq_len;     /* [n_seq] positions cached */
    int32_t *seq_next;    /* [n_seq] scratch: next position while a batch is placed */
    float *inv_freq;      /* [rope_dim / 2], of the original context (model/rope.h) */
    float rope_attn;      /* factor on cos and sin (YaRN's attention factor, else 1) */
    float *inv_seq;       /* [n_seq][rope_dim / 2]: dynamic NTK only, each sequence's
                             frequencies for the length inv_seq_len[s] */
    int64_t *inv_seq_len; /* [n_seq] the length they were made for (0: none) */
    float *rope_cs;       /* [n_batch][rope_dim]: each token's cos/sin (times rope_attn), once per
                             batch (not per layer and per q and k) */
    /* scratch for n_batch tokens */
    float *x, *xn, *q, *k, *v, *att, *tmp, *rl, *g, *u, *w, *sh;
    float *qa, *mla_scratch; /* MLA: the q latent [n_batch][q_lora]; per-thread scratch */
    float *mla_rows;         /* MLA: a chunk's per-head rows for the batched path (mla.c) */
    int32_t *ids, *pos, *seq;
    hm_nn_kv *kvv;
    float *attn_scratch;
    void *mm_scratch;
    size_t q_dim, ffn_max;
    uint64_t prof_ns[HM_PROF_COUNT]; /* time per part of the forward pass, summed */
    double hyb_wait_s, hyb_span_s;   /* the hybrid hand-off (hm_ctx_perf), summed */
    uint64_t hyb_layers, hyb_blocked, hyb_streamed, hyb_stream_bytes, hyb_swaps;
    int prefill_stream; /* layerwise prefill as the placement settled it (hm_cuda_ctx_params) */
    uint64_t prof_alone_ns[HM_PROF_COUNT];  /* of it, outside the pool's jobs */
    uint64_t prof_wait_ns[HM_PROF_COUNT];   /* of it, dispatch and waiting for the slowest */
    uint64_t prof_pool_mark, prof_own_mark; /* the pool's run_ns, own_ns at the last prof */
    uint64_t mla_ns[HM_MLA_PHASES];         /* latent attention's phases, summed (hm_ctx_perf) */
    size_t repacked;     /* bytes of the experts' and dense matrices' int8 tile copies */
    int n_slices;        /* NUMA slices of the experts (1: none) */
    size_t slice_copied; /* bytes of their weight copies */
    /* the layers as the blocks read them: the model's, or copies whose dense matrices also point
     * at the context's int8 units (hm_nn_repack, in dense_pack) */
    const hm_layer *layers;
    hm_layer *own_layers;
    hm_large dense_pack;
    /* routing of prompt batches (hm_ctx_perf): sums over (layer, batch) */
    uint64_t route_batches;
    double route_active, route_busiest, route_tokens;
    uint32_t *route_count; /* [n_experts] scratch */
    /* decode's idle-work hints (hm_ctx_prefetch): a ring, so a hint outlives the job after the
     * one it was set for (a worker may still be prefetching when that one starts) */
    hm_nn_prefetch pf[4];
    int pf_next;
    hm_graph graph;          /* the forward pass over c->layers, built once */
    struct hm_cuda_ctx *cu;  /* HM_DEVICE_CUDA: the GPU that runs the graph, else NULL */
    hm_place_plan plan;      /* HM_DEVICE_CUDA: the routed experts on the GPU */
    uint64_t *expert_counts; /* [n_layers][n_experts] activations routed by the CPU backend */
};

/* The cache of layer il, sequence s (elements of c->kv_elem bytes: float or IEEE half), laid out
 * as hm_nn_kv says with kv_head_stride = kv_ctx * head_dim. */
static inline void *hm_ctx_kv_k(hm_ctx *c, int il, int s) {
    return (uint8_t *)c->kv_k.ptr +
           ((size_t)il * (size_t)c->p.n_seq + (size_t)s) * c->kv_ctx * c->kv_dim * c->kv_elem;
}
static inline void *hm_ctx_kv_v(hm_ctx *c, int il, int s) {
    return (uint8_t *)c->kv_v.ptr +
           ((size_t)il * (size_t)c->p.n_seq + (size_t)s) * c->kv_ctx * c->kv_dim * c->kv_elem;
}

/* Adds the time since *t0 to part p and restarts *t0. */
static inline void hm_ctx_prof(hm_ctx *c, int p, uint64_t *t0) {
    uint64_t t = hm_time_ns();
    hm_pool_stats st;
    hm_pool_stats_get(c->pool, &st);
    /* the pool's counters may have been reset since the mark */
    const bool reset = st.run_ns < c->prof_pool_mark || st.own_ns < c->prof_own_mark;
    const uint64_t in_jobs = reset ? st.run_ns : st.run_ns - c->prof_pool_mark,
                   own = reset ? st.own_ns : st.own_ns - c->prof_own_mark;
    c->prof_pool_mark = st.run_ns, c->prof_own_mark = st.own_ns;
    c->prof_ns[p] += t - *t0;
    c->prof_alone_ns[p] += t - *t0 > in_jobs ? t - *t0 - in_jobs : 0;
    c->prof_wait_ns[p] += in_jobs > own ? in_jobs - own : 0;
    *t0 = t;
}

/* Counts the routing of a batch of n tokens (ids [n][k] of E experts) into the prompt routing
 * statistics; batches of 4 tokens or fewer are not counted. */
void hm_ctx_route_stats(hm_ctx *c, int n, int k, int E);

/* Runs fn(c, i, arg) for every token i < n, tokens split across the pool's threads. */
typedef void (*hm_ctx_tok_fn)(hm_ctx *c, int i, void *arg);
void hm_ctx_for_tokens(hm_ctx *c, int n, hm_ctx_tok_fn fn, void *arg);

/* Decode batches (n <= 4 tokens): the pool's next job leaves its idle workers prefetching their
 * shares of the matmul over w[0..nw) that comes after it (hm_nn_prefetch_idle). */
static inline void hm_ctx_prefetch(hm_ctx *c, const hm_matrix *const *w, int nw, int n) {
    if (c->p.no_idle_prefetch || n > 4 || nw < 1 || nw > 8) return;
    hm_nn_prefetch *p = &c->pf[c->pf_next];
    c->pf_next = (c->pf_next + 1) % 4;
    for (int i = 0; i < nw; i++) p->w[i] = w[i];
    p->nw = nw, p->n_tok = n;
    hm_pool_set_idle(c->pool, hm_nn_prefetch_idle, p);
}

/* hm_nn_matmul flags of this context (no_amx, bf16_tiles) */
static inline unsigned hm_ctx_mm_flags(const hm_ctx *c) {
    return (c->p.no_amx ? HM_NN_NO_AMX : 0u) | (c->p.bf16_tiles ? HM_NN_BF16_TILES : 0u);
}

/* y = W x over n tokens of the context's scratch layout (row strides = cols / rows). */
void hm_ctx_matmul(hm_ctx *c, const hm_matrix *w, const float *x, int n, float *y);

/* The MLA node (mla.c) on the CPU. */
hm_status hm_ctx_run_mla(hm_ctx *c, const hm_node *nd, int n);

/* Runs the forward graph over the batch of n tokens in c's scratch (x holds the residual stream;
 * the tokens' positions, sequences and rotary cos/sin are set): the CPU backend (exec_cpu.c). */
hm_status hm_ctx_run_graph(hm_ctx *c, const hm_graph *g, int n);

/* The context as a backend (backend.h): supports every op, and matmuls of the weight types the
 * CPU has kernels for; compute is hm_ctx_run_graph. */
hm_backend hm_ctx_cpu_backend(hm_ctx *c);

#endif
