/* backend.c - the CUDA backend: the model's weights (the routed experts the placement keeps on
 * the GPU), a KV cache and the batch's activation slots in GPU memory, and the forward graph
 * (model/graph.h) walked node by node with the kernels of kernels.h on one stream. Batches of up
 * to mv_max (63) tokens run every matmul as a dequantizing matvec, up to 8 tokens per read of
 * the weights; larger ones run quantized weights in half on cuBLAS (HGEMM) or the tensor-core tiles
 * (mmq.cu) and float ones (F32/F16/BF16/FP8) dequantized to floats through FP32 cuBLAS, so
 * float and BF16 checkpoints keep the CPU's bounds. Routed experts run per (token, expert) pair
 * for decode, grouped by expert in tiles of up to 8 on the matvec up to mv_max tokens and in
 * tiles of 64 on the tensor cores above; the ones on the CPU go to the layer's expert engine
 * through doorbells or host functions on the stream (run_moe). The embedding gather, the final norm
 * and the output head run on the GPU as well; only the wanted rows of logits are copied back. Steps
 * of up to mv_max tokens replay CUDA graphs.
 *
 * Everything lives in one device allocation, sized by a first pass over the same layout code,
 * so a model that does not fit is refused with the numbers before anything is copied. */
#ifdef HM_CUDA_HOST
#include "cuda/host/rt.h" /* the host GPU: the CPU plays the GPU (tests) */
#else
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/log.h"
#include "core/timer.h"
#include "cuda/cuda.h"
#include "cuda/kernels.h"
#include "model/backend.h"
#include "model/graph.h"
#include "model/model.h"
#include "model/place.h"
#include "quant/types.h"
#include "hmoe_moe.h"

enum { LOGIT_ROWS = 64 }; /* rows of logits computed and copied back per pass */
/* d_cnt: decode attention's counters (one per token and head), the experts' sums' (one per
 * token) */
enum {
    HM_CNT_ATT = 0,
    HM_CNT_SUM = HM_CNT_ATT + HM_CU_MATVEC_MAX * 128, /* the experts' sums, one per token */
    HM_CNT_ROUTER = HM_CNT_SUM + HM_CU_MATVEC_MAX,    /* the fused router's, one per token */
    HM_CNT_COUNT = HM_CNT_ROUTER + HM_CU_MATVEC_MAX
};
enum { BELL_STRIDE = 16 }; /* uint32 words between doorbells: a cache line */
enum { GRAPHS_BIG = 64 };  /* the most graphs of more than HM_CU_MATVEC_MAX tokens kept */
/* GPU memory kept free beyond the arena: the CUDA context, cuBLAS's workspace, graphs */
#define HM_CUDA_MARGIN ((size_t)512 << 20)

/* a layer's host functions on the stream: the CPU engine's submit and wait */
typedef struct hyb_cb {
    struct hm_cuda_ctx *c;
    int il;
    bool pending;
    bool defer;     /* some of its CPU experts deferred to the next layer */
    uint64_t t_sub; /* when its CPU experts were submitted */
    double prof0;   /* a split layer's: its engine's phase seconds before the submit */
} hyb_cb;

struct hm_cuda_ctx {
    const hm_model *m;
    const hm_graph *g;
    int dev;
    cudaStream_t s;
    cublasHandle_t blas;
    uint8_t *arena;
    size_t used; /* bytes of the arena laid out so far */
    size_t weight_bytes, kv_bytes, expert_bytes;
    /* hybrid */
    const uint8_t *gpu_mask; /* [n_layers][n_experts] or NULL (all on the GPU) */
    hm_moe *const *cpu_moe;  /* [n_layers] or NULL */
    int32_t *slot_of;        /* [n_layers][n_experts] device: an expert's place among the
                                layer's GPU experts, -1 on the CPU */
    bool *remap;             /* [n_layers]: some of the layer's experts are on the CPU */
    int32_t *gid;            /* [n_batch][k] device: the pairs' GPU slots */
    float *cpu_out;          /* [n_batch][hidden] device: the CPU experts' sum */
    void *h_hyb;             /* pinned: x [B][H], out [B][H], ids [B][k], w [B][k] */
    float *h_x, *h_out, *h_w;
    int32_t *h_ids;
    /* A replayed decode step hands off through doorbells instead of host functions: the GPU
     * writes x, ids and weights straight into the pinned buffers and rings layer il's out bell,
     * the step's thread (bells_run) runs the CPU experts and rings the in bell, on which the GPU
     * waits before reading the sum. Bells [2][n_layers][BELL_STRIDE] (out, in: a cache line
     * each), pinned, then h_epoch (the step's number, uploaded to d_epoch: a graph's launches
     * keep their arguments, so the GPU reads which ring to wait for) and h_bell_err (set by a
     * wait that timed out). bells: the step being enqueued uses them; no_bells:
     * HMOE_CUDA_BELLS=0 (host functions, for A/B). */
    uint32_t *h_bell, *h_epoch, *h_bell_err, *d_epoch;
    uint32_t epoch;
    bool bells, no_bells;
    /* --defer K: each token's K lowest-weighted CPU experts of layer L run while layer L+1 does
     * (their ids in d_later, the others' in d_now; their sum in h_def, added to layer L+1's
     * output); def_pend is the layer whose deferred experts are in flight, or -1 */
    int defer;
    int32_t *d_now, *d_later;
    float *h_def, *d_x, *d_w; /* the deferred experts' sum, and their own input and weights */
    int def_pend;
    void *h_defb;
    /* layerwise prefill: a batch of stream_min or more tokens (0: never) computes the first
     * lw_ns[il] of each layer's lw_nc[il] CPU experts on the GPU, from copies streamed on the
     * copy stream cs into lw_buf[j % 2] (j: the layer's place among the n_lw layers with CPU
     * experts, lw_order / lw_idx), and the others on the CPU meanwhile (a split layer). The copy
     * of layer j + 1 waits until layer j - 1's compute has released its buffer (lw_free), the
     * compute of layer j for its copy (lw_ready). cslot (host): an expert's place among its
     * layer's CPU experts (-1: on the GPU), in expert order; sslot_of (device, uploaded from
     * pinned h_sslot per batch): the place where it is below lw_ns, else -1; s_ids: a split
     * layer's pairs left to the CPU. lw_w: a layer's CPU experts as the buffer holds them
     * (data: the offset in it). lw_bad: the experts cannot stream (biases, or a type without
     * tiles). The fraction that streams is hm_place_stream_split's for the batch, from the copy
     * of a layer's CPU experts (lw_copy_s) and the CPU engine's tokens per second through them
     * (lw_rate), both timed when the context is made; HMOE_LW_SPLIT sets it instead (lw_force).
     * Both then follow what the split layers take in the batches themselves, where the copies
     * and the CPU's share read the same memory: the CPU's share (its engine's phase seconds, over
     * lw_obs layers of a batch of lw_obs_tok tokens, in lw_obs_s) and each streamed share's copy
     * (timed by lw_tev on the copy stream), each over its fraction of the layer's CPU experts,
     * move lw_rate and lw_copy_s halfway at the next plan (hm_place_rate_update). The copies run
     * ahead of the layers that use them, so the copy stream and the CPU are the two sides to
     * balance; the CPU's side of a layer also holds the GPU's own part before its submit
     * (attention, router, the hand-off: from the previous layer's wait to this layer's submit,
     * summed in lw_gap_s over lw_gap_n pairs of consecutive split layers, lw_done_ns / lw_done_il
     * the last wait's end), whose seconds per token (lw_gpu_tok) move halfway likewise. The split
     * they give balances the two wherever each side's time is affine in its fraction. */
    int prefill_stream; /* hm_cuda_ctx_params' */
    int stream_min;
    bool lw_on, lw_bad;
    int n_lw;
    int *lw_order, *lw_idx;
    int32_t *cslot, *sslot_of, *h_sslot, *s_ids;
    int *lw_nc, *lw_ns;
    double lw_force, lw_copy_s, lw_rate;
    double lw_obs_s, lw_gap_s, lw_gpu_tok;
    int lw_obs, lw_obs_tok, lw_gap_n, lw_done_il;
    uint64_t lw_done_ns;
    bool lw_seen; /* a split batch has been observed */
    /* the host memory of the CPU experts, registered with CUDA (page-locked, read-only) so that
     * their copies run as DMA at the link's rate instead of being staged through a pinned
     * buffer by the CPU (HMOE_CUDA_REGISTER=0: not) */
    void **reg;
    int n_reg;
    size_t reg_bytes;
    hm_cu_w *lw_w;
    uint8_t *lw_buf[2];
    size_t lw_cap, lw_full; /* the largest layer's CPU experts; all its experts */
    cudaStream_t cs;
    cudaEvent_t lw_ready[2], lw_free[2];
    cudaEvent_t *lw_tev; /* [2 n_lw]: the start and end of each layer's copy (timed) */
    uint64_t lw_layers, lw_bytes;
    /* --dynamic-experts: every step's routing counted per layer on the GPU (d_counts [L][E]);
     * every dyn_every steps the counts join their decayed sum (dyn_cnt) and hm_dyn_pick chooses
     * a swap, whose expert goes to its layer's spare GPU slot (spare[il], -1: the layer has no
     * experts on one side) on the copy stream while the step runs; the first step after the copy
     * landed (sw_done) commits it: the slot tables (slot_of's host copy in pinned h_tab, and
     * cslot), the mask (a writable copy of the placement's; the CPU engine gets it) and
     * the spare, which becomes the slot the swapped-out expert held. */
    bool dynamic;
    int dyn_every, dyn_steps;
    uint32_t *d_counts, *h_counts;
    double *dyn_cnt;
    int *spare;
    uint8_t *mask;
    int32_t *h_tab;
    int sw_il, sw_in, sw_out; /* the swap chosen or in flight (sw_il -1: none) */
    bool sw_issued;
    cudaEvent_t sw_done;
    uint64_t swaps;
    hyb_cb *cb; /* [n_layers] */
    int cur_n;  /* tokens of the step in flight (read by the host functions) */
    /* the hand-off's times since the last hm_cuda_ctx_hybrid_times, written by the host
     * functions (the stream runs them one at a time): the stream waiting for the CPU experts,
     * the CPU experts' span from submit to done where the wait shows it (else from submit to
     * the wait, an upper bound), layers handed off, and of them those the stream waited for */
    uint64_t hyb_wait_ns, hyb_span_ns, hyb_layers, hyb_blocked;
    hm_status hyb_st; /* the first failure inside a host function */
    char hyb_msg[512];
    hm_cu_w *nw;              /* [g->n]: node i's matrix (MATMUL) */
    const float **nn1, **nn2; /* [g->n]: node i's norm weights */
    const float **nb;         /* [g->n]: a matmul node's bias (or NULL) */
    hm_cu_w *ex;              /* [n_layers][3]: gate, up, down of the layer's experts */
    float **exb;              /* [n_layers][3]: their biases, [GPU experts][rows] (or NULL: none) */
    /* multi-head latent attention: each layer's projections, norms and absorbed matrices, and
     * the per-token scratch (q's low-rank step, the absorbed queries, the weighted latents) */
    struct mla_w {
        hm_cu_w wq_a, wq_b, wq, wkv_a;
        const float *q_a_norm, *kv_a_norm;
        const void *k_b, *v_b;
    } * mla;
    float *mla_qa, *mla_q, *mla_o;
    hm_cu_w tok_embd, output;
    const float *out_norm;
    float *slot[HM_SLOT_COUNT];
    int64_t cols[HM_SLOT_COUNT];
    int32_t *d_in; /* tokens, positions, sequences, wanted rows: [4][n_batch] */
    float *d_cs;   /* [n_batch][rope_dim] */
    void *h_in;    /* pinned staging of d_in and d_cs */
    int32_t *ids;  /* [n_batch][k] */
    float *w;      /* [n_batch][k] */
    float *moe_g, *moe_u, *moe_y;
    hm_cu_moe_order ord; /* batches: the pairs in expert order, and their tiles */
    int max_tiles;
    bool no_mmq; /* HMOE_CUDA_MMQ=0: quantized batches dequantize to floats for cuBLAS (A/B) */
    /* HMOE_CUDA_FUSE=0: decode batches launch each fused group's kernels one by one (A/B);
     * HMOE_CUDA_FUSE_ROUTER=0 (no_rfuse): only the router's matvec and top-k */
    bool no_fuse, no_rfuse;
    /* HMOE_CUDA_SKIP=op[,op..] (hm_op_name's names): decode batches launch no kernel for those
     * graph nodes, so that a timed step shows what each kind of node costs on the step's
     * critical path (its results are then wrong: a measurement, never a run) */
    unsigned skip_ops;
    /* a decode batch's MOE node left its weighted sum to the residual add that follows it
     * (sum_left; HMOE_CUDA_SUM_NEXT=0: never, for A/B) */
    bool sum_left, no_sum_next;
    /* prefill attention on the tensor cores (hm_cu_attention_tc) for batches of fa_min tokens or
     * more that are one sequence at consecutive positions (fa_seq, fa_pos0; fa_seq -1: not);
     * HMOE_CUDA_FA=0 turns it off (A/B), HMOE_CUDA_FA_MIN sets fa_min (128) */
    bool fa;
    int fa_min, fa_seq, fa_pos0;
    float *att_part; /* decode attention's partial results */
    unsigned *d_cnt; /* the last-block counters of the fused kernels (HM_CNT_*), zeroed */
    int att_splits;
    float *deq; /* the GEMM path's dequantized rows */
    int64_t deq_elems;
    /* batches of hgemm_min tokens or more against quantized (or F16) dense weights: the weights
     * dequantized to half into deq (2 deq_elems of them at a time), the activations to half in
     * xh, and cuBLAS's GEMM on the tensor cores with float sums (HMOE_CUDA_HGEMM_MIN, 64;
     * HMOE_CUDA_HGEMM=0: the tile kernel, hm_cu_mmq, for every batch) */
    uint16_t *xh;
    int hgemm_min;
    /* batches of up to mv_max tokens (HMOE_CUDA_MV_MAX, 63; at most HM_CU_MATVEC_BATCH): the
     * dense matmuls on the matvec in groups of up to HM_CU_MATVEC_MAX tokens, the routed experts
     * in tiles of up to that many tokens of one expert (hm_cu_mmv_tiles). The tile kernels' blocks
     * each wait out their loads at this size; the matvec's rows spread over every SM. */
    int mv_max;
    float *logits; /* [LOGIT_ROWS][vocab] */
    /* hm_cuda_ctx_decode_top: each wanted row's top_k candidates ([n_batch][256] ids, values,
     * a NaN/inf flag per row), and their pinned staging */
    int top_k;
    int32_t *d_top_ids, *d_top_bad;
    float *d_top_vals;
    void *d_top_scratch; /* hm_cu_top_scratch's for LOGIT_ROWS rows, or NULL */
    void *h_top;
    hm_cu_kv kv;
    int n_batch, n_ctx, k;
    /* steps of up to mv_max tokens (nw wanted rows; not layerwise prefill) captured once as
     * CUDA graphs and replayed: every kernel reads the step's tokens and positions from d_in and
     * the experts' tiles from device counts, so one graph serves every step of its shape.
     * HMOE_CUDA_GRAPHS=0 runs them eagerly (A/B). */
    cudaGraphExec_t step[HM_CU_MATVEC_BATCH + 1][HM_CU_MATVEC_BATCH + 1];
    /* graphs of more than HM_CU_MATVEC_MAX tokens captured so far: a server's mixed batches come
     * in many shapes, so at most GRAPHS_BIG of them are kept and other shapes run eagerly */
    int n_big;
    bool no_graphs;
    /* HMOE_CUDA_PROFILE=1: every node timed with events (the stream waits for each), summed per
     * part of the forward pass; steps run eagerly then */
    bool prof;
    /* --gpu-dtype bf16: non-expert weights expanded to BF16 at upload (through the staging
     * buffers below), batches through cuBLAS's BF16 GEMM with the activations in xb */
    bool bf16;
    uint16_t *xb;
    void *stage_q;
    float *stage_f;
    cudaEvent_t pev[2];
    double prof_ms[HM_PROF_COUNT];
    /* the end of a step, waited for by sleeping rather than spinning: in the hybrid mode every
     * core belongs to the CPU experts' pool and a spinning caller would take one from it */
    cudaEvent_t done;
};

#define CK(call, what)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return hm_errorf(HM_ERR_DEVICE, "cuda: %s: %s (%s)", what, cudaGetErrorString(e_),     \
                             cudaGetErrorName(e_));                                                \
    } while (0)

/* device memory for `bytes` from the arena (in the sizing pass: counted, NULL) */
static void *take(hm_cuda_ctx *c, size_t bytes) {
    const size_t off = (c->used + 255) & ~(size_t)255;
    c->used = off + bytes;
    return c->arena ? c->arena + off : NULL;
}

static size_t packed_row(uint32_t type, int64_t cols) {
    uint64_t b = 0;
    return hm_type_row_bytes(type, (uint64_t)cols, &b) ? (size_t)b : 0;
}

static bool cu_w_ok(uint32_t type, int64_t cols) {
    const hm_type_info *ti = hm_type_get(type);
    return hm_cu_type_ok(type) && ti && (ti->block == 1 || cols % 32 == 0);
}

/* a copy of rows x cols of `type` (host rows src_stride bytes apart) on the device */
static hm_status put_matrix(hm_cuda_ctx *c, uint32_t type, const void *data, int64_t rows,
                            int64_t cols, size_t src_stride, size_t n_mats, size_t mat_stride,
                            const char *what, hm_cu_w *out) {
    if (!cu_w_ok(type, cols))
        return hm_errorf(HM_ERR_UNSUPPORTED,
                         "cuda: %s: weights of type %s with %lld columns have no GPU kernel", what,
                         hm_type_name(type), (long long)cols);
    const size_t rb = packed_row(type, cols);
    if (!rb) return hm_errorf(HM_ERR_FORMAT, "cuda: %s: bad row size", what);
    const size_t one = rb * (size_t)rows;
    uint8_t *d = take(c, one * n_mats);
    *out = (hm_cu_w){type, d, rows, cols, rb, n_mats > 1 ? one : 0};
    c->weight_bytes += one * n_mats;
    if (!d) return HM_OK;
    for (size_t e = 0; e < n_mats; e++)
        CK(cudaMemcpy2D(d + e * one, rb, (const uint8_t *)data + e * mat_stride,
                        src_stride ? src_stride : rb, rb, (size_t)rows, cudaMemcpyHostToDevice),
           what);
    return HM_OK;
}

/* --gpu-dtype bf16's staging: rows of up to STAGE_F floats at a time, in the model's type, then
 * as floats, then rounded to BF16 into place */
#define STAGE_F ((size_t)8 << 20)

/* a matrix expanded to BF16 on the device: rows in chunks copied in their own type, dequantized
 * to floats and rounded */
static hm_status put_bf16(hm_cuda_ctx *c, const hm_matrix *m, const char *what, hm_cu_w *out) {
    if (!cu_w_ok(m->type, m->cols))
        return hm_errorf(HM_ERR_UNSUPPORTED,
                         "cuda: %s: weights of type %s with %lld columns have no GPU kernel", what,
                         hm_type_name(m->type), (long long)m->cols);
    const size_t rb = packed_row(m->type, m->cols), ob = (size_t)m->cols * 2;
    if (!rb) return hm_errorf(HM_ERR_FORMAT, "cuda: %s: bad row size", what);
    uint8_t *d = take(c, ob * (size_t)m->rows);
    *out = (hm_cu_w){HM_TYPE_BF16, d, m->rows, m->cols, ob, 0};
    c->weight_bytes += ob * (size_t)m->rows;
    if (!d) return HM_OK;
    if (!c->stage_q) {
        CK(cudaMalloc(&c->stage_q, STAGE_F * sizeof(float)), "cudaMalloc (BF16 staging)");
        CK(cudaMalloc((void **)&c->stage_f, STAGE_F * sizeof(float)), "cudaMalloc (BF16 staging)");
    }
    /* whole 256-row groups (FP8's 128-row scale blocks stay whole), at least one row */
    int64_t chunk = (int64_t)(STAGE_F / (size_t)m->cols) / 256 * 256;
    if (chunk < 1) chunk = (int64_t)(STAGE_F / (size_t)m->cols);
    if (chunk < 1 || rb > STAGE_F * sizeof(float) / (size_t)chunk)
        return hm_errorf(HM_ERR_UNSUPPORTED, "cuda: %s: %lld columns are too many to expand", what,
                         (long long)m->cols);
    for (int64_t r0 = 0; r0 < m->rows; r0 += chunk) {
        const int64_t nr = m->rows - r0 < chunk ? m->rows - r0 : chunk;
        const size_t ss = m->row_bytes ? m->row_bytes : rb;
        CK(cudaMemcpy2DAsync(c->stage_q, rb, (const uint8_t *)m->data + (size_t)r0 * ss, ss, rb,
                             (size_t)nr, cudaMemcpyHostToDevice, c->s),
           what);
        const hm_cu_w sw = {m->type, c->stage_q, nr, m->cols, rb, 0};
        CK(hm_cu_dequant_f32(&sw, 0, nr, c->stage_f, c->s), what);
        CK(hm_cu_f32_to_bf16(c->stage_f, m->cols, (int)nr, m->cols,
                             (uint16_t *)(void *)(d + (size_t)r0 * ob), c->s),
           what);
        CK(cudaStreamSynchronize(c->s), what); /* the staging is reused */
    }
    return HM_OK;
}

static hm_status put_hm_matrix(hm_cuda_ctx *c, const hm_matrix *m, const char *what, hm_cu_w *out) {
    if (c->bf16 && m->type != HM_TYPE_BF16 && m->type != HM_TYPE_F16)
        return put_bf16(c, m, what, out);
    return put_matrix(c, m->type, m->data, m->rows, m->cols, m->row_bytes, 1, 0, what, out);
}

/* a copy of n elements of type t (F32, F16 or BF16) on the device */
static hm_status put_raw(hm_cuda_ctx *c, const void *h, uint32_t t, size_t n, const char *what,
                         const void **out) {
    const size_t b = n * (t == HM_TYPE_F32 ? 4 : 2);
    void *d = take(c, b);
    *out = d;
    c->weight_bytes += b;
    if (d && h) CK(cudaMemcpy(d, h, b, cudaMemcpyHostToDevice), what);
    return HM_OK;
}

static hm_status put_floats(hm_cuda_ctx *c, const float *h, size_t n, const float **out) {
    const void *d = NULL;
    const hm_status st = put_raw(c, h, HM_TYPE_F32, n, "norm weights", &d);
    *out = d;
    return st;
}

/* The experts of layer il, one device matrix per projection: [E][rows][row] (the model's experts
 * are views that may lie anywhere, so each is copied on its own). */
static const hm_moe_matrix *proj(const hm_moe_expert *x, int p) {
    return p == 0 ? &x->gate : p == 1 ? &x->up : &x->down;
}

static hm_status put_experts(hm_cuda_ctx *c, int il) {
    const hm_hparams *hp = &c->m->hp;
    const hm_layer *L = &c->m->layers[il];
    const int E = (int)hp->n_experts;
    const int64_t inter = hp->moe_inter, H = hp->hidden;
    const uint8_t *mask = c->gpu_mask ? c->gpu_mask + (size_t)il * (size_t)E : NULL;
    int32_t slot[4096], cslot[4096];
    int ng = 0, nc = 0;
    if (E > 4096) return hm_errorf(HM_ERR_UNSUPPORTED, "cuda: %d experts (at most 4096)", E);
    for (int e = 0; e < E; e++) {
        slot[e] = !mask || mask[e] ? ng++ : -1;
        cslot[e] = slot[e] < 0 ? nc++ : -1;
    }
    c->remap[il] = ng < E;
    /* --dynamic-experts: one slot more where the layer has experts on both sides */
    const int sp = c->dynamic && ng > 0 && ng < E;
    c->spare[il] = sp ? ng : -1;
    if (c->h_tab) memcpy(c->h_tab + (size_t)il * (size_t)E, slot, sizeof(int32_t) * (size_t)E);
    if (c->cslot) memcpy(c->cslot + (size_t)il * (size_t)E, cslot, sizeof(int32_t) * (size_t)E);
    if (c->lw_nc) c->lw_nc[il] = c->lw_ns[il] = nc;
    if (c->slot_of && c->arena)
        CK(cudaMemcpy(c->slot_of + (size_t)il * (size_t)E, slot, sizeof(int32_t) * (size_t)E,
                      cudaMemcpyHostToDevice),
           "expert slots");
    size_t lw_off = 0, full = 0; /* layerwise prefill: the CPU experts' bytes; all experts' */
    for (int p = 0; p < 3; p++) {
        const int64_t rows = p < 2 ? inter : H, cols = p < 2 ? H : inter;
        const hm_moe_matrix *m0 = proj(&L->experts[0], p);
        char what[64];
        snprintf(what, sizeof what, "layer %d experts' %s", il,
                 p == 0   ? "gate"
                 : p == 1 ? "up"
                          : "down");
        if (!cu_w_ok(m0->type, cols))
            return hm_errorf(HM_ERR_UNSUPPORTED,
                             "cuda: %s: type %s with %lld columns has no GPU kernel", what,
                             hm_type_name(m0->type), (long long)cols);
        const size_t rb = packed_row(m0->type, cols), one = rb * (size_t)rows;
        uint8_t *d = ng ? take(c, one * (size_t)(ng + sp)) : NULL;
        c->ex[il * 3 + p] = (hm_cu_w){m0->type, ng ? (void *)d : NULL, rows, cols, rb, one};
        c->lw_w[il * 3 + p] = (hm_cu_w){m0->type, (void *)(uintptr_t)lw_off, rows, cols, rb, one};
        lw_off += one * (size_t)nc, full += one * (size_t)E;
        c->lw_bad |= !hm_cu_mmq_type_ok(m0->type);
        c->weight_bytes += one * (size_t)(ng + sp);
        c->expert_bytes += one * (size_t)(ng + sp);
        for (int e = 0; e < E; e++) {
            const hm_moe_expert *x = &L->experts[e];
            const hm_moe_matrix *m = proj(x, p);
            if (m->type != m0->type)
                return hm_errorf(HM_ERR_UNSUPPORTED, "cuda: %s: expert %d is %s, expert 0 %s", what,
                                 e, hm_type_name(m->type), hm_type_name(m0->type));
            const float *b = p == 0 ? x->gate_bias : p == 1 ? x->up_bias : x->down_bias;
            if (!b != !(p == 0   ? L->experts[0].gate_bias
                        : p == 1 ? L->experts[0].up_bias
                                 : L->experts[0].down_bias))
                return hm_errorf(HM_ERR_UNSUPPORTED, "cuda: %s: expert %d has %s bias, expert 0 %s",
                                 what, e, b ? "a" : "no", b ? "none" : "has one");
            c->lw_bad |= b != NULL;
            if (b && e == 0 && ng) {
                c->exb[il * 3 + p] = take(c, sizeof(float) * (size_t)rows * (size_t)ng);
                c->weight_bytes += sizeof(float) * (size_t)rows * (size_t)ng;
            }
            if (b && slot[e] >= 0 && c->exb[il * 3 + p] && c->arena)
                CK(cudaMemcpy(c->exb[il * 3 + p] + (size_t)slot[e] * (size_t)rows, b,
                              sizeof(float) * (size_t)rows, cudaMemcpyHostToDevice),
                   what);
            if (d && slot[e] >= 0)
                CK(cudaMemcpy2D(d + (size_t)slot[e] * one, rb, m->data,
                                m->row_bytes ? m->row_bytes : rb, rb, (size_t)rows,
                                cudaMemcpyHostToDevice),
                   what);
        }
    }
    if (lw_off > c->lw_cap) c->lw_cap = lw_off;
    if (full > c->lw_full) c->lw_full = full;
    return HM_OK;
}

/* layer il's latent attention: projections, norms and the absorbed k_b / v_b copies */
static hm_status put_mla(hm_cuda_ctx *c, int il) {
    const hm_hparams *hp = &c->m->hp;
    const hm_layer *L = &c->m->layers[il];
    struct mla_w *w = &c->mla[il];
    const size_t nh = hp->n_heads, kvl = hp->kv_lora_rank, nope = hp->qk_nope_head_dim;
    char what[64];
    snprintf(what, sizeof what, "layer %d latent attention", il);
    hm_status st;
    if (hp->q_lora_rank) {
        if ((st = put_hm_matrix(c, &L->wq_a, what, &w->wq_a)) ||
            (st = put_hm_matrix(c, &L->wq_b, what, &w->wq_b)) ||
            (st = put_floats(c, L->q_a_norm, hp->q_lora_rank, &w->q_a_norm)))
            return st;
    } else if ((st = put_hm_matrix(c, &L->wq, what, &w->wq))) {
        return st;
    }
    if ((st = put_hm_matrix(c, &L->wkv_a, what, &w->wkv_a)) ||
        (st = put_floats(c, L->kv_a_norm, kvl, &w->kv_a_norm)))
        return st;
    /* the model's copies, or (where the CPU multiplies the file's split tensors and the model
     * keeps none) copies built for the upload: 16-bit, their bytes known in the sizing pass */
    const void *kb = L->k_b, *vb = L->v_b;
    uint32_t kt = L->k_b_type, vt = L->v_b_type;
    void *own[2] = {NULL, NULL};
    if (!kb) {
        kt = vt = HM_TYPE_BF16;
        if (c->arena && (st = hm_model_mla_copies(c->m, il, &own[0], &kt, &own[1], &vt))) return st;
        kb = own[0], vb = own[1];
    }
    st = put_raw(c, kb, kt, nh * nope * kvl, what, &w->k_b);
    if (!st) st = put_raw(c, vb, vt, nh * kvl * hp->v_head_dim, what, &w->v_b);
    free(own[0]), free(own[1]);
    return st;
}

/* Lays out (sizing pass: arena NULL) or fills the device memory: weights, KV cache, scratch. */
static hm_status layout(hm_cuda_ctx *c) {
    const hm_model *m = c->m;
    const hm_hparams *hp = &m->hp;
    const hm_graph *g = c->g;
    hm_status st;
    c->used = 0, c->weight_bytes = 0, c->expert_bytes = 0;
    const int64_t E0 = hp->n_experts ? hp->n_experts : 1;
    c->slot_of = take(c, sizeof(int32_t) * (size_t)hp->n_layers * (size_t)E0);
    c->sslot_of = c->cpu_moe ? take(c, sizeof(int32_t) * (size_t)hp->n_layers * (size_t)E0) : NULL;
    c->d_counts = c->dynamic ? take(c, sizeof(uint32_t) * (size_t)hp->n_layers * (size_t)E0) : NULL;
    c->lw_cap = c->lw_full = 0, c->lw_bad = false;
    if ((st = put_hm_matrix(c, &m->tok_embd, "token embedding", &c->tok_embd))) return st;
    if (m->output.data == m->tok_embd.data && m->output.type == m->tok_embd.type)
        c->output = c->tok_embd; /* tied */
    else if ((st = put_hm_matrix(c, &m->output, "output", &c->output)))
        return st;
    if ((st = put_floats(c, m->output_norm, hp->hidden, &c->out_norm))) return st;
    for (int i = 0; i < g->n; i++) {
        const hm_node *nd = &g->nodes[i];
        char what[64];
        snprintf(what, sizeof what, "layer %d %s", nd->il, hm_op_name(nd->op));
        if (nd->op == HM_OP_MATMUL && (st = put_hm_matrix(c, nd->w, what, &c->nw[i]))) return st;
        if (nd->op == HM_OP_MATMUL && nd->bias &&
            (st = put_floats(c, nd->bias, (size_t)nd->w->rows, &c->nb[i])))
            return st;
        const size_t nn = nd->op == HM_OP_QK_ROPE_KV    ? hp->head_dim
                          : nd->op == HM_OP_ROUTER_TOPK ? hp->n_experts
                          : nd->op == HM_OP_ATTN        ? hp->n_heads
                                                        : hp->hidden;
        if (nd->nw && (st = put_floats(c, nd->nw, nn, &c->nn1[i]))) return st;
        if (nd->nw2 && (st = put_floats(c, nd->nw2, nn, &c->nn2[i]))) return st;
        if (nd->op == HM_OP_MOE && (st = put_experts(c, nd->il))) return st;
        if (nd->op == HM_OP_MLA && (st = put_mla(c, nd->il))) return st;
    }
    /* KV cache */
    const size_t el = c->kv.f16 ? 2 : 4;
    const size_t kvn = (size_t)hp->n_layers * (size_t)c->kv.n_seq * (size_t)c->kv.n_kv_heads *
                       (size_t)c->kv.kv_ctx * (size_t)c->kv.head_dim;
    const size_t before = c->used;
    c->kv.k = take(c, kvn * el);
    c->kv.v = c->kv.v_dim ? c->kv.k : take(c, kvn * el); /* MLA: values from the latents */
    c->kv_bytes = c->used - before;
    /* slots and scratch */
    const int64_t B = c->n_batch, H = hp->hidden;
    const int64_t qd = (int64_t)hp->n_heads * hp->head_dim,
                  kvd = hp->kv_lora_rank ? (int64_t)(hp->kv_lora_rank + hp->qk_rope_head_dim)
                                         : (int64_t)hp->n_kv_heads * hp->head_dim,
                  ad = hp->kv_lora_rank ? (int64_t)hp->n_heads * hp->v_head_dim : qd;
    /* gate/up rows: the dense MLP's or the shared expert's, whichever is wider */
    int64_t F = hp->ffn_inter;
    if (hp->n_shared_experts && (int64_t)hp->shared_inter > F) F = hp->shared_inter;
    if (F < 1) F = 1;
    const int64_t E = hp->n_experts ? hp->n_experts : 1;
    const int64_t cols[HM_SLOT_COUNT] = {
        [HM_SLOT_X] = H,   [HM_SLOT_XN] = H,   [HM_SLOT_Q] = qd,  [HM_SLOT_K] = kvd,
        [HM_SLOT_V] = kvd, [HM_SLOT_ATT] = ad, [HM_SLOT_TMP] = H, [HM_SLOT_RL] = E,
        [HM_SLOT_G] = F,   [HM_SLOT_U] = F,    [HM_SLOT_SH] = H};
    for (int s = HM_SLOT_X; s < HM_SLOT_COUNT; s++) {
        c->cols[s] = cols[s];
        c->slot[s] = take(c, sizeof(float) * (size_t)(B * cols[s]));
    }
    if (hp->kv_lora_rank) {
        const size_t nh = hp->n_heads, kvl = hp->kv_lora_rank, rope = hp->qk_rope_head_dim;
        c->mla_qa = take(c, sizeof(float) * (size_t)B * (hp->q_lora_rank ? hp->q_lora_rank : 1));
        c->mla_q = take(c, sizeof(float) * (size_t)B * nh * (kvl + rope));
        c->mla_o = take(c, sizeof(float) * (size_t)B * nh * kvl);
    }
    c->d_in = take(c, sizeof(int32_t) * 4 * (size_t)B);
    c->d_cs = take(c, sizeof(float) * (size_t)B * (hp->rope_dim ? hp->rope_dim : 1));
    const int64_t K = c->k, I = hp->moe_inter ? hp->moe_inter : 1;
    c->ids = take(c, sizeof(int32_t) * (size_t)(B * K));
    c->w = take(c, sizeof(float) * (size_t)(B * K));
    c->moe_g = take(c, sizeof(float) * (size_t)(B * K * I));
    c->moe_u = take(c, sizeof(float) * (size_t)(B * K * I));
    c->moe_y = take(c, sizeof(float) * (size_t)(B * K * H));
    c->max_tiles = hm_cu_moe_max_tiles((int)(B * K), (int)E, HM_CU_MATVEC_MAX); /* the most */
    c->ord.pos_of = take(c, sizeof(int32_t) * (size_t)(B * K));
    c->ord.xrow = take(c, sizeof(int32_t) * (size_t)(B * K));
    c->ord.tile_e = take(c, sizeof(int32_t) * (size_t)c->max_tiles);
    c->ord.tile_i0 = take(c, sizeof(int32_t) * (size_t)c->max_tiles);
    c->ord.tile_n = take(c, sizeof(int32_t) * (size_t)c->max_tiles);
    c->ord.n_tiles = take(c, sizeof(int32_t));
    c->gid = take(c, sizeof(int32_t) * (size_t)(B * K));
    c->att_splits = hm_cu_attention_splits(c->kv.kv_ctx);
    c->att_part = take(c, sizeof(float) * (size_t)HM_CU_MATVEC_MAX * hp->n_heads *
                              (size_t)c->att_splits * ((size_t)c->kv.head_dim + 2));
    c->cpu_out = c->cpu_moe ? take(c, sizeof(float) * (size_t)(B * H)) : NULL;
    c->d_cnt = take(c, sizeof(unsigned) * HM_CNT_COUNT);
    /* layerwise prefill's two buffers of the largest layer's CPU experts */
    const bool lw = c->cpu_moe && c->prefill_stream != HM_PREFILL_STREAM_OFF && !c->lw_bad &&
                    c->lw_cap && B > HM_CU_MATVEC_MAX;
    c->lw_buf[0] = lw ? take(c, c->lw_cap) : NULL;
    c->lw_buf[1] = lw ? take(c, c->lw_cap) : NULL;
    /* the GEMM path's dequantized rows: the largest matrix, at most 32M floats at a time */
    int64_t big = m->output.rows * m->output.cols;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == HM_OP_MATMUL && g->nodes[i].w->rows * g->nodes[i].w->cols > big)
            big = g->nodes[i].w->rows * g->nodes[i].w->cols;
    c->deq_elems = big < ((int64_t)1 << 25) ? big : ((int64_t)1 << 25);
    if (c->deq_elems < H) c->deq_elems = H;
    c->deq = B > HM_CU_MATVEC_MAX ? take(c, sizeof(float) * (size_t)c->deq_elems) : NULL;
    /* BF16 batches: the activations of the widest matmul as BF16 */
    int64_t wide = H > (int64_t)hp->q_lora_rank ? H : (int64_t)hp->q_lora_rank;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == HM_OP_MATMUL && g->nodes[i].w->cols > wide)
            wide = g->nodes[i].w->cols;
    c->xb = c->bf16 && B > HM_CU_MATVEC_MAX ? take(c, sizeof(uint16_t) * (size_t)(B * wide)) : NULL;
    c->xh = B > HM_CU_MATVEC_MAX ? take(c, sizeof(uint16_t) * (size_t)(B * wide)) : NULL;
    if (B <= HM_CU_MATVEC_MAX) c->deq_elems = 0;
    c->logits = take(c, sizeof(float) * (size_t)LOGIT_ROWS * hp->vocab_size);
    c->d_top_ids = take(c, sizeof(int32_t) * (size_t)B * HM_CU_TOP_MAX);
    c->d_top_vals = take(c, sizeof(float) * (size_t)B * HM_CU_TOP_MAX);
    c->d_top_bad = take(c, sizeof(int32_t) * (size_t)B);
    c->d_epoch = c->cpu_moe ? take(c, sizeof(uint32_t)) : NULL;
    const size_t tsc = hm_cu_top_scratch(B > LOGIT_ROWS ? B : LOGIT_ROWS, (int)hp->vocab_size);
    c->d_top_scratch = tsc ? take(c, tsc) : NULL;
    return HM_OK;
}

/* decode attention's counters, with which its last split merges (hm_cu_attn.cnt; read only
 * with splits): NULL where the merge runs as a launch of its own */
static unsigned *att_cnt(const hm_cuda_ctx *c) {
    return c->no_fuse || c->m->hp.n_heads > 128 ? NULL : c->d_cnt + HM_CNT_ATT;
}

/* y = W x over n tokens (x rows xs floats apart, y rows ys) */
static hm_status mm(hm_cuda_ctx *c, const hm_cu_w *w, const float *x, int64_t xs, int n, float *y,
                    int64_t ys) {
    if (n <= c->mv_max) {
        CK(hm_cu_matvec(w, x, xs, n, y, ys, c->s), "matvec");
        return HM_OK;
    }
    const float one = 1.0f, zero = 0.0f;
    if (n >= c->hgemm_min && c->xh && c->deq && !c->no_mmq &&
        (hm_cu_mmq_type_ok(w->type) || w->type == HM_TYPE_F16) && !(w->cols % 32)) {
        CK(hm_cu_f32_to_f16(x, xs, n, w->cols, c->xh, c->s), "activations to half");
        const int64_t chunk = 2 * c->deq_elems / w->cols;
        if (chunk < 1)
            return hm_errorf(HM_ERR_INTERNAL, "cuda: no half scratch for %lld columns",
                             (long long)w->cols);
        for (int64_t r0 = 0; r0 < w->rows; r0 += chunk) {
            const int64_t nr = w->rows - r0 < chunk ? w->rows - r0 : chunk;
            CK(hm_cu_dequant_f16(w, r0, nr, (uint16_t *)c->deq, c->s), "weights to half");
            cublasStatus_t bs = cublasGemmEx(
                c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, n, (int)w->cols, &one, c->deq,
                CUDA_R_16F, (int)w->cols, c->xh, CUDA_R_16F, (int)w->cols, &zero, y + r0,
                CUDA_R_32F, (int)ys, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            if (bs != CUBLAS_STATUS_SUCCESS)
                return hm_errorf(HM_ERR_DEVICE,
                                 "cublas: half GEMM %lldx%lld by %d tokens: status %d",
                                 (long long)nr, (long long)w->cols, n, (int)bs);
        }
        return HM_OK;
    }
    if (!c->no_mmq && hm_cu_mmq_type_ok(w->type)) {
        const hm_cu_mmq_args a = {x, xs, NULL, y, ys, NULL, NULL, NULL, NULL, n};
        CK(hm_cu_mmq(w, &a, 0, c->s), "quantized matmul");
        return HM_OK;
    }
    if (c->xb && w->type == HM_TYPE_BF16 && w->row_bytes == (size_t)w->cols * 2) {
        CK(hm_cu_f32_to_bf16(x, xs, n, w->cols, c->xb, c->s), "activations to BF16");
        cublasStatus_t bs =
            cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->rows, n, (int)w->cols, &one,
                         w->data, CUDA_R_16BF, (int)w->cols, c->xb, CUDA_R_16BF, (int)w->cols,
                         &zero, y, CUDA_R_32F, (int)ys, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (bs != CUBLAS_STATUS_SUCCESS)
            return hm_errorf(HM_ERR_DEVICE, "cublas: BF16 GEMM %lldx%lld by %d tokens: status %d",
                             (long long)w->rows, (long long)w->cols, n, (int)bs);
        return HM_OK;
    }
    if (w->type == HM_TYPE_F32 && w->row_bytes == (size_t)w->cols * sizeof(float)) {
        cublasStatus_t bs =
            cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->rows, n, (int)w->cols, &one,
                        w->data, (int)w->cols, x, (int)xs, &zero, y, (int)ys);
        if (bs != CUBLAS_STATUS_SUCCESS)
            return hm_errorf(HM_ERR_DEVICE, "cublas: sgemm %lldx%lld by %d tokens: status %d",
                             (long long)w->rows, (long long)w->cols, n, (int)bs);
        return HM_OK;
    }
    const int64_t chunk = c->deq_elems / w->cols;
    if (chunk < 1)
        return hm_errorf(HM_ERR_INTERNAL, "cuda: no dequantization scratch for %lld columns",
                         (long long)w->cols);
    for (int64_t r0 = 0; r0 < w->rows; r0 += chunk) {
        const int64_t nr = w->rows - r0 < chunk ? w->rows - r0 : chunk;
        CK(hm_cu_dequant_f32(w, r0, nr, c->deq, c->s), "dequantize");
        cublasStatus_t bs =
            cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, n, (int)w->cols, &one, c->deq,
                        (int)w->cols, x, (int)xs, &zero, y + r0, (int)ys);
        if (bs != CUBLAS_STATUS_SUCCESS)
            return hm_errorf(HM_ERR_DEVICE, "cublas: sgemm %lldx%lld by %d tokens: status %d",
                             (long long)nr, (long long)w->cols, n, (int)bs);
    }
    return HM_OK;
}

static void prof_start(hm_cuda_ctx *c) {
    if (c->prof) cudaEventRecord(c->pev[0], c->s);
}

static void prof_stop(hm_cuda_ctx *c, int part) {
    if (!c->prof) return;
    float ms = 0;
    cudaEventRecord(c->pev[1], c->s);
    if (cudaEventSynchronize(c->pev[1]) == cudaSuccess &&
        cudaEventElapsedTime(&ms, c->pev[0], c->pev[1]) == cudaSuccess)
        c->prof_ms[part] += ms;
}

static const int32_t *d_tok(const hm_cuda_ctx *c) {
    return c->d_in;
}
static const int32_t *d_pos(const hm_cuda_ctx *c) {
    return c->d_in + c->n_batch;
}
static const int32_t *d_seq(const hm_cuda_ctx *c) {
    return c->d_in + 2 * c->n_batch;
}
static const int32_t *d_rows(const hm_cuda_ctx *c) {
    return c->d_in + 3 * c->n_batch;
}

static uint32_t *bell_out(const hm_cuda_ctx *c, int il) {
    return c->h_bell + (size_t)il * BELL_STRIDE;
}
static uint32_t *bell_in(const hm_cuda_ctx *c, int il) {
    return c->h_bell + ((size_t)c->m->hp.n_layers + (size_t)il) * BELL_STRIDE;
}

/* the seconds an expert engine's batches have taken (its phases, which add up to the wall time)
 * since its profile's last reset */
static double moe_seconds(hm_moe *m) {
    double sec[HM_MOE_PROF_N], t = 0;
    hm_moe_profile(m, sec, false);
    for (int k = 0; k < HM_MOE_PROF_N; k++) t += sec[k];
    return t;
}

/* Host functions of the hybrid step (they run on a CUDA thread, in stream order, and must not
 * call CUDA): the layer's CPU experts submitted to its engine's async pool, and waited for. */
static void CUDART_CB submit_cb(void *arg) {
    hyb_cb *h = arg;
    hm_cuda_ctx *c = h->c;
    if (c->hyb_st) return;
    const int il = h->il, E = (int)c->m->hp.n_experts;
    if (c->def_pend >= 0) { /* the engines share a pool and a scratch: one batch at a time */
        const uint64_t t0 = hm_time_ns();
        hm_moe_wait(c->cpu_moe[c->def_pend]);
        c->hyb_wait_ns += hm_time_ns() - t0;
    }
    /* deferral where the next layer has CPU experts to join (never past the last; never in a
     * streamed batch, whose next layer may have none left to the CPU) */
    const bool defer =
        c->defer > 0 && !c->lw_on && il + 1 < (int)c->m->hp.n_layers && c->cpu_moe[il + 1];
    const int32_t *ids = c->h_ids;
    if (c->lw_on && c->lw_ns[il] < c->lw_nc[il]) {    /* split: the experts not streamed */
        if (c->lw_done_ns && c->lw_done_il == il - 1) /* the GPU's own part of this layer */
            c->lw_gap_s += (double)(hm_time_ns() - c->lw_done_ns) * 1e-9, c->lw_gap_n++;
        h->prof0 = moe_seconds(c->cpu_moe[il]);
        const int32_t *cs = c->cslot + (size_t)il * (size_t)E;
        const int ns = c->lw_ns[il];
        for (int q = 0; q < c->cur_n * c->k; q++) {
            const int32_t id = c->h_ids[q];
            c->s_ids[q] = id >= 0 && id < E && cs[id] >= ns ? id : -1;
        }
        ids = c->s_ids;
    }
    if (defer) {
        hm_defer_split(c->h_ids, c->h_w, c->cur_n, c->k,
                       c->gpu_mask ? c->gpu_mask + (size_t)il * (size_t)E : NULL, c->defer,
                       c->d_now, c->d_later);
        ids = c->d_now;
    }
    h->defer = defer;
    const hm_status st = hm_moe_submit(c->cpu_moe[il], c->h_x, HM_MOE_F32, ids, c->h_w, c->cur_n,
                                       c->k, c->h_out, HM_MOE_F32, false);
    if (st) {
        snprintf(c->hyb_msg, sizeof c->hyb_msg, "layer %d CPU experts: %s", h->il, hm_last_error());
        c->hyb_st = st;
        memset(c->h_out, 0, sizeof(float) * (size_t)c->cur_n * c->m->hp.hidden);
        return;
    }
    h->pending = true;
    h->t_sub = hm_time_ns();
}

static void CUDART_CB wait_cb(void *arg) {
    hyb_cb *h = arg;
    if (!h->pending) return;
    hm_cuda_ctx *c = h->c;
    const uint64_t t0 = hm_time_ns();
    hm_moe_wait(c->cpu_moe[h->il]);
    const uint64_t t1 = hm_time_ns();
    h->pending = false;
    /* a wait of more than 5 us: the CPU was still busy, and finished at t1 */
    const bool blocked = t1 - t0 > 5000;
    c->hyb_wait_ns += t1 - t0;
    c->hyb_span_ns += (blocked ? t1 : t0) - h->t_sub;
    c->hyb_layers++;
    c->hyb_blocked += blocked;
    const int il = h->il, nc = c->lw_on ? c->lw_nc[il] : 0, ns = c->lw_on ? c->lw_ns[il] : 0;
    if (ns < nc) { /* a split layer: what the CPU's share took (lw_plan) */
        const double t = moe_seconds(c->cpu_moe[il]) - h->prof0;
        if (t > 0) {
            c->lw_obs_s += t * (double)nc / (double)(nc - ns);
            c->lw_obs++, c->lw_obs_tok = c->cur_n;
        }
        c->lw_done_ns = hm_time_ns(), c->lw_done_il = il;
    }
    const size_t nh = (size_t)c->cur_n * c->m->hp.hidden;
    if (c->def_pend >= 0) { /* the previous layer's deferred experts join this layer's sum */
        for (size_t i = 0; i < nh; i++) c->h_out[i] += c->h_def[i];
        c->def_pend = -1;
    }
    if (h->defer && !c->hyb_st) {
        /* the next layer's copies overwrite h_x and h_w while these experts still read them */
        memcpy(c->d_x, c->h_x, sizeof(float) * nh);
        memcpy(c->d_w, c->h_w, sizeof(float) * (size_t)c->cur_n * (size_t)c->k);
        const hm_status st = hm_moe_submit(c->cpu_moe[h->il], c->d_x, HM_MOE_F32, c->d_later,
                                           c->d_w, c->cur_n, c->k, c->h_def, HM_MOE_F32, false);
        if (st) {
            snprintf(c->hyb_msg, sizeof c->hyb_msg, "layer %d deferred CPU experts: %s", h->il,
                     hm_last_error());
            c->hyb_st = st;
            return;
        }
        c->def_pend = h->il;
    }
}

/* Layerwise prefill: the CPU experts of the j-th layer that has them into lw_buf[j % 2] on the
 * copy stream, once the layer that used the buffer before has been computed; runs of experts
 * that lie one after another in host memory (a GGUF's expert tensors) as one copy. */
static hm_status lw_copy(hm_cuda_ctx *c, int j) {
    const int il = c->lw_order[j], b = j & 1, E = (int)c->m->hp.n_experts;
    const hm_layer *L = &c->m->layers[il];
    const uint8_t *mask = c->gpu_mask ? c->gpu_mask + (size_t)il * (size_t)E : NULL;
    int lim = 0; /* past the last streamed expert: the first lw_ns of the CPU ones */
    for (int nc = 0; lim < E && nc < c->lw_ns[il]; lim++) nc += !(mask && mask[lim]);
    CK(cudaStreamWaitEvent(c->cs, c->lw_free[b], 0), "layerwise prefill: buffer");
    if (c->lw_tev) CK(cudaEventRecord(c->lw_tev[2 * j], c->cs), "layerwise prefill: copy timing");
    for (int p = 0; p < 3; p++) {
        const hm_cu_w *w = &c->lw_w[il * 3 + p];
        uint8_t *dst = c->lw_buf[b] + (uintptr_t)w->data;
        for (int e = 0; e < lim;) {
            if (mask && mask[e]) {
                e++;
                continue;
            }
            const hm_moe_matrix *m = proj(&L->experts[e], p);
            const size_t srb = m->row_bytes ? m->row_bytes : w->row_bytes;
            const uint8_t *src = m->data, *end = src + w->estride;
            int e2 = e + 1;
            while (srb == w->row_bytes && e2 < lim && !(mask && mask[e2]) &&
                   proj(&L->experts[e2], p)->data == (const void *)end &&
                   (!proj(&L->experts[e2], p)->row_bytes ||
                    proj(&L->experts[e2], p)->row_bytes == w->row_bytes))
                end += w->estride, e2++;
            if (srb == w->row_bytes)
                CK(cudaMemcpyAsync(dst, src, (size_t)(end - src), cudaMemcpyHostToDevice, c->cs),
                   "layerwise prefill: copy");
            else
                CK(cudaMemcpy2DAsync(dst, w->row_bytes, src, srb, w->row_bytes, (size_t)w->rows,
                                     cudaMemcpyHostToDevice, c->cs),
                   "layerwise prefill: copy");
            dst += (size_t)(end - src), c->lw_bytes += (uint64_t)(end - src), e = e2;
        }
    }
    CK(cudaEventRecord(c->lw_ready[b], c->cs), "layerwise prefill: copy");
    if (c->lw_tev)
        CK(cudaEventRecord(c->lw_tev[2 * j + 1], c->cs), "layerwise prefill: copy timing");
    return HM_OK;
}

/* act(gate + its bias, up + its bias) of np expert rows in moe_g (rows at pos_of, or in pair
 * order), the experts' places in ids */
static cudaError_t glu_biased(hm_cuda_ctx *c, int il, const int32_t *ids, const int32_t *pos_of,
                              int np) {
    const hm_hparams *hp = &c->m->hp;
    const int64_t I = hp->moe_inter;
    cudaError_t e = hm_cu_expert_bias(c->moe_g, I, pos_of, ids, np, c->exb[il * 3], I, c->s);
    if (e == cudaSuccess)
        e = hm_cu_expert_bias(c->moe_u, I, pos_of, ids, np, c->exb[il * 3 + 1], I, c->s);
    if (e == cudaSuccess)
        e = hm_cu_glu(c->moe_g, I, c->moe_u, I, np, I, (int)hp->act, hp->swiglu_alpha,
                      hp->swiglu_limit, c->s);
    return e;
}

/* The pairs ids (places in ex, -1: none) of n tokens on the tiles, in expert order: gate and up,
 * the activation with layer il's expert biases (none when the layer has none), down, their sum
 * into out. Batches of up to mv_max tokens take tiles of up to HM_CU_MATVEC_MAX places on the
 * matvec (hm_cu_mmv_tile's; their activations gathered into place order first, in moe_y, which
 * down overwrites), larger ones tiles of 64 on the tensor cores. */
static hm_status moe_tiles(hm_cuda_ctx *c, int il, const hm_cu_w ex[3], const int32_t *ids, int n,
                           const float *x, int64_t xs, float *out, int64_t os) {
    const hm_hparams *hp = &c->m->hp;
    const int np = n * c->k, E = (int)hp->n_experts;
    const int64_t I = hp->moe_inter, H = hp->hidden;
    const bool mv = n <= c->mv_max;
    int tile = 64; /* the tensor cores'; on the matvec what all three take at full speed */
    if (mv) {
        tile = hm_cu_mmv_tile(&ex[0]);
        const int tu = hm_cu_mmv_tile(&ex[1]), td = hm_cu_mmv_tile(&ex[2]);
        tile = tu < tile ? tu : tile;
        tile = td < tile ? td : tile;
    }
    const int mt = hm_cu_moe_max_tiles(np, E, tile);
    CK(hm_cu_moe_sort(ids, np, E, c->k, tile, &c->ord, c->s), "experts' order");
    const hm_cu_moe_order *o = &c->ord;
    hm_cu_mmq_args a = {x,         xs,         o->xrow,   c->moe_g,   I,
                        o->tile_e, o->tile_i0, o->tile_n, o->n_tiles, np};
    if (mv) {
        const hm_cu_w xv = {HM_TYPE_F32, x, n, H, sizeof(float) * (size_t)xs, 0}; /* x's rows */
        CK(hm_cu_embed(&xv, o->xrow, np, c->moe_y, c->s), "experts' inputs");
        a.x = c->moe_y, a.xs = H, a.xrow = NULL;
    }
#define RUN(w) (mv ? hm_cu_mmv_tiles(w, &a, tile, mt, c->s) : hm_cu_mmq(w, &a, mt, c->s))
    CK(RUN(&ex[0]), "experts' gate");
    a.y = c->moe_u;
    CK(RUN(&ex[1]), "experts' up");
    CK(glu_biased(c, il, ids, o->pos_of, np), "experts' glu");
    a.x = c->moe_g, a.xs = I, a.xrow = NULL, a.y = c->moe_y, a.ys = H;
    CK(RUN(&ex[2]), "experts' down");
#undef RUN
    CK(hm_cu_expert_bias(c->moe_y, H, o->pos_of, ids, np, c->exb[il * 3 + 2], H, c->s),
       "experts' down bias");
    CK(hm_cu_moe_combine(c->moe_y, H, o->pos_of, c->w, n, c->k, H, out, os, c->s), "experts' sum");
    return HM_OK;
}

/* Layerwise prefill of a batch of n tokens: how many of each layer's CPU experts stream (the
 * split, or all of them), and the streamed experts' places on the GPU (sslot_of), uploaded ahead
 * of the batch's kernels. */
static hm_status lw_plan(hm_cuda_ctx *c, int n) {
    const int L = (int)c->m->hp.n_layers, E = (int)c->m->hp.n_experts;
    if (c->lw_obs) { /* the last split batch's layers (its step has ended; lw_ns is its) */
        double gsum = 0;
        int gn = 0;
        for (int j = 0; j < c->n_lw && c->lw_tev; j++) {
            const int il = c->lw_order[j];
            float ms = 0;
            if (c->lw_ns[il] < 1 ||
                cudaEventElapsedTime(&ms, c->lw_tev[2 * j], c->lw_tev[2 * j + 1]) != cudaSuccess) {
                cudaGetLastError();
                continue;
            }
            gsum += 1e-3 * ms * (double)c->lw_nc[il] / (double)c->lw_ns[il], gn++;
        }
        const double cpu = c->lw_obs_s / c->lw_obs, gpu = gn ? gsum / gn : c->lw_copy_s;
        const double r = hm_place_rate_update(c->lw_rate, c->lw_obs_tok, cpu, 1);
        const double g = 1.0 / hm_place_rate_update(1.0 / c->lw_copy_s, 1, gpu, 1);
        /* the GPU's own part, in seconds per token, moves halfway too (set by the first) */
        const double own = c->lw_gap_n ? c->lw_gap_s / c->lw_gap_n : 0,
                     own_tok = own / c->lw_obs_tok,
                     gt = !c->lw_gap_n        ? c->lw_gpu_tok
                          : c->lw_gpu_tok > 0 ? 0.5 * (c->lw_gpu_tok + own_tok)
                                              : own_tok;
        hm_log(HM_LOG_DEBUG,
               "cuda: layerwise prefill: %d layers of %d tokens, as if all of a layer's CPU "
               "experts: the CPU %.2f ms, the copy %.2f ms, the GPU's own part %.2f ms; the rate "
               "%.0f -> %.0f tokens/s, the copy %.2f -> %.2f ms, the GPU's part %.2f -> %.2f us "
               "a token",
               c->lw_obs, c->lw_obs_tok, 1e3 * cpu, 1e3 * gpu, 1e3 * own, c->lw_rate, r,
               1e3 * c->lw_copy_s, 1e3 * g, 1e6 * c->lw_gpu_tok, 1e6 * gt);
        c->lw_rate = r, c->lw_copy_s = g, c->lw_gpu_tok = gt, c->lw_seen = true;
        c->lw_obs_s = 0, c->lw_obs = 0;
    }
    c->lw_gap_s = 0, c->lw_gap_n = 0, c->lw_done_ns = 0;
    const double f =
        hm_place_stream_plan(c->lw_copy_s, c->lw_rate, c->lw_gpu_tok, n, c->lw_force, c->lw_seen);
    for (int j = 0; j < c->n_lw; j++) {
        const int il = c->lw_order[j], nc = c->lw_nc[il];
        const int ns = (int)lround(f * nc);
        c->lw_ns[il] = ns < 1 ? 1 : (ns > nc ? nc : ns);
    }
    for (int il = 0; il < L; il++)
        for (int e = 0; e < E; e++) {
            const size_t i = (size_t)il * (size_t)E + (size_t)e;
            c->h_sslot[i] = c->cslot[i] >= 0 && c->cslot[i] < c->lw_ns[il] ? c->cslot[i] : -1;
        }
    CK(cudaMemcpyAsync(c->sslot_of, c->h_sslot, sizeof(int32_t) * (size_t)L * (size_t)E,
                       cudaMemcpyHostToDevice, c->s),
       "layerwise prefill: slots");
    return HM_OK;
}

/* Layerwise prefill: layer il's CPU experts on the GPU from the buffer their copy went to (the
 * pairs as places among the layer's CPU experts, in tiles), their sum added to out; then the
 * next such layer's copy, which may hold this thread (a copy from pageable memory returns once
 * it is staged) while the GPU computes what is queued. */
static hm_status run_streamed(hm_cuda_ctx *c, int il, int n, const float *x, int64_t xs, float *out,
                              int64_t os) {
    const hm_hparams *hp = &c->m->hp;
    const int j = c->lw_idx[il], b = j & 1, np = n * c->k, E = (int)hp->n_experts;
    const int64_t H = hp->hidden;
    if (os != H || j < 0)
        return hm_errorf(HM_ERR_INTERNAL, "cuda: layerwise prefill of layer %d (stride %lld)", il,
                         (long long)os);
    CK(cudaStreamWaitEvent(c->s, c->lw_ready[b], 0), "layerwise prefill: the copy");
    CK(hm_cu_moe_gid(c->ids, np, c->sslot_of + (size_t)il * (size_t)E, c->gid, c->s),
       "CPU expert slots");
    hm_cu_w w[3];
    for (int p = 0; p < 3; p++) {
        w[p] = c->lw_w[il * 3 + p];
        w[p].data = c->lw_buf[b] + (uintptr_t)w[p].data;
    }
    hm_status st = moe_tiles(c, il, w, c->gid, n, x, xs, c->cpu_out, H); /* no biases: lw_bad */
    if (st) return st;
    CK(cudaEventRecord(c->lw_free[b], c->s), "layerwise prefill: buffer");
    CK(hm_cu_rmsnorm(out, c->cpu_out, NULL, NULL, NULL, n, H, 0.0f, c->s),
       "add the streamed experts");
    c->lw_layers++;
    return j + 1 < c->n_lw ? lw_copy(c, j + 1) : HM_OK;
}

/* The routed experts of layer nd->il for n tokens (ids and weights in c->ids, c->w). Decode
 * batches: a matvec per (token, expert) pair. Larger ones: the pairs in expert order and tiles
 * (moe_tiles), so each expert's weights are read once per tile of its tokens. Hybrid: the inputs go
 * to pinned memory and the CPU engine (a host function submits), the GPU computes its own experts
 * meanwhile (the CPU's pairs map to slot -1 and add nothing), a second host function waits, and the
 * CPU's sum is copied back and added. A streamed layer (layerwise prefill) adds its streamed
 * experts' sum before that, the CPU computing the others meanwhile where the layer is split. */
static hm_status run_moe(hm_cuda_ctx *c, const hm_node *nd, int n, const float *x, int64_t xs,
                         float *out, int64_t os, bool sum_next) {
    const hm_hparams *hp = &c->m->hp;
    const int il = nd->il;
    const hm_cu_w *ex = &c->ex[il * 3];
    const int np = n * c->k;
    const int64_t I = hp->moe_inter, H = hp->hidden;
    const bool streamed = c->lw_on && c->cpu_moe && c->cpu_moe[il];
    if (c->d_counts && np) /* --dynamic-experts */
        CK(hm_cu_moe_count(c->ids, np, (int)hp->n_experts, c->d_counts + (size_t)il * hp->n_experts,
                           c->s),
           "expert counts");
    const bool split = streamed && c->lw_ns[il] < c->lw_nc[il]; /* some stay on the CPU */
    const bool on_cpu = c->cpu_moe && c->cpu_moe[il] && (!streamed || split),
               on_gpu = ex[0].data != NULL, bell = on_cpu && c->bells && !streamed;
    if (bell) {
        CK(hm_cu_handoff_out(x, xs, n, H, c->ids, c->w, np, c->h_x, c->h_ids, c->h_w,
                             bell_out(c, il), c->d_epoch, c->s),
           "experts' input to the CPU");
    } else if (on_cpu) {
        CK(cudaMemcpy2DAsync(c->h_x, sizeof(float) * (size_t)H, x, sizeof(float) * (size_t)xs,
                             sizeof(float) * (size_t)H, (size_t)n, cudaMemcpyDeviceToHost, c->s),
           "experts' input to the host");
        CK(cudaMemcpyAsync(c->h_ids, c->ids, sizeof(int32_t) * (size_t)np, cudaMemcpyDeviceToHost,
                           c->s),
           "expert ids to the host");
        CK(cudaMemcpyAsync(c->h_w, c->w, sizeof(float) * (size_t)np, cudaMemcpyDeviceToHost, c->s),
           "expert weights to the host");
        CK(cudaLaunchHostFunc(c->s, submit_cb, &c->cb[il]), "host function (submit)");
    }
    if (!on_gpu && !bell) {
        CK(cudaMemset2DAsync(out, sizeof(float) * (size_t)os, 0, sizeof(float) * (size_t)H,
                             (size_t)n, c->s),
           "experts' sum");
    } else if (on_gpu) {
        const int32_t *ids = c->ids;
        if (c->remap[il]) {
            CK(hm_cu_moe_gid(c->ids, np, c->slot_of + (size_t)il * hp->n_experts, c->gid, c->s),
               "expert slots");
            ids = c->gid;
        }
        const bool tiles =
            n > HM_CU_MATVEC_MAX &&
            (n <= c->mv_max || (!c->no_mmq && hm_cu_mmq_type_ok(ex[0].type) &&
                                hm_cu_mmq_type_ok(ex[1].type) && hm_cu_mmq_type_ok(ex[2].type)));
        if (tiles) {
            hm_status st = moe_tiles(c, il, ex, ids, n, x, xs, out, os);
            if (st) return st;
        } else {
            if (!c->no_fuse && ex[0].type == ex[1].type) {
                CK(hm_cu_matvec_experts_glu(&ex[0], &ex[1], c->exb[il * 3], c->exb[il * 3 + 1], ids,
                                            np, x, xs, c->k, (int)hp->act, hp->swiglu_alpha,
                                            hp->swiglu_limit, c->moe_g, I, c->s),
                   "experts' gate, up and glu");
            } else {
                CK(hm_cu_matvec_experts(&ex[0], ids, np, x, xs, c->k, c->moe_g, I, c->s),
                   "experts' gate");
                CK(hm_cu_matvec_experts(&ex[1], ids, np, x, xs, c->k, c->moe_u, I, c->s),
                   "experts' up");
                CK(glu_biased(c, il, ids, NULL, np), "experts' glu");
            }
            /* the weighted sum left to the residual add that follows (hm_cu_rmsnorm_moe) where
             * the layer's experts are all here, else down and the sum in one launch where there
             * is no down bias */
            if (sum_next && !on_cpu && !streamed && !c->exb[il * 3 + 2]) {
                CK(hm_cu_matvec_experts(&ex[2], ids, np, c->moe_g, I, 1, c->moe_y, H, c->s),
                   "experts' down");
                c->sum_left = true;
                return HM_OK;
            }
            const cudaError_t e =
                c->no_fuse || c->exb[il * 3 + 2]
                    ? cudaErrorInvalidValue
                    : hm_cu_matvec_experts_sum(&ex[2], ids, n, c->k, c->moe_g, I, c->moe_y, H, c->w,
                                               out, os, c->d_cnt + HM_CNT_SUM, c->s);
            if (e == cudaErrorInvalidValue) {
                cudaGetLastError();
                CK(hm_cu_matvec_experts(&ex[2], ids, np, c->moe_g, I, 1, c->moe_y, H, c->s),
                   "experts' down");
                CK(hm_cu_expert_bias(c->moe_y, H, NULL, ids, np, c->exb[il * 3 + 2], H, c->s),
                   "experts' down bias");
                CK(hm_cu_moe_combine(c->moe_y, H, NULL, c->w, n, c->k, H, out, os, c->s),
                   "experts' sum");
            } else {
                CK(e, "experts' down and sum");
            }
        }
    }
    if (streamed) {
        const hm_status st = run_streamed(c, il, n, x, xs, out, os);
        if (st) return st;
    }
    if (bell) {
        CK(hm_cu_handoff_in(bell_in(c, il), c->d_epoch, c->h_out, n, H, on_gpu, out, os,
                            c->h_bell_err, c->s),
           "CPU experts' sum to the GPU");
    } else if (on_cpu) {
        CK(cudaLaunchHostFunc(c->s, wait_cb, &c->cb[il]), "host function (wait)");
        if (os != H)
            return hm_errorf(HM_ERR_INTERNAL, "cuda: experts' output stride %lld", (long long)os);
        /* a split layer of a layerwise batch adds the CPU's sum from pinned memory itself: a copy
         * would queue behind the next layer's expert copies for the host-to-device direction
         * (the GPU's own part of a layer took 2.5-4.7 ms against ~1 on the H100 machine) */
        const float *sum = c->h_out;
        if (!streamed) {
            CK(cudaMemcpyAsync(c->cpu_out, c->h_out, sizeof(float) * (size_t)n * (size_t)H,
                               cudaMemcpyHostToDevice, c->s),
               "CPU experts' sum to the GPU");
            sum = c->cpu_out;
        }
        CK(hm_cu_rmsnorm(out, sum, NULL, NULL, NULL, n, H, 0.0f, c->s), "add the CPU experts");
    }
    return HM_OK;
}

/* Latent attention of the normed stream (slot XN) into dst [n][n_heads * v_head] (model/mla.c's
 * steps): q (through its low-rank step), the latent and k_pe, the cache store, the absorbed
 * queries, attention over the latents, the heads' values. */
static hm_status run_mla(hm_cuda_ctx *c, const hm_node *nd, int n, float *dst) {
    const hm_hparams *hp = &c->m->hp;
    const struct mla_w *w = &c->mla[nd->il];
    const int64_t H = hp->hidden, ql = hp->q_lora_rank, kvd = c->cols[HM_SLOT_K];
    const int nh = (int)hp->n_heads, kvl = (int)hp->kv_lora_rank;
    float *xn = c->slot[nd->src0], *q = c->slot[HM_SLOT_Q], *kv = c->slot[HM_SLOT_K];
    hm_status st;
    if (ql) {
        if ((st = mm(c, &w->wq_a, xn, H, n, c->mla_qa, ql))) return st;
        CK(hm_cu_rmsnorm(c->mla_qa, NULL, w->q_a_norm, c->mla_qa, NULL, n, ql, hp->norm_eps, c->s),
           "q's low-rank norm");
        if ((st = mm(c, &w->wq_b, c->mla_qa, ql, n, q, c->cols[HM_SLOT_Q]))) return st;
    } else if ((st = mm(c, &w->wq, xn, H, n, q, c->cols[HM_SLOT_Q]))) {
        return st;
    }
    if ((st = mm(c, &w->wkv_a, xn, H, n, kv, kvd))) return st;
    const hm_cu_mla a = {q,
                         c->cols[HM_SLOT_Q],
                         kv,
                         kvd,
                         w->kv_a_norm,
                         c->d_cs,
                         c->mla_q,
                         c->mla_o,
                         dst,
                         c->cols[nd->dst],
                         w->k_b,
                         w->v_b,
                         (int)c->m->layers[nd->il].k_b_type,
                         (int)c->m->layers[nd->il].v_b_type,
                         nh,
                         (int)hp->qk_nope_head_dim,
                         (int)hp->qk_rope_head_dim,
                         kvl,
                         (int)hp->v_head_dim,
                         hp->norm_eps,
                         d_pos(c),
                         d_seq(c),
                         nd->il};
    CK(hm_cu_mla_store(&a, &c->kv, n, c->s), "latent cache store");
    CK(hm_cu_mla_absorb(&a, n, c->s), "absorbed queries");
    const bool split = n <= HM_CU_MATVEC_MAX && c->att_splits > 1;
    const hm_cu_attn at = {c->mla_q, (int64_t)nh * c->kv.head_dim,
                           c->mla_o, (int64_t)nh * kvl,
                           nh,       hm_mla_scale(hp),
                           d_pos(c), d_seq(c),
                           nd->il,   NULL,
                           0,        split ? att_cnt(c) : NULL};
    CK(hm_cu_attention(&at, &c->kv, n, split ? c->att_part : NULL, c->att_splits, c->s),
       "latent attention");
    CK(hm_cu_mla_values(&a, n, c->s), "heads' values");
    return HM_OK;
}

/* the positions layer il attends over: the last sliding_window on a sliding layer, else all */
static int window_of(const hm_hparams *hp, int il) {
    return hp->sliding_window && il < HM_MAX_LAYERS && hp->layer_sliding[il]
               ? (int)hp->sliding_window
               : 0;
}

/* Whether node i + m, a matmul of node i's input, joins nodes i .. i + m - 1 in one launch: its
 * output is neither that input nor another's output, so the order of the writes is free. */
static bool fusable(const hm_graph *g, int i, int m) {
    const hm_node *a = &g->nodes[i], *b = &g->nodes[i + m];
    if (b->op != HM_OP_MATMUL || b->src0 != a->src0 || b->dst == a->src0) return false;
    for (int j = 0; j < m; j++)
        if (g->nodes[i + j].dst == b->dst) return false;
    return true;
}

/* Whether node i (a matmul) and the softmax top-k of its logits that follows run as one kernel
 * (hm_cu_router_fused): decode batches, no bias, softmax without groups or a scale. */
static bool router_fusable(const hm_cuda_ctx *c, const hm_graph *g, int i, int n) {
    const hm_hparams *hp = &c->m->hp;
    const hm_node *nd = &g->nodes[i];
    if (c->no_rfuse || n > HM_CU_MATVEC_MAX || i + 1 >= g->n || c->nb[i]) return false;
    const hm_node *nx = &g->nodes[i + 1];
    return nx->op == HM_OP_ROUTER_TOPK && nx->src0 == nd->dst && nd->dst != nd->src0 &&
           hp->gating != HM_GATING_SIGMOID && hp->n_group <= 1 && hp->routed_scaling == 1.0f;
}

/* the ops named in a comma-separated list (HMOE_CUDA_SKIP) as a mask of 1 << op */
static unsigned skip_ops(const char *list) {
    unsigned m = 0;
    for (const char *p = list; p && *p;) {
        const size_t len = strcspn(p, ",");
        for (int op = 0; op < HM_OP_COUNT; op++)
            if (strlen(hm_op_name((hm_op)op)) == len && !strncmp(p, hm_op_name((hm_op)op), len))
                m |= 1u << op;
        p += len + (p[len] == ',');
    }
    if (m)
        hm_log(HM_LOG_WARN,
               "cuda: HMOE_CUDA_SKIP=%s: decode steps skip those nodes; their output is wrong",
               list);
    return m;
}

static hm_status run_graph(hm_cuda_ctx *c, const hm_graph *g, int n) {
    const hm_hparams *hp = &c->m->hp;
    const int64_t H = hp->hidden;
    const float eps = hp->norm_eps;
    /* the matvec batches' kernels launch ahead of their predecessors' ends; larger ones keep
     * the plain order, which measured faster for a prompt's large kernels */
    hm_cu_pdl_allow(n <= c->mv_max);
    c->sum_left = false;
    for (int i = 0; i < g->n; i++) {
        const hm_node *nd = &g->nodes[i];
        float *dst = c->slot[nd->dst], *s0 = c->slot[nd->src0], *s1 = c->slot[nd->src1];
        if ((c->skip_ops >> nd->op & 1u) && n <= c->mv_max) continue;
        prof_start(c);
        switch (nd->op) {
        case HM_OP_NORM:
            CK(hm_cu_rmsnorm(s0, NULL, c->nn1[i], dst, NULL, n, H, eps, c->s), "rmsnorm");
            break;
        case HM_OP_ADD_NORM:
            CK(hm_cu_rmsnorm(s0, s1, c->nn1[i], dst, NULL, n, H, eps, c->s), "add + rmsnorm");
            break;
        case HM_OP_ADD: {
            /* with the norm of the same stream that follows; the experts' sum where the MOE
             * node before left it (its dst is s0) */
            const hm_node *nx = i + 1 < g->n ? &g->nodes[i + 1] : NULL;
            const bool fuse = nx && nx->op == HM_OP_NORM && nx->src0 == nd->dst;
            if (c->sum_left) {
                c->sum_left = false;
                CK(hm_cu_rmsnorm_moe(dst, c->moe_y, H, c->w, c->k, fuse ? c->nn1[i + 1] : NULL,
                                     fuse ? c->slot[nx->dst] : NULL, n, H, eps, c->s),
                   "experts' sum, residual add");
            } else {
                CK(hm_cu_rmsnorm(dst, s0, fuse ? c->nn1[i + 1] : NULL,
                                 fuse ? c->slot[nx->dst] : NULL, NULL, n, H, eps, c->s),
                   "residual add");
            }
            i += fuse;
            break;
        }
        case HM_OP_MATMUL: {
            /* a decode batch's router and its softmax top-k in one launch, where it takes them */
            if (router_fusable(c, g, i, n)) {
                const cudaError_t e = hm_cu_router_fused(
                    &c->nw[i], s0, c->cols[nd->src0], n, c->k, hp->norm_topk_prob, dst,
                    c->cols[nd->dst], c->ids, c->w, c->d_cnt + HM_CNT_ROUTER, c->s);
                if (e != cudaErrorInvalidValue) {
                    CK(e, "router and top-k");
                    i++;
                    break;
                }
                cudaGetLastError(); /* the shape is not the kernel's: the two below */
            }
            /* a decode batch's matmuls of the same input that follow (q, k, v) in one launch */
            int nm = 1;
            while (!c->no_fuse && n <= c->mv_max && nm < HM_CU_MULTI_MAX && i + nm < g->n &&
                   nd->dst != nd->src0 && fusable(g, i, nm))
                nm++;
            if (nm > 1) {
                float *ys[HM_CU_MULTI_MAX];
                int64_t yst[HM_CU_MULTI_MAX];
                for (int j = 0; j < nm; j++)
                    ys[j] = c->slot[g->nodes[i + j].dst], yst[j] = c->cols[g->nodes[i + j].dst];
                CK(hm_cu_matvec_multi(&c->nw[i], nm, s0, c->cols[nd->src0], n, ys, yst, c->s),
                   "matvecs");
            } else {
                hm_status st = mm(c, &c->nw[i], s0, c->cols[nd->src0], n, dst, c->cols[nd->dst]);
                if (st) return st;
            }
            for (int j = 0; j < nm; j++) {
                const hm_node *mj = &g->nodes[i + j];
                CK(hm_cu_add_bias(c->slot[mj->dst], c->cols[mj->dst], c->nb[i + j], n, mj->w->rows,
                                  c->s),
                   "bias");
            }
            i += nm - 1;
            break;
        }
        case HM_OP_QK_ROPE_KV: {
            const hm_cu_qkv a = {s0,
                                 s1,
                                 dst,
                                 c->cols[HM_SLOT_Q],
                                 c->cols[HM_SLOT_K],
                                 c->nn1[i],
                                 c->nn2[i],
                                 c->d_cs,
                                 (int)hp->rope_dim,
                                 hp->rope_interleaved,
                                 (int)hp->n_heads,
                                 eps,
                                 d_pos(c),
                                 d_seq(c),
                                 nd->il};
            CK(hm_cu_qk_rope_kv(&a, &c->kv, n, c->s), "q/k norm, rope, cache store");
            break;
        }
        case HM_OP_ATTN: {
            const hm_cu_attn a = {s0,
                                  c->cols[HM_SLOT_Q],
                                  dst,
                                  c->cols[nd->dst],
                                  (int)hp->n_heads,
                                  1.0f / sqrtf((float)hp->head_dim),
                                  d_pos(c),
                                  d_seq(c),
                                  nd->il,
                                  c->nn1[i],
                                  window_of(hp, nd->il),
                                  att_cnt(c)};
            /* a prompt's chunk on the tensor cores where the kernel takes the shape; decode
             * batches: the positions split over blocks, merged after */
            const cudaError_t fe =
                c->fa_seq >= 0 ? hm_cu_attention_tc(&a, &c->kv, n, c->fa_seq, c->fa_pos0, c->s)
                               : cudaErrorInvalidValue;
            if (fe == cudaErrorInvalidValue) {
                cudaGetLastError(); /* the shape is not the kernel's: the general one */
                const bool split = n <= HM_CU_MATVEC_MAX && c->att_splits > 1;
                CK(hm_cu_attention(&a, &c->kv, n, split ? c->att_part : NULL, c->att_splits, c->s),
                   "attention");
            } else {
                CK(fe, "attention on the tensor cores");
            }
            break;
        }
        case HM_OP_ROUTER_TOPK:
            if (hp->gating == HM_GATING_SIGMOID)
                CK(hm_cu_router_sigmoid(s0, c->cols[nd->src0], n, (int)hp->n_experts, c->nn1[i],
                                        hp->n_group ? (int)hp->n_group : 1,
                                        hp->topk_group ? (int)hp->topk_group : 1, c->k,
                                        hp->norm_topk_prob, hp->routed_scaling, c->ids, c->w, c->s),
                   "router (sigmoid)");
            else if (hp->n_group > 1)
                CK(hm_cu_router_softmax_group(s0, c->cols[nd->src0], n, (int)hp->n_experts,
                                              (int)hp->n_group, (int)hp->topk_group, c->k,
                                              hp->norm_topk_prob, hp->routed_scaling, c->ids, c->w,
                                              c->s),
                   "router (group-limited softmax)");
            else {
                CK(hm_cu_router_topk(s0, c->cols[nd->src0], n, (int)hp->n_experts, c->k,
                                     hp->norm_topk_prob, c->ids, c->w, c->s),
                   "router top-k");
                if (hp->routed_scaling != 1.0f) /* DeepSeek-V2(-Lite) */
                    CK(hm_cuda_launch_axpb(c->w, c->w, hp->routed_scaling, 0.0f, n * c->k, c->s),
                       "router's scale");
            }
            break;
        case HM_OP_GLU:
            /* the layer's width: the dense MLP's or the shared expert's (the gate's rows) */
            CK(hm_cu_glu(dst, c->cols[nd->dst], s0, c->cols[nd->src0], n,
                         nd->w ? nd->w->rows : c->cols[nd->dst], (int)hp->act, hp->swiglu_alpha,
                         hp->swiglu_limit, c->s),
               "glu");
            break;
        case HM_OP_MOE: {
            /* a decode batch's sum may go to the residual add that follows */
            const hm_node *nx = i + 1 < g->n ? &g->nodes[i + 1] : NULL;
            const bool sum_next = !c->no_fuse && !c->no_sum_next && n <= HM_CU_MATVEC_MAX && nx &&
                                  nx->op == HM_OP_ADD && nx->src0 == nd->dst &&
                                  c->cols[nd->dst] == H && !(c->skip_ops >> HM_OP_ADD & 1u);
            hm_status st =
                run_moe(c, nd, n, s0, c->cols[nd->src0], dst, c->cols[nd->dst], sum_next);
            if (st) return st;
            break;
        }
        case HM_OP_GATED_ADD:
            CK(hm_cu_gated_add(dst, c->cols[nd->dst], s0, c->cols[nd->src0], s1, c->cols[nd->src1],
                               c->nn1[i], n, H, c->s),
               "shared expert's gate");
            break;
        case HM_OP_MLA: {
            hm_status st = run_mla(c, nd, n, dst);
            if (st) return st;
            break;
        }
        case HM_OP_COUNT:
            return hm_errorf(HM_ERR_INTERNAL, "cuda: graph node %d: op %s", i, hm_op_name(nd->op));
        }
        prof_stop(c, nd->prof);
    }
    return HM_OK;
}

static bool cu_supports(void *self, const hm_node *nd) {
    (void)self;
    if (nd->op < 0 || nd->op >= HM_OP_COUNT) return false;
    return nd->op != HM_OP_MATMUL || (nd->w && cu_w_ok(nd->w->type, nd->w->cols));
}

static hm_status cu_compute(void *self, const hm_graph *g, int n) {
    hm_cuda_ctx *c = self;
    if (g != c->g)
        return hm_errorf(HM_ERR_INVALID_ARG, "cuda: the backend runs the graph it was made for");
    return run_graph(c, g, n);
}

static const hm_backend_i cuda_backend_i = {"cuda", cu_supports, cu_compute};

hm_backend hm_cuda_ctx_backend(hm_cuda_ctx *c) {
    return (hm_backend){&cuda_backend_i, c};
}

void hm_cuda_ctx_free(hm_cuda_ctx *c) {
    if (!c) return;
    if (c->s) cudaStreamSynchronize(c->s);
    if (c->cs) cudaStreamSynchronize(c->cs);
    for (int i = 0; i <= HM_CU_MATVEC_BATCH; i++)
        for (int j = 0; j <= HM_CU_MATVEC_BATCH; j++)
            if (c->step[i][j]) cudaGraphExecDestroy(c->step[i][j]);
    if (c->blas) cublasDestroy(c->blas);
    if (c->pev[0]) cudaEventDestroy(c->pev[0]);
    if (c->pev[1]) cudaEventDestroy(c->pev[1]);
    if (c->done) cudaEventDestroy(c->done);
    if (c->s) cudaStreamDestroy(c->s);
    if (c->arena) cudaFree(c->arena);
    if (c->h_in) cudaFreeHost(c->h_in);
    if (c->h_hyb) cudaFreeHost(c->h_hyb);
    if (c->h_defb) cudaFreeHost(c->h_defb);
    if (c->h_top) cudaFreeHost(c->h_top);
    if (c->stage_q) cudaFree(c->stage_q);
    if (c->stage_f) cudaFree(c->stage_f);
    for (int b = 0; b < 2; b++) {
        if (c->lw_ready[b]) cudaEventDestroy(c->lw_ready[b]);
        if (c->lw_free[b]) cudaEventDestroy(c->lw_free[b]);
    }
    for (int j = 0; c->lw_tev && j < 2 * c->n_lw; j++)
        if (c->lw_tev[j]) cudaEventDestroy(c->lw_tev[j]);
    free(c->lw_tev);
    if (c->cs) cudaStreamDestroy(c->cs);
    if (c->sw_done) cudaEventDestroy(c->sw_done);
    if (c->h_tab) cudaFreeHost(c->h_tab);
    if (c->h_sslot) cudaFreeHost(c->h_sslot);
    for (int i = 0; i < c->n_reg; i++) cudaHostUnregister(c->reg[i]);
    free(c->reg);
    free(c->cslot);
    free(c->s_ids);
    free(c->lw_nc);
    free(c->lw_ns);
    free(c->spare);
    free(c->mask);
    free(c->dyn_cnt);
    free(c->h_counts);
    free(c->lw_w);
    free(c->lw_order);
    free(c->lw_idx);
    free(c->remap);
    free(c->cb);
    free(c->nw);
    free(c->nn1);
    free(c->nn2);
    free(c->nb);
    free(c->ex);
    free(c->exb);
    free(c->mla);
    free(c);
}

static double gib(size_t b) {
    return (double)b / (double)(1u << 30);
}

/* The page-aligned ranges of host memory the CPU experts' copies read, merged and registered
 * with CUDA read-only; where that fails (no support, a limit on locked memory) the copies stay
 * staged, and the log says so. Registering locks the pages in memory: not where they would take
 * more than half of it (the CPU engine may hold repacked copies of the same experts). */
typedef struct hrange {
    uintptr_t lo, hi;
} hrange;

static int hrange_order(const void *a, const void *b) {
    const hrange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void register_experts(hm_cuda_ctx *c) {
    const char *ev = getenv("HMOE_CUDA_REGISTER");
    if (ev && !strcmp(ev, "0")) return;
    const hm_hparams *hp = &c->m->hp;
    const int L = (int)hp->n_layers, E = (int)hp->n_experts;
    hrange *r = malloc(sizeof *r * ((size_t)L * 3 + 1));
    c->reg = calloc((size_t)L * 3 + 1, sizeof *c->reg);
    if (!r || !c->reg) {
        free(r);
        return;
    }
    const uintptr_t pg = 4096;
    int n = 0;
    for (int il = 0; il < L; il++) {
        if (!c->cpu_moe[il]) continue;
        const hm_layer *lay = &c->m->layers[il];
        for (int p = 0; p < 3; p++) {
            const hm_cu_w *w = &c->lw_w[il * 3 + p];
            uintptr_t lo = UINTPTR_MAX, hi = 0;
            for (int e = 0; e < E; e++) {
                if (c->cslot[(size_t)il * (size_t)E + (size_t)e] < 0) continue;
                const hm_moe_matrix *m = proj(&lay->experts[e], p);
                const size_t srb = m->row_bytes ? m->row_bytes : w->row_bytes;
                const uintptr_t a = (uintptr_t)m->data, b = a + srb * (size_t)w->rows;
                lo = a < lo ? a : lo, hi = b > hi ? b : hi;
            }
            if (lo < hi) r[n++] = (hrange){lo / pg * pg, (hi + pg - 1) / pg * pg};
        }
    }
    qsort(r, (size_t)n, sizeof *r, hrange_order);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi) {
            if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
        } else {
            r[m++] = r[i];
        }
    }
    size_t want = 0;
    for (int i = 0; i < m; i++) want += r[i].hi - r[i].lo;
    hm_mem_info mi;
    if (hm_mem_info_get(&mi) == HM_OK && mi.total && want > mi.total / 2) {
        hm_log(HM_LOG_INFO,
               "cuda: the CPU experts (%.1f GiB) are more than half of the memory (%.1f GiB): "
               "not registered, their copies to the GPU are staged",
               gib(want), gib((size_t)mi.total));
        m = 0;
    }
    const uint64_t t0 = hm_time_ns();
    for (int i = 0; i < m; i++) {
        void *a = (void *)r[i].lo;
        const size_t bytes = r[i].hi - r[i].lo;
        cudaError_t e = cudaHostRegister(a, bytes, cudaHostRegisterReadOnly);
        if (e != cudaSuccess) {
            cudaGetLastError();
            e = cudaHostRegister(a, bytes, cudaHostRegisterDefault);
        }
        if (e != cudaSuccess) {
            cudaGetLastError();
            hm_log(HM_LOG_INFO,
                   "cuda: the CPU experts' memory cannot be registered (%s): their copies to "
                   "the GPU are staged",
                   cudaGetErrorString(e));
            break;
        }
        c->reg[c->n_reg++] = a;
        c->reg_bytes += bytes;
    }
    if (c->n_reg)
        hm_log(HM_LOG_INFO, "cuda: %.2f GiB of CPU experts registered for copies in %.2f s",
               gib(c->reg_bytes), (double)(hm_time_ns() - t0) * 1e-9);
    free(r);
}

/* Layerwise prefill when the context is made: the layers it streams, its stream and events,
 * the copy of the first such layer's CPU experts (timed here, best of two) and the CPU engine's
 * rate through them (timed on a batch of up to 512 tokens, best of three), which set each
 * batch's split (lw_plan), and the threshold: the one given, or the batch from which the split
 * streams a fifth of the CPU experts, not below 256 tokens (or the context's batch): a smaller
 * batch gives each expert fewer tokens and the CPU's time per token grows. */
static hm_status lw_setup(hm_cuda_ctx *c) {
    const hm_hparams *hp = &c->m->hp;
    c->stream_min = 0, c->n_lw = 0;
    if (!c->lw_buf[0]) return HM_OK; /* off, not possible, or nothing on the CPU */
    for (int il = 0; il < (int)hp->n_layers; il++) {
        c->lw_idx[il] = -1;
        if (c->cpu_moe[il]) c->lw_idx[il] = c->n_lw, c->lw_order[c->n_lw++] = il;
    }
    if (!c->n_lw) return HM_OK;
    register_experts(c);
    for (int b = 0; b < 2; b++) {
        CK(cudaEventCreateWithFlags(&c->lw_ready[b], cudaEventDisableTiming), "cudaEventCreate");
        CK(cudaEventCreateWithFlags(&c->lw_free[b], cudaEventDisableTiming), "cudaEventCreate");
    }
    c->lw_tev = calloc(2 * (size_t)c->n_lw, sizeof *c->lw_tev);
    if (!c->lw_tev) return hm_errorf(HM_ERR_NO_MEMORY, "cuda: out of memory (layerwise prefill)");
    for (int j = 0; j < 2 * c->n_lw; j++) CK(cudaEventCreate(&c->lw_tev[j]), "cudaEventCreate");
    double copy_s = INFINITY, cpu_s = INFINITY;
    for (int r = 0; r < 2; r++) {
        const uint64_t t0 = hm_time_ns();
        hm_status st = lw_copy(c, 0);
        if (st) return st;
        CK(cudaStreamSynchronize(c->cs), "layerwise prefill: copy");
        const double t = (double)(hm_time_ns() - t0) * 1e-9;
        if (t < copy_s) copy_s = t;
    }
    const size_t bytes = (size_t)(c->lw_bytes / 2);
    const int il = c->lw_order[0], E = (int)hp->n_experts, K = c->k;
    const int nt = c->n_batch < 512 ? c->n_batch : 512;
    const uint8_t *mask = c->gpu_mask ? c->gpu_mask + (size_t)il * (size_t)E : NULL;
    int cpu[4096], nc = 0;
    for (int e = 0; e < E && e < 4096; e++)
        if (!mask || !mask[e]) cpu[nc++] = e;
    for (size_t i = 0; i < (size_t)nt * hp->hidden; i++) /* values in [-0.5, 0.5), not zeros */
        c->h_x[i] = (float)((uint32_t)(i * 2654435761u) >> 16) / 65536.0f - 0.5f;
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < K; j++) {
            c->h_ids[t * K + j] = j < nc ? cpu[(t * K + j) % nc] : -1;
            c->h_w[t * K + j] = 1.0f / (float)K;
        }
    for (int r = 0; r < 3; r++) {
        const uint64_t t0 = hm_time_ns();
        const hm_status st = hm_moe_submit(c->cpu_moe[il], c->h_x, HM_MOE_F32, c->h_ids, c->h_w, nt,
                                           K, c->h_out, HM_MOE_F32, false);
        if (st) return st;
        hm_moe_wait(c->cpu_moe[il]);
        const double t = (double)(hm_time_ns() - t0) * 1e-9;
        if (t < cpu_s) cpu_s = t;
    }
    c->lw_bytes = 0;
    c->lw_copy_s = copy_s, c->lw_rate = (double)nt / cpu_s;
    const int floor = HM_CU_MATVEC_MAX + 1, fl = c->n_batch < 256 ? c->n_batch : 256;
    if (c->prefill_stream > 0)
        c->stream_min = c->prefill_stream > floor ? c->prefill_stream : floor;
    else
        c->stream_min = hm_place_stream_threshold(copy_s / 4, c->lw_rate, fl > floor ? fl : floor);
    char from[48];
    snprintf(from, sizeof from, c->stream_min == INT_MAX ? "never" : "from %d tokens%s",
             c->stream_min, c->prefill_stream > 0 ? " (given)" : "");
    const int n512 = c->n_batch < 512 ? c->n_batch : 512;
    hm_log(HM_LOG_INFO,
           "cuda: layerwise prefill %s: a layer's CPU experts (%.0f MB) copy to the GPU in %.1f "
           "ms (%.1f GB/s), the CPU computes %d tokens of them in %.1f ms; a batch of %d streams "
           "%.0f%% of them (--gpu-prefill-threshold overrides)",
           from, (double)bytes * 1e-6, copy_s * 1e3, (double)bytes / copy_s * 1e-9, nt, cpu_s * 1e3,
           n512, 100 * hm_place_stream_split(copy_s, c->lw_rate, 0, n512));
    if (c->stream_min == INT_MAX) c->stream_min = 0;
    return HM_OK;
}

/* A context with the checks every use makes (the GPU exists, the graph's nodes have kernels)
 * and its host-side arrays, nothing on the GPU yet: create fills it, measure sizes it. */
static hm_status ctx_new(const hm_model *m, const hm_graph *g, const hm_cuda_ctx_params *p,
                         hm_cuda_ctx **out) {
    *out = NULL;
    const hm_hparams *hp = &m->hp;
    int ndev = 0;
    hm_status st = hm_cuda_device_count(&ndev);
    if (st) return st;
    if (ndev == 0)
        return hm_errorf(HM_ERR_UNSUPPORTED, "--device cuda: no usable GPU on this machine%s",
                         hm_cuda_compiled() ? "" : " (built without CUDA)");
    if (p->device < 0 || p->device >= ndev)
        return hm_errorf(HM_ERR_NOT_FOUND, "cuda: GPU %d does not exist (%d present)", p->device,
                         ndev);
    if (hp->head_dim > 512 || hp->n_kv_heads < 1 || hp->n_heads % hp->n_kv_heads)
        return hm_errorf(HM_ERR_UNSUPPORTED, "cuda: attention takes head_dim <= 512 (model: %u)",
                         hp->head_dim);
    if (hp->act != HM_ACT_SILU && hp->act != HM_ACT_GELU && hp->act != HM_ACT_SWIGLU_OAI)
        return hm_errorf(HM_ERR_UNSUPPORTED, "cuda: activation %d has no GPU kernel", (int)hp->act);
    if (hp->kv_lora_rank &&
        (hp->kv_lora_rank + hp->qk_rope_head_dim > 640 || hp->qk_rope_head_dim % 2 ||
         hp->kv_lora_rank > 4096 || hp->qk_nope_head_dim > 1024))
        return hm_errorf(HM_ERR_UNSUPPORTED,
                         "cuda: latent attention of kv_lora %u + rope %u (nope %u) has no GPU "
                         "kernel (kv_lora + rope up to 640)",
                         hp->kv_lora_rank, hp->qk_rope_head_dim, hp->qk_nope_head_dim);
    for (int i = 0; i < g->n; i++)
        if (!cu_supports(NULL, &g->nodes[i]))
            return hm_errorf(HM_ERR_UNSUPPORTED,
                             "cuda: layer %d %s: weights of type %s (%lld columns) have no GPU "
                             "kernel (run --device cpu)",
                             g->nodes[i].il, hm_op_name(g->nodes[i].op),
                             g->nodes[i].w ? hm_type_name(g->nodes[i].w->type) : "?",
                             g->nodes[i].w ? (long long)g->nodes[i].w->cols : 0LL);
    hm_cuda_ctx *c = calloc(1, sizeof *c);
    if (!c) return hm_errorf(HM_ERR_NO_MEMORY, "cuda: out of memory");
    c->m = m, c->g = g, c->dev = p->device;
    c->n_batch = p->n_batch, c->n_ctx = p->n_ctx;
    c->bf16 = p->bf16;
    c->defer = p->cpu_moe ? p->defer : 0;
    c->def_pend = -1;
    c->k = hp->n_experts_used ? (int)hp->n_experts_used : 1;
    c->gpu_mask = p->gpu_experts;
    c->cpu_moe = p->cpu_moe;
    c->kv = (hm_cu_kv){
        NULL, NULL, p->kv_f16, p->n_ctx, p->n_seq, (int)hp->n_kv_heads, (int)hp->head_dim, 0};
    if (hp->kv_lora_rank) /* MLA: one row [latent, k_pe] per position, the values its latent */
        c->kv.n_kv_heads = 1, c->kv.head_dim = (int)(hp->kv_lora_rank + hp->qk_rope_head_dim),
        c->kv.v_dim = (int)hp->kv_lora_rank;
    c->nw = calloc((size_t)g->n + 1, sizeof *c->nw);
    c->nn1 = calloc((size_t)g->n + 1, sizeof *c->nn1);
    c->nn2 = calloc((size_t)g->n + 1, sizeof *c->nn2);
    c->nb = calloc((size_t)g->n + 1, sizeof *c->nb);
    c->ex = calloc((size_t)hp->n_layers * 3 + 1, sizeof *c->ex);
    c->exb = calloc((size_t)hp->n_layers * 3 + 1, sizeof *c->exb);
    c->mla = calloc((size_t)hp->n_layers + 1, sizeof *c->mla);
    c->remap = calloc((size_t)hp->n_layers + 1, sizeof *c->remap);
    c->cb = calloc((size_t)hp->n_layers + 1, sizeof *c->cb);
    c->lw_w = calloc((size_t)hp->n_layers * 3 + 1, sizeof *c->lw_w);
    c->lw_order = calloc((size_t)hp->n_layers + 1, sizeof *c->lw_order);
    c->lw_idx = calloc((size_t)hp->n_layers + 1, sizeof *c->lw_idx);
    c->prefill_stream = p->prefill_stream;
    if (p->cpu_moe) {
        const size_t ne = (size_t)hp->n_layers * (hp->n_experts ? hp->n_experts : 1);
        c->cslot = malloc(sizeof(int32_t) * ne);
        if (c->cslot) memset(c->cslot, 0xff, sizeof(int32_t) * ne); /* -1: none on the CPU */
        c->lw_nc = calloc((size_t)hp->n_layers + 1, sizeof *c->lw_nc);
        c->lw_ns = calloc((size_t)hp->n_layers + 1, sizeof *c->lw_ns);
        c->s_ids = malloc(sizeof(int32_t) * (size_t)c->n_batch * (size_t)c->k);
        const char *ef = getenv("HMOE_LW_SPLIT");
        c->lw_force = ef && atof(ef) > 0 && atof(ef) <= 1 ? atof(ef) : 0;
    }
    c->spare = calloc((size_t)hp->n_layers + 1, sizeof *c->spare);
    c->sw_il = -1;
    /* --dynamic-experts: where some experts are on the CPU, and none has biases (their GPU
     * copies are per slot) */
    bool biased = false;
    for (uint32_t il = 0; il < hp->n_layers && hp->n_experts; il++) {
        const hm_layer *L = &m->layers[il];
        biased |= L->experts &&
                  (L->experts[0].gate_bias || L->experts[0].up_bias || L->experts[0].down_bias);
    }
    bool mixed = false; /* a layer with experts on both sides */
    for (uint32_t il = 0; p->gpu_experts && il < hp->n_layers; il++) {
        uint32_t ng = 0;
        for (uint32_t e = 0; e < hp->n_experts; e++)
            ng += p->gpu_experts[(size_t)il * hp->n_experts + e] != 0;
        mixed |= ng > 0 && ng < hp->n_experts;
    }
    c->dynamic = p->dynamic && p->cpu_moe && mixed && !biased;
    if (p->dynamic && p->cpu_moe && !c->dynamic)
        hm_log(HM_LOG_INFO, "--dynamic-experts: off, %s",
               biased ? "the routed experts have biases"
                      : "no layer has routed experts both on the GPU and on the CPU");
    if (c->dynamic) {
        const size_t ne = (size_t)hp->n_layers * hp->n_experts;
        c->mask = malloc(ne);
        c->dyn_cnt = calloc(ne, sizeof *c->dyn_cnt);
        c->h_counts = calloc(ne, sizeof *c->h_counts);
        if (c->mask) memcpy(c->mask, p->gpu_experts, ne), c->gpu_mask = c->mask;
        const char *ev = getenv("HMOE_DYN_EVERY");
        c->dyn_every = ev && atoi(ev) > 0 ? atoi(ev) : 16;
    }
    if (!c->nw || !c->nn1 || !c->nn2 || !c->nb || !c->ex || !c->exb || !c->mla || !c->remap ||
        !c->cb || !c->lw_w || !c->lw_order || !c->lw_idx || !c->spare ||
        (c->cpu_moe && (!c->cslot || !c->lw_nc || !c->lw_ns || !c->s_ids)) ||
        (c->dynamic && (!c->mask || !c->dyn_cnt || !c->h_counts))) {
        hm_cuda_ctx_free(c);
        return hm_errorf(HM_ERR_NO_MEMORY, "cuda: out of memory");
    }
    *out = c;
    return HM_OK;
}

hm_status hm_cuda_ctx_create(const hm_model *m, const hm_graph *g, const hm_cuda_ctx_params *p,
                             hm_cuda_ctx **out) {
    *out = NULL;
    const hm_hparams *hp = &m->hp;
    hm_cuda_ctx *c = NULL;
    hm_status st = ctx_new(m, g, p, &c);
    if (st) return st;
    const char *eg = getenv("HMOE_CUDA_GRAPHS");
    c->no_graphs = eg && !strcmp(eg, "0");
    const char *ep = getenv("HMOE_CUDA_PROFILE");
    c->prof = ep && !strcmp(ep, "1");
    const char *em = getenv("HMOE_CUDA_MMQ");
    c->no_mmq = em && !strcmp(em, "0");
    const char *eh = getenv("HMOE_CUDA_HGEMM"), *ehm = getenv("HMOE_CUDA_HGEMM_MIN");
    c->hgemm_min = eh && !strcmp(eh, "0")                ? INT_MAX
                   : ehm && atoi(ehm) > HM_CU_MATVEC_MAX ? atoi(ehm)
                                                         : 64;
    const char *emv = getenv("HMOE_CUDA_MV_MAX");
    c->mv_max = emv && *emv ? atoi(emv) : 63;
    if (c->mv_max < HM_CU_MATVEC_MAX) c->mv_max = HM_CU_MATVEC_MAX;
    if (c->mv_max > HM_CU_MATVEC_BATCH) c->mv_max = HM_CU_MATVEC_BATCH;
    const char *eb = getenv("HMOE_CUDA_BELLS");
    c->no_bells = eb && !strcmp(eb, "0");
    const char *eu = getenv("HMOE_CUDA_FUSE");
    c->no_fuse = eu && !strcmp(eu, "0");
    const char *er = getenv("HMOE_CUDA_FUSE_ROUTER");
    c->skip_ops = skip_ops(getenv("HMOE_CUDA_SKIP"));
    const char *esn = getenv("HMOE_CUDA_SUM_NEXT");
    c->no_sum_next = esn && !strcmp(esn, "0");
    c->no_rfuse = c->no_fuse || (er && !strcmp(er, "0"));
    const char *ef = getenv("HMOE_CUDA_FA"), *efm = getenv("HMOE_CUDA_FA_MIN");
    c->fa = !(ef && !strcmp(ef, "0"));
    c->fa_min = efm && atoi(efm) > HM_CU_MATVEC_MAX ? atoi(efm) : 128;
#define FAIL(call, what)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            st = hm_errorf(HM_ERR_DEVICE, "cuda: %s: %s (%s)", what, cudaGetErrorString(e_),       \
                           cudaGetErrorName(e_));                                                  \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)
    FAIL(cudaSetDevice(c->dev), "cudaSetDevice");
    if ((st = layout(c))) goto fail; /* sizing pass */
    size_t free_b = 0, total_b = 0;
    FAIL(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    const size_t need = c->used, margin = HM_CUDA_MARGIN;
    if (need + margin > free_b) {
        st = hm_errorf(HM_ERR_NO_MEMORY,
                       "--device cuda: the model needs %.2f GiB on GPU %d (weights %.2f GiB, KV "
                       "cache %.2f GiB for %d x %d positions, scratch %.2f GiB) and %.2f GiB of "
                       "its %.2f GiB are free: run --device cpu, or lower --ctx / --batch (the "
                       "hybrid placement, routed experts on the CPU, is the way to run models "
                       "larger than the GPU)",
                       gib(need + margin), c->dev, gib(c->weight_bytes), gib(c->kv_bytes), p->n_seq,
                       p->n_ctx, gib(need - c->weight_bytes - c->kv_bytes + margin), gib(free_b),
                       gib(total_b));
        goto fail;
    }
    FAIL(cudaMalloc((void **)&c->arena, need), "cudaMalloc (weights, KV cache, scratch)");
    FAIL(cudaStreamCreateWithFlags(&c->s, cudaStreamNonBlocking), "cudaStreamCreate");
    FAIL(cudaEventCreateWithFlags(&c->done, cudaEventBlockingSync | cudaEventDisableTiming),
         "cudaEventCreate");
    if (c->prof) {
        FAIL(cudaEventCreate(&c->pev[0]), "cudaEventCreate");
        FAIL(cudaEventCreate(&c->pev[1]), "cudaEventCreate");
    }
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(c->blas, c->s) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS) {
        st = hm_errorf(HM_ERR_DEVICE, "cublas: cannot create a handle on GPU %d", c->dev);
        goto fail;
    }
    const size_t in_bytes = sizeof(int32_t) * 4 * (size_t)c->n_batch +
                            sizeof(float) * (size_t)c->n_batch * (hp->rope_dim ? hp->rope_dim : 1);
    FAIL(cudaMallocHost(&c->h_in, in_bytes), "cudaMallocHost (batch staging)");
    FAIL(cudaMallocHost(&c->h_top,
                        (sizeof(int32_t) + sizeof(float)) * (size_t)c->n_batch * HM_CU_TOP_MAX +
                            sizeof(int32_t) * (size_t)c->n_batch),
         "cudaMallocHost (candidates)");
    if (c->cpu_moe) {
        const size_t B = (size_t)c->n_batch, H = hp->hidden, K = (size_t)c->k;
        FAIL(cudaMallocHost(&c->h_hyb, sizeof(float) * (2 * B * H + 2 * B * K) + 256),
             "cudaMallocHost (the CPU experts' buffers)");
        c->h_x = c->h_hyb;
        c->h_out = c->h_x + B * H;
        c->h_w = c->h_out + B * H;
        c->h_ids = (int32_t *)(c->h_w + B * K);
        for (uint32_t il = 0; il < hp->n_layers; il++)
            c->cb[il] = (hyb_cb){c, (int)il, false, false, 0, 0};
        const size_t nb = (2 * (size_t)hp->n_layers + 2) * BELL_STRIDE;
        FAIL(cudaMallocHost((void **)&c->h_bell, sizeof(uint32_t) * nb),
             "cudaMallocHost (doorbells)");
        memset(c->h_bell, 0, sizeof(uint32_t) * nb);
        c->h_epoch = c->h_bell + 2 * (size_t)hp->n_layers * BELL_STRIDE;
        c->h_bell_err = c->h_epoch + BELL_STRIDE;
        FAIL(cudaMallocHost((void **)&c->h_sslot,
                            sizeof(int32_t) * (size_t)hp->n_layers * (size_t)hp->n_experts),
             "cudaMallocHost (streamed expert slots)");
        if (c->defer) {
            FAIL(cudaMallocHost(&c->h_defb,
                                sizeof(int32_t) * 2 * B * K + sizeof(float) * (2 * B * H + B * K)),
                 "cudaMallocHost (deferral)");
            c->d_now = c->h_defb;
            c->d_later = c->d_now + B * K;
            c->h_def = (float *)(c->d_later + B * K);
            c->d_x = c->h_def + B * H;
            c->d_w = c->d_x + B * H;
        }
    }
    if (c->dynamic) {
        FAIL(cudaMallocHost((void **)&c->h_tab,
                            sizeof(int32_t) * (size_t)hp->n_layers * (size_t)hp->n_experts),
             "cudaMallocHost (slot tables)");
        FAIL(cudaEventCreateWithFlags(&c->sw_done, cudaEventDisableTiming), "cudaEventCreate");
    }
    if ((st = layout(c))) goto fail; /* the copies */
    if ((c->dynamic || c->lw_buf[0]) && !c->cs)
        FAIL(cudaStreamCreateWithFlags(&c->cs, cudaStreamNonBlocking), "cudaStreamCreate (copies)");
    const size_t kv_one = (size_t)hp->n_layers * (size_t)c->kv.n_seq * (size_t)c->kv.n_kv_heads *
                          (size_t)c->kv.kv_ctx * (size_t)c->kv.head_dim * (c->kv.f16 ? 2 : 4);
    FAIL(cudaMemsetAsync(c->kv.k, 0, kv_one, c->s), "KV cache clear");
    FAIL(cudaMemsetAsync(c->d_cnt, 0, sizeof(unsigned) * HM_CNT_COUNT, c->s), "counters clear");
    FAIL(cudaMemsetAsync(c->kv.v, 0, kv_one, c->s), "KV cache clear");
    if (c->d_counts)
        FAIL(cudaMemsetAsync(c->d_counts, 0,
                             sizeof(uint32_t) * (size_t)hp->n_layers * (size_t)hp->n_experts, c->s),
             "expert counts clear");
    FAIL(cudaStreamSynchronize(c->s), "upload");
    if ((st = lw_setup(c))) goto fail;
    hm_log(HM_LOG_INFO, "cuda: GPU %d holds %.2f GiB (weights %.2f GiB, KV cache %.2f GiB)", c->dev,
           gib(need), gib(c->weight_bytes), gib(c->kv_bytes));
    *out = c;
    return HM_OK;
fail:
    hm_cuda_ctx_free(c);
    return st;
#undef FAIL
}

/* The step on the stream: embedding, the graph, and for the nw wanted rows the final norm and
 * the output head; with `logits` (host) each chunk of rows is copied there, without it the first
 * chunk stays in c->logits (nw <= LOGIT_ROWS). */
static hm_status forward(hm_cuda_ctx *c, int n, int nw, float *logits) {
    const hm_hparams *hp = &c->m->hp;
    hm_status st;
    if (c->lw_on && (st = lw_copy(c, 0))) return st; /* layerwise prefill's first layer */
    prof_start(c);
    CK(hm_cu_embed(&c->tok_embd, d_tok(c), n, c->slot[HM_SLOT_X], c->s), "embedding");
    prof_stop(c, HM_PROF_EMBED);
    const hm_backend be = hm_cuda_ctx_backend(c);
    st = be.i->compute(be.self, c->g, n);
    if (st) return st;
    const int64_t V = hp->vocab_size, H = hp->hidden;
    for (int r0 = 0; r0 < nw; r0 += LOGIT_ROWS) {
        const int cnt = nw - r0 < LOGIT_ROWS ? nw - r0 : LOGIT_ROWS;
        prof_start(c);
        CK(hm_cu_rmsnorm(c->slot[HM_SLOT_X], NULL, c->out_norm, c->slot[HM_SLOT_XN], d_rows(c) + r0,
                         cnt, H, hp->norm_eps, c->s),
           "final norm");
        if ((st = mm(c, &c->output, c->slot[HM_SLOT_XN], H, cnt, c->logits, V))) return st;
        if (c->top_k)
            CK(hm_cu_top_candidates(c->logits, V, cnt, (int)V, c->top_k,
                                    c->d_top_ids + (size_t)r0 * c->top_k,
                                    c->d_top_vals + (size_t)r0 * c->top_k, c->d_top_bad + r0,
                                    c->d_top_scratch, c->s),
               "sampling candidates");
        prof_stop(c, HM_PROF_OUTPUT);
        if (logits)
            CK(cudaMemcpyAsync(logits + (size_t)r0 * (size_t)V, c->logits,
                               sizeof(float) * (size_t)cnt * (size_t)V, cudaMemcpyDeviceToHost,
                               c->s),
               "logits download");
    }
    return HM_OK;
}

/* The CPU side of a step replayed with doorbells, on the step's thread: per layer with CPU
 * experts, in order, wait for the GPU's ring at this step's epoch, do what the host functions
 * do (submit, wait, deferral) and ring back. A failed or finished stream without the ring ends
 * the wait; every layer not answered by then is rung anyway, so that no GPU wait is left
 * hanging (the step reports the failure). */
static hm_status bells_run(hm_cuda_ctx *c) {
    const int L = (int)c->m->hp.n_layers;
    const uint32_t ep = c->epoch;
    hm_status st = HM_OK;
    int il = 0;
    for (; il < L; il++) {
        if (!c->cpu_moe[il]) continue;
        const uint32_t *ring = bell_out(c, il);
        for (unsigned spin = 1; __atomic_load_n(ring, __ATOMIC_ACQUIRE) != ep; spin++) {
            hm_cpu_relax();
            if (spin % 256) continue;
            const cudaError_t e = cudaStreamQuery(c->s);
            if (e == cudaErrorNotReady) {
                sched_yield();
                continue;
            }
            if (__atomic_load_n(ring, __ATOMIC_ACQUIRE) == ep) break;
            st = e == cudaSuccess
                     ? hm_errorf(HM_ERR_INTERNAL,
                                 "cuda: the step ended without handing layer %d to the CPU", il)
                     : hm_errorf(HM_ERR_DEVICE, "cuda: step before layer %d's hand-off: %s", il,
                                 cudaGetErrorString(e));
            break;
        }
        if (st) break;
        submit_cb(&c->cb[il]);
        wait_cb(&c->cb[il]);
        __atomic_store_n(bell_in(c, il), ep, __ATOMIC_RELEASE);
    }
    for (; il < L; il++)
        if (c->cpu_moe[il]) __atomic_store_n(bell_in(c, il), ep, __ATOMIC_RELEASE);
    return st;
}

/* A decode step of n tokens and nw wanted rows from its CUDA graph, captured on first use. */
static hm_status replay(hm_cuda_ctx *c, int n, int nw) {
    cudaGraphExec_t *ex = &c->step[n][nw];
    if (!*ex) {
        CK(cudaStreamBeginCapture(c->s, cudaStreamCaptureModeThreadLocal), "graph capture");
        const int top_k = c->top_k; /* the graph serves every k: the candidates run after it */
        c->top_k = 0;
        hm_status st = forward(c, n, nw, NULL);
        c->top_k = top_k;
        cudaGraph_t g = NULL;
        const cudaError_t e = cudaStreamEndCapture(c->s, &g);
        if (!st && e != cudaSuccess)
            st = hm_errorf(HM_ERR_DEVICE, "cuda: graph capture of a %d-token step: %s", n,
                           cudaGetErrorString(e));
        if (!st && cudaGraphInstantiate(ex, g, 0) != cudaSuccess) {
            *ex = NULL;
            st = hm_errorf(HM_ERR_DEVICE, "cuda: graph instantiation of a %d-token step: %s", n,
                           cudaGetErrorString(cudaGetLastError()));
        }
        if (g) cudaGraphDestroy(g);
        if (st) return st;
        c->n_big += n > HM_CU_MATVEC_MAX;
    }
    CK(cudaGraphLaunch(*ex, c->s), "graph launch");
    return HM_OK;
}

/* --dynamic-experts at the start of a step (nothing in flight): commits the swap whose copy has
 * landed, or every dyn_every steps folds the counts into their decayed sum and chooses the next
 * swap (its copy starts once the step is queued: dyn_copy). */
static hm_status dyn_begin(hm_cuda_ctx *c) {
    const int L = (int)c->m->hp.n_layers, E = (int)c->m->hp.n_experts;
    if (c->sw_il >= 0 && c->sw_issued) {
        const cudaError_t q = cudaEventQuery(c->sw_done);
        if (q == cudaErrorNotReady) return HM_OK; /* still copying: a later step */
        CK(q, "dynamic experts: copy");
        const int il = c->sw_il, in = c->sw_in, out = c->sw_out;
        int32_t *slot = c->h_tab + (size_t)il * (size_t)E,
                *cslot = c->cslot + (size_t)il * (size_t)E;
        uint8_t *mk = c->mask + (size_t)il * (size_t)E;
        const int freed = slot[out];
        slot[in] = c->spare[il], slot[out] = -1, c->spare[il] = freed;
        mk[in] = 1, mk[out] = 0;
        int nc = 0;
        for (int e = 0; e < E; e++) cslot[e] = mk[e] ? -1 : nc++;
        c->lw_nc[il] = c->lw_ns[il] = nc;
        CK(cudaMemcpyAsync(c->slot_of + (size_t)il * (size_t)E, slot, sizeof(int32_t) * (size_t)E,
                           cudaMemcpyHostToDevice, c->s),
           "dynamic experts: slots");
        const hm_status st = hm_moe_set_mask(c->cpu_moe[il], mk);
        if (st) return st;
        c->sw_il = -1, c->swaps++;
    }
    if (c->sw_il >= 0 || ++c->dyn_steps < c->dyn_every) return HM_OK;
    c->dyn_steps = 0;
    const size_t ne = (size_t)L * (size_t)E;
    CK(cudaMemcpy(c->h_counts, c->d_counts, sizeof(uint32_t) * ne, cudaMemcpyDeviceToHost),
       "dynamic experts: counts");
    CK(cudaMemsetAsync(c->d_counts, 0, sizeof(uint32_t) * ne, c->s), "dynamic experts: counts");
    for (size_t i = 0; i < ne; i++) c->dyn_cnt[i] = 0.5 * c->dyn_cnt[i] + (double)c->h_counts[i];
    int il, in, out;
    if (hm_dyn_pick(c->dyn_cnt, c->mask, L, E, 2.0, &il, &in, &out) && c->spare[il] >= 0)
        c->sw_il = il, c->sw_in = in, c->sw_out = out, c->sw_issued = false;
    return HM_OK;
}

/* The chosen swap's expert into its layer's spare slot, on the copy stream (from pageable
 * memory this thread stages it while the GPU runs the queued step). */
static hm_status dyn_copy(hm_cuda_ctx *c) {
    const int il = c->sw_il, slot = c->spare[il];
    const hm_moe_expert *x = &c->m->layers[il].experts[c->sw_in];
    for (int p = 0; p < 3; p++) {
        const hm_cu_w *w = &c->ex[il * 3 + p];
        const hm_moe_matrix *m = proj(x, p);
        CK(cudaMemcpy2DAsync((uint8_t *)w->data + (size_t)slot * w->estride, w->row_bytes, m->data,
                             m->row_bytes ? m->row_bytes : w->row_bytes, w->row_bytes,
                             (size_t)w->rows, cudaMemcpyHostToDevice, c->cs),
           "dynamic experts: copy");
    }
    CK(cudaEventRecord(c->sw_done, c->cs), "dynamic experts: copy");
    c->sw_issued = true;
    return HM_OK;
}

/* A step: logits of the nw wanted rows to the host (logits), or with top_k their candidates
 * (ids, vals: [nw][top_k]; *bad: the first row holding NaN or +inf, or -1), or nothing. */
static hm_status step(hm_cuda_ctx *c, int n, const int32_t *tokens, const int32_t *seq,
                      const int32_t *pos, const float *cs, const int32_t *rows, int nw,
                      float *logits, int top_k, int32_t *ids, float *vals, int *bad) {
    const hm_hparams *hp = &c->m->hp;
    if (n <= 0) return HM_OK;
    if (n > c->n_batch || nw > n)
        return hm_errorf(HM_ERR_INVALID_ARG, "cuda: %d tokens (%d wanted), batch holds %d", n, nw,
                         c->n_batch);
    const int B = c->n_batch, rd = (int)hp->rope_dim;
    int32_t *hi = c->h_in;
    memcpy(hi, tokens, sizeof(int32_t) * (size_t)n);
    memcpy(hi + B, pos, sizeof(int32_t) * (size_t)n);
    memcpy(hi + 2 * B, seq, sizeof(int32_t) * (size_t)n);
    if (nw) memcpy(hi + 3 * B, rows, sizeof(int32_t) * (size_t)nw);
    float *hcs = (float *)(hi + 4 * B);
    if (rd) memcpy(hcs, cs, sizeof(float) * (size_t)n * (size_t)rd);
    CK(cudaSetDevice(c->dev), "cudaSetDevice");
    if (c->def_pend >= 0) { /* a step that failed left deferred experts in flight */
        hm_moe_wait(c->cpu_moe[c->def_pend]);
        c->def_pend = -1;
    }
    if (c->dynamic) {
        const hm_status st = dyn_begin(c);
        if (st) return st;
    }
    c->cur_n = n;
    c->fa_seq = -1;
    if (c->fa && n >= c->fa_min) { /* one sequence at consecutive positions: the tensor cores */
        int i = 1;
        while (i < n && seq[i] == seq[0] && pos[i] == pos[0] + i) i++;
        if (i == n) c->fa_seq = seq[0], c->fa_pos0 = pos[0];
    }
    c->hyb_st = HM_OK;
    c->lw_on = c->stream_min > 0 && n >= c->stream_min;
    if (c->lw_on) {
        const hm_status st = lw_plan(c, n);
        if (st) return st;
    }
    /* d_cs follows d_in in the arena, 256-aligned: two copies */
    CK(cudaMemcpyAsync(c->d_in, hi, sizeof(int32_t) * 4 * (size_t)B, cudaMemcpyHostToDevice, c->s),
       "batch upload");
    if (rd)
        CK(cudaMemcpyAsync(c->d_cs, hcs, sizeof(float) * (size_t)n * (size_t)rd,
                           cudaMemcpyHostToDevice, c->s),
           "rope upload");
    c->top_k = top_k;
    hm_status st;
    const int nwg = logits || top_k ? nw : 0; /* the graph's wanted rows */
    if (n <= c->mv_max && !c->lw_on && !c->no_graphs && !c->prof &&
        (n <= HM_CU_MATVEC_MAX || c->step[n][nwg] || c->n_big < GRAPHS_BIG)) {
        /* a hybrid step hands off through doorbells, rung for this step's epoch */
        c->bells = c->cpu_moe && !c->no_bells && !c->lw_on;
        if (c->bells) {
            *c->h_bell_err = 0;                /* a failed step's timeout is not this one's */
            if (++c->epoch == 0) c->epoch = 1; /* the bells start at 0 */
            *c->h_epoch = c->epoch;
            CK(cudaMemcpyAsync(c->d_epoch, c->h_epoch, sizeof(uint32_t), cudaMemcpyHostToDevice,
                               c->s),
               "step number upload");
        }
        st = replay(c, n, nwg);
        if (c->bells) { /* the CPU side, while the GPU runs the step; before any copy to
                           pageable memory, which would wait for the step's end */
            c->bells = false;
            if (!st) st = bells_run(c);
            if (st) cudaStreamSynchronize(c->s); /* every bell rung: the step ends */
        }
        if (!st && logits && nw)
            CK(cudaMemcpyAsync(logits, c->logits, sizeof(float) * (size_t)nw * hp->vocab_size,
                               cudaMemcpyDeviceToHost, c->s),
               "logits download");
        if (!st && top_k && nw)
            CK(hm_cu_top_candidates(c->logits, hp->vocab_size, nw, (int)hp->vocab_size, top_k,
                                    c->d_top_ids, c->d_top_vals, c->d_top_bad, c->d_top_scratch,
                                    c->s),
               "sampling candidates");
    } else {
        st = forward(c, n, nw, logits);
    }
    c->top_k = 0;
    if (st) return st;
    if (c->dynamic && c->sw_il >= 0 && !c->sw_issued && (st = dyn_copy(c))) return st;
    int32_t *h_ids = c->h_top, *h_bad = h_ids + (size_t)nw * top_k;
    float *h_vals = (float *)(h_bad + nw);
    if (top_k && nw) {
        const size_t cnt = (size_t)nw * (size_t)top_k;
        CK(cudaMemcpyAsync(h_ids, c->d_top_ids, sizeof(int32_t) * cnt, cudaMemcpyDeviceToHost,
                           c->s),
           "candidates download");
        CK(cudaMemcpyAsync(h_bad, c->d_top_bad, sizeof(int32_t) * (size_t)nw,
                           cudaMemcpyDeviceToHost, c->s),
           "candidates download");
        CK(cudaMemcpyAsync(h_vals, c->d_top_vals, sizeof(float) * cnt, cudaMemcpyDeviceToHost,
                           c->s),
           "candidates download");
    }
    CK(cudaEventRecord(c->done, c->s), "forward pass");
    CK(cudaEventSynchronize(c->done), "forward pass");
    if (c->hyb_st) return hm_errorf(c->hyb_st, "%s", c->hyb_msg);
    if (c->h_bell_err && *c->h_bell_err) {
        *c->h_bell_err = 0;
        return hm_errorf(HM_ERR_DEVICE, "cuda: the GPU waited 30 s for the CPU experts' sum");
    }
    if (top_k && nw) {
        const size_t cnt = (size_t)nw * (size_t)top_k;
        memcpy(ids, h_ids, sizeof(int32_t) * cnt);
        memcpy(vals, h_vals, sizeof(float) * cnt);
        *bad = -1;
        for (int r = 0; r < nw && *bad < 0; r++)
            if (h_bad[r] >= 0) *bad = r;
    }
    return HM_OK;
}

hm_status hm_cuda_ctx_decode(hm_cuda_ctx *c, int n, const int32_t *tokens, const int32_t *seq,
                             const int32_t *pos, const float *cs, const int32_t *rows, int nw,
                             float *logits) {
    return step(c, n, tokens, seq, pos, cs, rows, nw, logits, 0, NULL, NULL, NULL);
}

hm_status hm_cuda_ctx_decode_top(hm_cuda_ctx *c, int n, const int32_t *tokens, const int32_t *seq,
                                 const int32_t *pos, const float *cs, const int32_t *rows, int nw,
                                 int k, int32_t *ids, float *vals, int *bad) {
    if (k < 1 || k > HM_CU_TOP_MAX || (int64_t)k > (int64_t)c->m->hp.vocab_size)
        return hm_errorf(HM_ERR_INVALID_ARG, "cuda: %d candidates per row (1 to %d)", k,
                         HM_CU_TOP_MAX);
    return step(c, n, tokens, seq, pos, cs, rows, nw, NULL, k, ids, vals, bad);
}

hm_status hm_cuda_ctx_measure(const hm_model *m, const hm_graph *g, const hm_cuda_ctx_params *p,
                              size_t *total, size_t *experts, size_t *free_bytes, size_t *stream) {
    *total = *experts = *free_bytes = *stream = 0;
    hm_cuda_ctx *c = NULL;
    hm_status st = ctx_new(m, g, p, &c);
    if (st) return st;
    c->gpu_mask = NULL; /* every routed expert counted */
    st = layout(c);     /* the sizing pass: nothing allocated */
    size_t tot = 0;
    if (!st && (cudaSetDevice(p->device) != cudaSuccess ||
                cudaMemGetInfo(free_bytes, &tot) != cudaSuccess))
        st = hm_errorf(HM_ERR_DEVICE, "cuda: cannot read GPU %d's free memory", p->device);
    if (!st) *total = c->used + HM_CUDA_MARGIN, *experts = c->expert_bytes;
    if (!st && !c->lw_bad && p->n_batch > HM_CU_MATVEC_MAX) *stream = 2 * c->lw_full;
    hm_cuda_ctx_free(c);
    return st;
}

void hm_cuda_ctx_hybrid_times(hm_cuda_ctx *c, hm_cuda_hybrid_times *t) {
    memset(t, 0, sizeof *t);
    if (!c) return;
    t->gpu_wait_s = (double)c->hyb_wait_ns * 1e-9, t->cpu_span_s = (double)c->hyb_span_ns * 1e-9;
    t->layers = c->hyb_layers, t->blocked = c->hyb_blocked;
    t->streamed = c->lw_layers, t->stream_bytes = c->lw_bytes, t->swaps = c->swaps;
    c->swaps = 0;
    c->hyb_wait_ns = c->hyb_span_ns = c->hyb_layers = c->hyb_blocked = 0;
    c->lw_layers = c->lw_bytes = 0;
}

bool hm_cuda_ctx_prof(hm_cuda_ctx *c, double ms[HM_PROF_COUNT]) {
    if (!c || !c->prof) return false;
    for (int p = 0; p < HM_PROF_COUNT; p++) ms[p] = c->prof_ms[p], c->prof_ms[p] = 0;
    return true;
}
