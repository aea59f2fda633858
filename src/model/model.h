/* model.h - a loaded model: hyper-parameters plus views of every weight, bound straight from a
 * GGUF file (llama.cpp names) or a Hugging Face directory (config.json + safetensors, HF names)
 * with no conversion step; and a context that runs the forward pass of a batch of tokens from
 * several sequences on the CPU, with a KV cache per sequence.
 *
 * Ownership: hm_model owns its mapped files and the small float copies it makes (norm weights);
 * big matrices are views into the mappings. A model is immutable after load and may be shared by
 * many contexts. A context owns its thread pool, expert engines, KV cache and scratch; one thread
 * drives a context at a time. */
#ifndef HM_MODEL_MODEL_H
#define HM_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/alloc.h"
#include "core/pool.h"
#include "cpu/matvec.h"
#include "format/gguf.h"
#include "format/hparams.h"
#include "format/safetensors.h"
#include "hmoe_moe.h"

typedef struct hm_layer {
    const float *attn_norm, *ffn_norm; /* [hidden] */
    const float *q_norm, *k_norm;      /* [head_dim] or NULL */
    hm_matrix wq, wk, wv, wo;
    bool moe;
    hm_matrix router;                     /* [n_experts][hidden] */
    hm_moe_expert *experts;               /* [n_experts] views */
    uint32_t expert_type[3];              /* gate, up, down */
    hm_matrix ffn_gate, ffn_up, ffn_down; /* dense layers */
} hm_layer;

typedef struct hm_model {
    char path[1024];
    hm_hparams hp;
    hm_gguf *gguf; /* one of gguf / st */
    hm_safetensors *st;
    hm_matrix tok_embd; /* [vocab][hidden] */
    hm_matrix output;   /* [vocab][hidden]: lm_head, or tok_embd when tied */
    const float *output_norm;
    hm_layer *layers; /* [n_layers] */
    void **owned;     /* copies made at load (float norms, FP8 weights as FP8_B128, weights the
                         file does not align to their element size) */
    size_t fp8_bytes; /* bytes of those FP8_B128 copies (the file's FP8 bytes are then unused) */
    size_t realigned_bytes; /* bytes of the aligned copies of misaligned weights */
    hm_large copy;    /* the weights' copy (HM_LOAD_COPY), else empty */
    size_t n_owned, cap_owned;
    bool checking; /* load's first pass: every tensor's presence, type and shape, nothing read */
} hm_model;

typedef enum hm_load_mode {
    HM_LOAD_AUTO = 0, /* copy when the weights take less than 3/4 of the machine's memory */
    HM_LOAD_MMAP,     /* compute straight from the mapped file (page cache, 4 KiB pages) */
    HM_LOAD_COPY,     /* copy the weights into anonymous memory backed by huge pages: fewer TLB
                         misses while streaming experts, at the price of load time */
} hm_load_mode;

typedef struct hm_model_params {
    hm_load_mode load;
    int n_threads; /* threads that copy (HM_LOAD_COPY); 0 = one per physical core */
} hm_model_params;

hm_model_params hm_model_default_params(void);

/* Opens path: a .gguf file or a Hugging Face directory (or its config.json). Errors name the file
 * and the tensor or key that is missing, mis-shaped or of an unsupported type. params may be NULL
 * (defaults). */
hm_status hm_model_load(const char *path, hm_model **out);
hm_status hm_model_load_ex(const char *path, const hm_model_params *params, hm_model **out);
/* true when the weights were copied out of the file (HM_LOAD_COPY or AUTO chose to) */
bool hm_model_copied(const hm_model *m);
void hm_model_free(hm_model *m);

/* ---- context: KV cache + forward ------------------------------------------------------------ */

typedef enum hm_repack_mode {
    HM_REPACK_AUTO = 0, /* repack when the copy fits in the memory left (see hm_ctx_create) */
    HM_REPACK_OFF,      /* prefill converts the experts' weights to int8 tiles on every batch */
    HM_REPACK_ON,       /* always repack (fails when the memory cannot be had) */
} hm_repack_mode;

typedef struct hm_ctx_params {
    int n_threads;   /* 0 = one per physical core */
    int n_ctx;       /* positions per sequence; 0 = min(max_position_embeddings, 4096) */
    int n_seq;       /* sequences (KV cache slots); 0 = 1 */
    int n_batch;     /* most tokens per hm_ctx_decode call; 0 = 512 */
    bool no_amx;     /* never use AMX tiles (exact kernels only) */
    bool kv_f16;     /* KV cache in IEEE half: half the memory, ~1e-3 relative rounding */
    bool pin_caller; /* pin the calling thread to participant 0's core (it computes as one of the
                        pool's threads; unpinned, the OS may stack it on a worker's core) */
    /* AMX prefill: keep a second copy of the routed experts as int8 tile units (~1 byte per
     * weight) so batches skip the per-call conversion; decode still reads the original weights.
     * AUTO repacks when that copy (plus the model itself when it is mmapped, so that the page
     * cache keeps it) fits in 80% of MemAvailable; nothing is repacked without AMX. */
    hm_repack_mode repack;
    /* prefill (16+ tokens) of BF16/F16 attention, dense and output weights on AMX BF16 tiles:
     * activations rounded to bf16 as transformers' bf16 compute does (off: exact float kernels) */
    bool bf16_tiles;
    /* decode: no prefetching of the next matmul's weights by idle workers between jobs (they
     * stream each worker's share of q/k/v, o and the router towards its L2 while the others
     * finish and the calling thread runs alone; off only to measure what that gains) */
    bool no_idle_prefetch;
    /* NUMA: the routed experts of every layer split into slices of their intermediate dimension,
     * one per node, each computed by the pool's threads on that node from a copy of its share of
     * the weights in that node's memory (hm_moe_params.n_slices, slice_copy); the partial outputs
     * are summed. 0 = auto (one slice per node when the machine has several, each node getting
     * an equal share of the threads), 1 = off, N >= 2 = N slices (emulated with an even split
     * of the threads where the machine has not N nodes). A split the expert shapes do not allow
     * (whole blocks of the down type per slice) falls back to no slices, with a warning. */
    int numa;
    /* the slices' weight copies: AUTO when they fit the memory budget of `repack` (checked
     * first: decode reads them), ON always, OFF never (the slices then read the model's
     * pages wherever they are) */
    hm_repack_mode numa_copy;
} hm_ctx_params;

typedef struct hm_ctx hm_ctx;

hm_ctx_params hm_ctx_default_params(void);
hm_status hm_ctx_create(const hm_model *m, const hm_ctx_params *p, hm_ctx **out);
void hm_ctx_free(hm_ctx *c);

int hm_ctx_n_batch(const hm_ctx *c);
int hm_ctx_n_threads(const hm_ctx *c);
int hm_ctx_n_ctx(const hm_ctx *c);
int hm_ctx_n_seq(const hm_ctx *c);
size_t hm_ctx_repacked_bytes(const hm_ctx *c);  /* the int8 copies (experts, dense), 0: none */
int hm_ctx_numa_slices(const hm_ctx *c);        /* the experts' slices (1: none) */
size_t hm_ctx_numa_copy_bytes(const hm_ctx *c); /* the slices' weight copies, 0: none */
int hm_ctx_seq_len(const hm_ctx *c, int seq);   /* positions already in the cache */
/* Forgets a sequence's cache (its next token is position 0). */
void hm_ctx_seq_reset(hm_ctx *c, int seq);

/* Runs n tokens (n <= n_batch); token i belongs to sequence seq[i] (NULL: all sequence 0) and
 * takes the next position of that sequence, so tokens of one sequence go in order. logits, when
 * not NULL, receives [count][vocab] floats: one row per token whose want[i] is set (want NULL:
 * every token), in batch order. On error nothing is added to any cache. */
hm_status hm_ctx_decode(hm_ctx *c, const int32_t *tokens, const int32_t *seq, int n,
                        const uint8_t *want, float *logits);

/* Time spent per part of the forward pass since the context was made (or reset). */
enum {
    HM_PROF_EMBED = 0,
    HM_PROF_NORM,      /* RMSNorms and residual adds */
    HM_PROF_ATTN_PROJ, /* q, k, v, o projections */
    HM_PROF_ATTN,      /* q/k norm, rope, cache write, attention */
    HM_PROF_ROUTER,
    HM_PROF_MOE,    /* routed experts (expert engine) */
    HM_PROF_DENSE,  /* dense MLP layers */
    HM_PROF_OUTPUT, /* final norm + lm_head */
    HM_PROF_COUNT
};
const char *hm_ctx_prof_name(int part);
double hm_ctx_prof_seconds(const hm_ctx *c, int part);
/* Of a part's time, the calling thread's time outside the thread pool's jobs (work no other
 * thread shares: norms of one token, rope, routing, conversions before a job). */
double hm_ctx_prof_alone_seconds(const hm_ctx *c, int part);
/* Of a part's time, the pool jobs' dispatch and the calling thread's wait for the slowest
 * participant (a sync pool's job time minus the caller's own share). */
double hm_ctx_prof_wait_seconds(const hm_ctx *c, int part);
void hm_ctx_prof_reset(hm_ctx *c);

/* The routed experts of prompt batches (more than 4 tokens) since the last hm_ctx_prof_reset:
 * the expert engines' phases summed over layers (hm_moe_profile), and the routing per (layer,
 * batch) averaged: distinct experts used, tokens of the busiest expert, tokens per batch. */
typedef struct hm_ctx_moe_stats {
    double phase_s[HM_MOE_PROF_N];
    uint64_t batches; /* (layer, batch) pairs counted */
    double active, busiest, tokens;
} hm_ctx_moe_stats;
void hm_ctx_moe_stats_get(const hm_ctx *c, hm_ctx_moe_stats *out);

/* The context's thread-pool job counters (hm_pool_stats: jobs, time in jobs, the calling
 * thread's own share); with reset they are zeroed after being read (out may be NULL). */
void hm_ctx_pool_stats(hm_ctx *c, hm_pool_stats *out, bool reset);

#endif
