/* cuda.h - the only C-facing entry to the GPU code. In a CPU-only build every call returns
 * HM_ERR_UNSUPPORTED ("built without CUDA") and hm_cuda_compiled() is false. */
#ifndef HM_CUDA_H
#define HM_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"
#include "model/backend.h"
#include "model/graph.h"

typedef struct hm_model hm_model;
typedef struct hm_moe hm_moe;

typedef struct hm_gpu_info {
    int index;
    char name[256];
    size_t mem_total, mem_free; /* bytes */
    int cc_major, cc_minor;
    int sm_count;
    int mem_bus_width_bits;
    int pci_bus, pci_device;
} hm_gpu_info;

bool hm_cuda_compiled(void);
/* Number of usable GPUs. A machine without a driver or GPU gives 0 and HM_OK. */
hm_status hm_cuda_device_count(int *n);
/* Driver and runtime versions as CUDA encodes them (1000 * major + 10 * minor). */
hm_status hm_cuda_versions(int *driver, int *runtime);
hm_status hm_cuda_device_info(int dev, hm_gpu_info *out);
/* Pinned host -> device copy bandwidth in 1e9 bytes/s (best of reps copies of `bytes`). */
hm_status hm_cuda_h2d_bandwidth(int dev, size_t bytes, int reps, double *gbs);
/* Device memory bandwidth in 1e9 bytes/s: a device-to-device copy of `bytes`, read plus
 * written (best of reps). */
hm_status hm_cuda_mem_bandwidth(int dev, size_t bytes, int reps, double *gbs);
/* Runs a small kernel on dev and checks its result against the CPU. */
hm_status hm_cuda_selftest(int dev);

/* `hmoe bench cuda` (bench.c): the kernels of a decode step of a GQA MoE model of these shapes,
 * each alone, against the same run's device copy bandwidth; a table to out. */
typedef struct hm_cuda_bench_params {
    int device;
    int64_t hidden, n_heads, n_kv_heads, head_dim, n_experts, top_k, moe_inter, vocab;
    uint32_t attn_type, experts_type; /* the attention and output head's weights; the experts' */
    int tokens;                       /* per step, 1..HM_CU_MATVEC_MAX (8) */
    int ctx;                          /* positions each token attends to */
    bool kv_f16;
    int iters;        /* launches per timed graph */
    size_t min_bytes; /* each case cycles over copies of its weights of at least this; 0: 4 x L2 */
    size_t bw_bytes;  /* the bandwidth copy's bytes; 0: 1 GiB */
} hm_cuda_bench_params;
hm_status hm_cuda_bench(const hm_cuda_bench_params *p, FILE *out);

/* ---- the CUDA backend (backend.c): a model on one GPU, routed experts optionally on the CPU - */

typedef struct hm_cuda_ctx hm_cuda_ctx;

typedef struct hm_cuda_ctx_params {
    int device;  /* GPU index */
    int n_batch; /* most tokens per batch */
    int n_ctx;   /* positions per sequence */
    int n_seq;   /* sequences */
    bool kv_f16; /* KV cache in IEEE half, else float */
    bool bf16;   /* non-expert weights as BF16, batches on BF16 tensor cores (hm_ctx_params) */
    int defer;   /* hybrid: CPU experts per token deferred to the next layer (hm_ctx_params) */
    /* hybrid: layerwise prefill's threshold in tokens, HM_PREFILL_STREAM_AUTO or _OFF
     * (hm_ctx_params.gpu_prefill_threshold) */
    int prefill_stream;
    bool dynamic; /* hybrid: --dynamic-experts (hm_ctx_params.dynamic_experts) */
    /* hybrid: [n_layers][n_experts], nonzero = the routed expert's weights on the GPU (NULL:
     * every expert); the others run on cpu_moe[layer], the layer's CPU expert engine (on an
     * async pool, masked to skip the GPU's experts), submitted and waited for from host functions
     * on the GPU stream while the GPU computes its own experts. Both outlive the context. */
    const uint8_t *gpu_experts;
    hm_moe *const *cpu_moe;
} hm_cuda_ctx_params;

/* The GPU bytes a context would take with every routed expert on the GPU (total) and of it the
 * routed experts' (experts), the GPU's free bytes, and the bytes layerwise prefill's two
 * buffers would take with every expert of the largest layer on the CPU (stream; 0 where the
 * model's experts cannot stream: biases, or a type without tiles): what a placement budget is
 * made from. */
hm_status hm_cuda_ctx_measure(const hm_model *m, const hm_graph *g, const hm_cuda_ctx_params *p,
                              size_t *total, size_t *experts, size_t *free_bytes, size_t *stream);

/* Copies the weights g reads (and the embedding, final norm, output head) to GPU p->device and
 * makes a KV cache and scratch there. Refused, with what it needs and what is free, when the
 * GPU cannot hold it; HM_ERR_UNSUPPORTED naming the tensor for a weight type without a kernel.
 * m and g must outlive the context. */
hm_status hm_cuda_ctx_create(const hm_model *m, const hm_graph *g, const hm_cuda_ctx_params *p,
                             hm_cuda_ctx **out);
void hm_cuda_ctx_free(hm_cuda_ctx *c);
/* One batch of n tokens (host arrays): token ids, sequences, positions, and each token's rotary
 * cos/sin ([n][rope_dim], model/rope.h); the final-norm + output-head logits of the nw batch
 * rows listed in rows go to logits ([nw][vocab], host) unless logits is NULL. */
hm_status hm_cuda_ctx_decode(hm_cuda_ctx *c, int n, const int32_t *tokens, const int32_t *seq,
                             const int32_t *pos, const float *cs, const int32_t *rows, int nw,
                             float *logits);
/* The same step, the wanted rows' sampling candidates instead of their logits: each row's k
 * (1..256) largest logits, ties to the lower token, in ascending token order (ids, vals:
 * [nw][k], host), and *bad the first of the nw rows holding NaN or +inf, or -1. */
hm_status hm_cuda_ctx_decode_top(hm_cuda_ctx *c, int n, const int32_t *tokens, const int32_t *seq,
                                 const int32_t *pos, const float *cs, const int32_t *rows, int nw,
                                 int k, int32_t *ids, float *vals, int *bad);
/* The backend seam (model/backend.h): the graph walk over the batch already in the slots. */
hm_backend hm_cuda_ctx_backend(hm_cuda_ctx *c);
/* The hybrid hand-off since the last call (then zeroed): the GPU stream's time waiting for the
 * CPU experts, their span from submit to done (an upper bound where the stream did not wait),
 * layers handed off and of them those the stream waited for. */
typedef struct hm_cuda_hybrid_times {
    double gpu_wait_s, cpu_span_s;
    uint64_t layers, blocked;
    uint64_t streamed, stream_bytes; /* layerwise prefill: layers streamed, and their bytes */
    uint64_t swaps;                  /* --dynamic-experts: swaps that took effect */
} hm_cuda_hybrid_times;
void hm_cuda_ctx_hybrid_times(hm_cuda_ctx *c, hm_cuda_hybrid_times *t);
/* With HMOE_CUDA_PROFILE=1 set when the context was made: the GPU milliseconds per part of the
 * forward pass (HM_PROF_*) since the last call, and true; else false. */
bool hm_cuda_ctx_prof(hm_cuda_ctx *c, double ms[HM_PROF_COUNT]);

#endif
