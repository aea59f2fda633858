/* hmoe_moe.h - the CPU expert engine: one object per MoE layer that computes the routed experts of
 * a batch of tokens from weights in host memory, asynchronously, on a thread pool.
 *
 *   out[t] (+)= sum_j w[t][j] * down_e( act(gate_e(x[t]) + bg_e, up_e(x[t]) + bu_e) ) + w * bd_e
 *   with e = ids[t][j], for every j whose expert is not masked (lives on the GPU).
 *
 * Paths: an expert runs the matvec kernels (weights streamed once, 4 tokens per weight read) below
 * its formats' tile crossover (hm_tile_min_tokens: 5-16 tokens with AMX, 7-28 with AVX-512 VNNI,
 * 5 for repacked weights, never on other CPUs), the int8 tile matmul from there. A batch of
 * matvec experts only, up to 512 assignments, takes the decode path: rows of every expert split
 * across all threads, one barrier.
 *
 * Ownership: the weight views point into memory the caller keeps alive and unchanged for the
 * object's lifetime (an mmapped GGUF, a repacked copy); the params' arrays are copied. The pool
 * is borrowed, not owned: it must outlive the object and must not run other jobs while a submit
 * is in flight.
 * Threading: one caller drives an object (submit, wait, set_mask from one thread at a time).
 * hm_moe_submit returns at once on an async pool (hm_pool_params.async) and runs to completion on
 * a sync one (a batch of 1-2 decode tokens is converted to the kernels' activation format on the
 * calling thread first, ~1 us); x, ids, w and out must stay valid and untouched until hm_moe_wait
 * returns. Several
 * objects (layers) may share one pool, one submit in flight at a time.
 * Results: the same inputs give the same bits whatever the timing and however many threads the
 * pool has (each token's experts are summed in an order the batch fixes; with NUMA slices, for a
 * given number of slices).
 * Errors: bad shapes or types fail in hm_moe_create, bad ids / token counts in hm_moe_submit,
 * each with a message naming what was wrong; nothing is computed then. */
#ifndef HMOE_MOE_H
#define HMOE_MOE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hmoe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hm_pool hm_pool;
typedef struct hm_moe hm_moe;
typedef struct hm_moe_scratch hm_moe_scratch;

typedef enum {
    HM_MOE_SILU = 0,   /* silu(g) * u (Qwen, DeepSeek, Mixtral) */
    HM_MOE_GELU,       /* gelu(g) * u with the exact (erf) GELU */
    HM_MOE_SWIGLU_OAI, /* gpt-oss: g = min(g, limit), u = clamp(u, -limit, limit),
                          (u + 1) * g * sigmoid(alpha * g) */
} hm_moe_act;

typedef enum { HM_MOE_F32 = 0, HM_MOE_BF16 } hm_moe_dtype;

/* A weight matrix [rows][cols] of a ggml type (GGUF layout: cols contiguous). row_bytes 0 means
 * rows are packed (hm_type_row_bytes). */
typedef struct hm_moe_matrix {
    uint32_t type;
    const void *data;
    size_t row_bytes;
} hm_moe_matrix;

typedef struct hm_moe_expert {
    hm_moe_matrix gate, up;           /* [inter][hidden] */
    hm_moe_matrix down;               /* [hidden][inter] */
    const float *gate_bias, *up_bias; /* [inter] or NULL */
    const float *down_bias;           /* [hidden] or NULL */
} hm_moe_expert;

typedef struct hm_moe_params {
    int n_experts;
    int64_t hidden, inter;
    const hm_moe_expert *experts; /* [n_experts]; one type per projection across experts */
    hm_moe_act act;
    float swiglu_alpha, swiglu_limit; /* HM_MOE_SWIGLU_OAI (gpt-oss: 1.702, 7.0) */
    const uint8_t *mask; /* [n_experts], nonzero: computed elsewhere, skipped; or NULL */
    hm_pool *pool;
    /* NUMA: with n_slices > 1, slice i of every expert's intermediate dimension (gate/up rows,
     * down columns; boundaries on whole blocks of the down type and its activation type) is
     * computed by group i of the pool's participants, which synchronize only among themselves;
     * the groups run at once within one job of the pool, and at its end every participant sums
     * its share of the slices' partial outputs into out. Groups are consecutive participants:
     * slice_threads[i] of them for slice i (adding up to the pool's size), or with slice_threads
     * NULL one group per NUMA node when the participants' CPUs run through exactly n_slices
     * nodes in turn (a pool over the cores of n nodes, hm_pool_create's default order), else
     * (emulated nodes) threads in proportion to the slices' widths, which whole blocks may make
     * uneven (inter 768 of Q4_K: 256 + 512). Needs at least n_slices participants. */
    int n_slices;
    const int *slice_threads;
    /* With n_slices > 1: each slice copies its share of every expert's weights (unmasked at
     * create; ~1 byte per weight byte in all, hm_moe_slice_copy_bytes) into buffers that its own
     * participants fill, so the pages land on their node and the slice's threads read only
     * local memory. Without it the slices read the given views, wherever they are. */
    bool slice_copy;
    int max_tokens; /* tokens per internal pass (scratch is sized for it); 0 = 1024 */
    bool no_amx;    /* never use the AMX path (tests, comparisons) */
    /* AMX prefill: also store every (unmasked at create) expert's weights once as int8 tile
     * units (hm_moe_repack_bytes more memory, ~1 byte per weight, in huge pages), so experts with
     * more than 4 tokens skip the per-call conversion to int8. Same results bit for bit; decode
     * keeps reading the original weights. Ignored without AMX, with no_amx and with float
     * weights. The pool computes the repacking in hm_moe_create (with n_slices > 1 each slice's
     * group packs its own slice, so the copy lands on that node). */
    bool repack;
    /* Batch scratch shared with other engines (hm_moe_scratch_create), or NULL for the default:
     * one scratch shared by every engine created on the same pool without one (made with the
     * first, freed with the last; an engine with n_slices > 1 gets one of its own). A model's
     * layers run one after another, so one scratch can serve them all: it grows to the largest
     * batch any of them has seen, is allocated (and its pages faulted in) once instead of once per
     * layer, and stays warm from layer to layer. Engines sharing it must use pools of the same size
     * and not have batches in flight at the same time (hm_moe_submit refuses with an error). With
     * n_slices > 1 it also keeps one scratch per slice, shared by that slice of every engine. */
    hm_moe_scratch *scratch;
} hm_moe_params;

hm_moe_params hm_moe_default_params(void);

/* A batch scratch for engines that take turns (see hm_moe_params.scratch). Reference counted:
 * every engine created with it holds a reference, and hm_moe_scratch_free drops the caller's, so
 * it may be freed right after the engines are created. Create and free from one thread. */
hm_status hm_moe_scratch_create(hm_moe_scratch **out);
void hm_moe_scratch_free(hm_moe_scratch *s); /* NULL is a no-op */
/* Bytes the repack option would take for these shapes on this CPU (0 when it would be ignored:
 * no AMX, no_amx, float weights). Only the shapes, types, mask and flags are read. */
size_t hm_moe_repack_bytes(const hm_moe_params *params);
/* Bytes the slice_copy option would take (0 with n_slices < 2 or shapes it cannot split). */
size_t hm_moe_slice_copy_bytes(const hm_moe_params *params);
hm_status hm_moe_create(const hm_moe_params *params, hm_moe **out);
/* The slices of an engine created with n_slices > 1: their count, and in threads[i] (for
 * i < min(count, max)) the participants that run slice i, in the pool's order. 0 for an engine
 * without slices. */
int hm_moe_slice_threads(const hm_moe *moe, int *threads, int max);
void hm_moe_free(hm_moe *moe); /* waits for a submit in flight; NULL is a no-op */

/* Replaces the mask (NULL: no expert masked). Not while a submit is in flight. */
hm_status hm_moe_set_mask(hm_moe *moe, const uint8_t *mask);

/* x: [n_tok][hidden] of x_type; ids, w: [n_tok][k] (ids < n_experts; an id of -1 is skipped);
 * out: [n_tok][hidden] of out_type, overwritten, or added to when accumulate is set (the expert
 * deferral case: the deferred experts of layer L are added to layer L+1's output). out may be x
 * itself (in place). A float32 out that is overwritten, 64-byte aligned and apart from x is
 * summed into directly (the rows of a hidden size that is a multiple of 16), which saves a
 * scratch buffer's copy: give batches of many tokens such an output. */
hm_status hm_moe_submit(hm_moe *moe, const void *x, hm_moe_dtype x_type, const int32_t *ids,
                        const float *w, int n_tok, int k, void *out, hm_moe_dtype out_type,
                        bool accumulate);
/* Blocks until the submitted batch is complete (no-op when none is in flight). */
void hm_moe_wait(hm_moe *moe);

/* Diagnostics: seconds the caller's participant spent per phase of the batched path since the
 * last reset (barrier waits included, so the phases add up to the wall time; the one-chunk
 * decode path is not counted). With slices, the slowest slice per phase. */
enum {
    HM_MOE_PROF_PRE,     /* activation conversion for the matvec experts */
    HM_MOE_PROF_PACK_X,  /* int8 packing of the AMX experts' inputs */
    HM_MOE_PROF_GATE_UP, /* gate + up + activation */
    HM_MOE_PROF_PACK_H,  /* conversion / packing of the hidden rows */
    HM_MOE_PROF_DOWN,    /* down + weighted sum (+ the output of the last chunk) */
    HM_MOE_PROF_N
};
void hm_moe_profile(hm_moe *moe, double sec[HM_MOE_PROF_N], bool reset);
/* Short name of a phase ("activations", "pack x", "gate/up", "pack h", "down"); "?" if none. */
const char *hm_moe_profile_name(int phase);

/* Diagnostics since the last reset, summed over every thread (and slice): of the AMX prefill
 * path, where a fused gate/up claim's time goes and the int8 rate the kernels reach while they
 * run, which is less noisy than the phases' wall time; of the decode path, where each
 * participant's time goes. Seconds are thread-seconds. Zero where a path did not run (no AMX, no
 * repacked weights; no decode). Not while a submit is in flight. */
typedef struct hm_moe_kernel_stats {
    uint64_t claims, tokens; /* fused gate/up claims (one scale group of h each), their tokens */
    double pack_x_s;         /* gathering and packing the claims' experts' x (once per expert
                                and thread) */
    double glu_s, glu_ops;   /* the gate + up + silu kernel: time, int8 ops (2 per multiply-add) */
    double pack_h_s;         /* quantizing and packing the claims' h for down */
    double down_s, down_ops; /* the down kernel (products added into the output rows) */
    double h_wait_s;         /* down waiting for an expert's last gate/up claims (when the
                                phases overlap: every expert's h packed by its own claims) */
    uint64_t steals;         /* down claims split by a thread that had run out of claims */
    /* The decode path (batches of matvec experts: 1-4 tokens each): participations (one per thread
     * and submit) and their thread-seconds: in all (from entering the job to leaving it), in
     * gate/up claims (kernels, activation, h conversion), in down claims' rows, down claims waiting
     * for their expert's h, at the barrier after the last claim, summing the weighted rows and
     * writing the output */
    uint64_t dec_jobs;
    double dec_in_s, dec_gu_s, dec_down_s, dec_h_wait_s, dec_barrier_s, dec_sum_s;
    double dec_prep_s;  /* the caller's submits: routing and checks before the job's launch */
    double dec_start_s; /* from the launch to each participant's start (waking the threads) */
} hm_moe_kernel_stats;
void hm_moe_kernel_stats_get(hm_moe *moe, hm_moe_kernel_stats *stats, bool reset);

/* ---- routers (CPU helpers; scores in float) ---------------------------------------------- */

/* softmax over n logits, the k largest (ties: lower id first), optionally renormalised to sum 1
 * (Qwen3 norm_topk_prob; Mixtral and gpt-oss equal the renormalised form). */
hm_status hm_router_softmax_topk(const float *logits, int n, int k, bool renorm, int32_t *ids,
                                 float *w);
/* DeepSeek-V3: s = sigmoid(logits); choice = s + bias (bias may be NULL); groups of n / n_group
 * experts scored by the sum of their top-2 choices; the best topk_group groups kept; the k best
 * choices among them; weights s[id], renormalised when renorm, times scale. */
hm_status hm_router_sigmoid_group_topk(const float *logits, const float *bias, int n, int n_group,
                                       int topk_group, int k, bool renorm, float scale,
                                       int32_t *ids, float *w);

#ifdef __cplusplus
}
#endif

#endif
