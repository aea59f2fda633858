/* hmoe.h - libhmoe's public API: load a Mixture-of-Experts model (a GGUF file or a Hugging Face
 * directory), run batches of tokens from several sequences through it, tokenize and detokenize,
 * render the model's chat template, sample, and generate with a token callback.
 *
 *     hm_model *m = NULL;
 *     hm_ctx *c = NULL;
 *     hm_tokenizer *tok = NULL;
 *     hm_sampler *smp = NULL;
 *     hm_model_params mp = hm_model_default_params();
 *     if (hm_model_load_ex("Qwen3-30B-A3B-Q4_K_M.gguf", &mp, &m) ||
 *         hm_tokenizer_load("Qwen3-30B-A3B-Q4_K_M.gguf", &tok)) {
 *         fprintf(stderr, "%s\n", hm_last_error());
 *         ...
 *     }
 *     hm_ctx_params cp = hm_ctx_default_params();        // n_ctx, n_batch, threads, ...
 *     hm_sampler_params sp = hm_sampler_default_params();
 *     sp.temperature = 0.7f, sp.seed = 1;
 *     hm_ctx_create(m, &cp, &c);
 *     hm_sampler_create(&sp, hm_model_n_vocab(m), &smp);
 *     int32_t *ids; size_t n;
 *     hm_tokenizer_encode_alloc(tok, "The capital of France is", 24, HM_TOK_ADD_SPECIAL, &ids, &n);
 *     hm_generate_params gp = hm_generate_default_params();
 *     gp.n_predict = 64;
 *     hm_generate(c, smp, tok, ids, (int)n, &gp, print_piece, NULL, NULL);
 *     free(ids);
 *     hm_sampler_free(smp), hm_ctx_free(c), hm_tokenizer_free(tok), hm_model_free(m);
 *
 * Errors: every function that can fail returns an hm_status; hm_last_error() holds the message
 * (file, tensor, field, what was expected) of the calling thread's last error. No function calls
 * exit() or prints unless asked to (hm_log_set_level).
 *
 * Ownership and threads: a model is immutable after load and may be shared by any number of
 * contexts and threads; it must outlive them. A context (KV cache, scratch, thread pool) is
 * driven by one thread at a time. A tokenizer is immutable and thread-safe. A sampler is one
 * sequence's state. Every *_free accepts NULL. Strings and arrays returned through out-pointers
 * are malloc'd and belong to the caller (free()) unless said otherwise. */
#ifndef HMOE_H
#define HMOE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HMOE_VERSION_MAJOR 0
#define HMOE_VERSION_MINOR 1
#define HMOE_VERSION_PATCH 0

/* ---- status -------------------------------------------------------------------------------- */

/* Every library function that can fail returns an hm_status. HM_OK is 0; every other value is an
 * error class. The detailed message (file, field, expected value) of the most recent error on the
 * calling thread is available from hm_last_error(). */
typedef enum hm_status {
    HM_OK = 0,
    HM_ERR_INVALID_ARG, /* a caller passed a bad value (NULL, out of range, wrong shape) */
    HM_ERR_NO_MEMORY,   /* an allocation failed or a size computation overflowed */
    HM_ERR_IO,          /* open/read/mmap/stat failed (errno text is in the message) */
    HM_ERR_FORMAT,      /* a file or request is malformed, truncated or inconsistent */
    HM_ERR_UNSUPPORTED, /* valid input that this build or this machine cannot handle */
    HM_ERR_NOT_FOUND,   /* a named file, tensor, key or device does not exist */
    HM_ERR_SYSTEM,      /* an OS facility failed (threads, affinity, syscalls) */
    HM_ERR_DEVICE,      /* the GPU runtime reported an error */
    HM_ERR_INTERNAL,    /* a check of our own failed: a bug in hmoe */
    HM_ERR_NUMERIC,     /* a computation gave NaN or inf (NaN/inf in weights or inputs) */
    HM_STATUS_COUNT
} hm_status;

/* Short, static, human-readable name of a status ("invalid argument", ...). Never NULL. */
const char *hm_status_str(hm_status st);

/* Detailed message of the last error set on this thread ("" when none). Valid until the next
 * error on the same thread. */
const char *hm_last_error(void);

/* "0.1.0" */
const char *hm_version(void);

/* ---- logging ------------------------------------------------------------------------------- */

/* Lines go to stderr at or above the level; the default comes from HMOE_LOG
 * (debug|info|warn|error|off), else warn. */
typedef enum hm_log_level {
    HM_LOG_DEBUG = 0,
    HM_LOG_INFO = 1,
    HM_LOG_WARN = 2,
    HM_LOG_ERROR = 3,
    HM_LOG_OFF = 4,
} hm_log_level;

void hm_log_set_level(hm_log_level level);
hm_log_level hm_log_get_level(void);
void hm_log(hm_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- model --------------------------------------------------------------------------------- */

typedef struct hm_model hm_model;

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

/* Opens path: a .gguf file or a Hugging Face directory (or its config.json). Every tensor's
 * presence, type and shape is checked before any weight is read; errors name the file and the
 * tensor or key that is missing, mis-shaped or of an unsupported type. params may be NULL
 * (defaults). On failure *out is NULL. */
hm_status hm_model_load(const char *path, hm_model **out);
hm_status hm_model_load_ex(const char *path, const hm_model_params *params, hm_model **out);
void hm_model_free(hm_model *m);
/* true when the weights were copied out of the file (HM_LOAD_COPY or AUTO chose to) */
bool hm_model_copied(const hm_model *m);
int32_t hm_model_n_vocab(const hm_model *m);
int hm_model_n_layers(const hm_model *m);
int hm_model_n_ctx_train(const hm_model *m);  /* max_position_embeddings / context_length */
const char *hm_model_arch(const hm_model *m); /* as the source spells it ("qwen3_moe") */

/* ---- context: KV cache + forward ----------------------------------------------------------- */

typedef struct hm_ctx hm_ctx;

typedef enum hm_repack_mode {
    HM_REPACK_AUTO = 0, /* repack when the copy fits in the memory left (see hm_ctx_create) */
    HM_REPACK_OFF,      /* prefill converts the experts' weights to int8 tiles on every batch */
    HM_REPACK_ON, /* always repack (refused with the numbers when the memory cannot hold it) */
} hm_repack_mode;

/* Where a context runs the model. */
typedef enum hm_device {
    HM_DEVICE_AUTO = 0, /* the GPU when one is present and the model has kernels there, else
                           the CPU; the environment's HMOE_DEVICE=cpu|cuda decides instead */
    HM_DEVICE_CPU,      /* the CPU: the expert engine and this machine's kernels */
    HM_DEVICE_CUDA,     /* GPU hm_ctx_params.gpu, with as many routed experts as it holds (the
                           others on the CPU's expert engine: the hybrid placement) */
} hm_device;

/* Which routed experts a hybrid context keeps on the GPU (hm_ctx_params.placement). */
typedef enum hm_place_strategy {
    HM_PLACE_UNIFORM = 0, /* the same count in every layer, spread over the expert indices */
    HM_PLACE_FRONT,       /* whole layers from the first (front-loading) */
    HM_PLACE_RANDOM,      /* uniform's counts, experts drawn with place_seed */
    HM_PLACE_FREQUENCY,   /* the most activated (expert_counts, from `hmoe profile`) */
    HM_PLACE_COUNT
} hm_place_strategy;

#define HM_GPU_EXPERTS_FIT     (-1)
#define HM_PREFILL_STREAM_AUTO 0
#define HM_PREFILL_STREAM_OFF  (-1)

typedef struct hm_ctx_params {
    hm_device device;
    int gpu; /* HM_DEVICE_CUDA: the GPU's index */
    /* HM_DEVICE_CUDA is hybrid: attention, router, dense layers, embedding and output on the GPU,
     * and of the routed experts gpu_experts per layer; the others run on the CPU's expert engine,
     * overlapped with the GPU's. HM_GPU_EXPERTS_FIT (the default) keeps as many as gpu_mem holds
     * once the rest of the model, the KV cache and scratch are placed (all of them when they
     * fit); 0 keeps none; N keeps N per layer (refused, with the numbers, when they do not fit).
     * hm_ctx_placement says what was chosen. */
    int gpu_experts;
    uint64_t gpu_mem;            /* bytes the context may take on the GPU; 0 = what is free */
    hm_place_strategy placement; /* which experts, and under a budget how many per layer */
    uint64_t place_seed;         /* HM_PLACE_RANDOM */
    const char *expert_counts;   /* HM_PLACE_FREQUENCY: the file `hmoe profile` writes */
    /* "REGEX=cuda" or "REGEX=cpu": a layer any of whose expert tensor names
     * (blk.L.ffn_{gate,up,down}_exps.weight) the expression is found in has all its experts
     * there; later rules win (llama.cpp's -ot, KT's rule files) */
    const char *const *place_rules;
    int n_place_rules;
    int n_threads; /* 0 = one per physical core */
    int n_ctx;     /* positions per sequence; 0 = min(max_position_embeddings, 4096) */
    int n_seq;     /* sequences (KV cache slots); 0 = 1 */
    int n_batch;   /* most tokens per hm_ctx_decode call; 0 = 512 */
    bool no_amx;   /* never use AMX tiles (exact kernels only) */
    bool kv_f16;   /* KV cache in IEEE half: half the memory, ~1e-3 relative rounding */
    /* HM_DEVICE_CUDA: the non-expert weights (attention, router, dense layers, shared experts,
     * embedding, output) expanded to BF16 on the GPU, batches through cuBLAS's BF16 tensor-core
     * GEMM with the activations rounded to BF16; routed experts stay in their own type
     * (--gpu-dtype bf16). Off: weights in the model's types, batches in float. */
    bool gpu_bf16;
    /* HM_DEVICE_CUDA with routed experts on the CPU: of each token's CPU experts of a layer, the
     * defer lowest-weighted are finished while the next layer runs and join its sum instead
     * (--defer K; expert deferral: the CPU's work overlaps the GPU's; the logits change, see
     * bench/RESULTS.md). 0 (the default): off; never past a layer without CPU experts. */
    int defer;
    /* HM_DEVICE_CUDA with routed experts on the CPU: layerwise prefill. A batch of at least this
     * many tokens streams each layer's CPU experts to the GPU (double-buffered, the copy of one
     * layer overlapping the compute of the one before) and computes them there instead of
     * handing them to the CPU. HM_PREFILL_STREAM_AUTO (0, the default): the threshold at which
     * the copy of a layer's CPU experts takes as long as the CPU would, from both measured when
     * the context is made; HM_PREFILL_STREAM_OFF: never (--gpu-prefill-threshold). */
    int gpu_prefill_threshold;
    /* HM_DEVICE_CUDA with routed experts on both sides of a layer: the GPU counts each layer's
     * expert activations; every few steps the hottest CPU expert of the layer where it gains
     * most swaps places with that layer's coldest GPU expert (--dynamic-experts). The copy goes
     * to a spare GPU slot on a second stream while steps run; the swap takes effect at the
     * first step after it landed. Experts with biases do not swap. */
    bool dynamic_experts;
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
     * the weights in that node's memory; the partial outputs are summed. 0 = auto (one slice per
     * node when the machine has several, each node getting an equal share of the threads), 1 =
     * off, N >= 2 = N slices (emulated with an even split of the threads where the machine has
     * not N nodes). A split the expert shapes do not allow falls back to none, with a warning. */
    int numa;
    /* the slices' weight copies: AUTO when they fit the memory budget of `repack` (checked
     * first: decode reads them), ON always, OFF never (the slices then read the model's
     * pages wherever they are) */
    hm_repack_mode numa_copy;
} hm_ctx_params;

hm_ctx_params hm_ctx_default_params(void);
hm_status hm_ctx_create(const hm_model *m, const hm_ctx_params *p, hm_ctx **out);
void hm_ctx_free(hm_ctx *c);

int hm_ctx_n_batch(const hm_ctx *c);
int hm_ctx_n_threads(const hm_ctx *c);
hm_device hm_ctx_device(const hm_ctx *c); /* where it runs: HM_DEVICE_AUTO resolved */
int hm_ctx_n_ctx(const hm_ctx *c);
int hm_ctx_n_seq(const hm_ctx *c);
int32_t hm_ctx_n_vocab(const hm_ctx *c);        /* the model's: a row of logits */
size_t hm_ctx_repacked_bytes(const hm_ctx *c);  /* the int8 copies (experts, dense), 0: none */
int hm_ctx_numa_slices(const hm_ctx *c);        /* the experts' slices (1: none) */
size_t hm_ctx_numa_copy_bytes(const hm_ctx *c); /* the slices' weight copies, 0: none */
int hm_ctx_seq_len(const hm_ctx *c, int seq);   /* positions already in the cache */
/* The hybrid placement as a line ("24 of 128 routed experts per layer on the GPU (...)"); for a
 * CPU context "cpu". */
void hm_ctx_placement(const hm_ctx *c, char *buf, size_t cap);
/* The share of the routed experts' weight bytes a context keeps on the GPU: 1 when all of them
 * (or the model has none) are there, 0 for a CPU context or all on the CPU. */
double hm_ctx_gpu_expert_share(const hm_ctx *c);
/* Routed-expert activations counted by the CPU backend since the context was made: out
 * [n_layers][n_experts] (n = their product). HM_ERR_INVALID_ARG when n differs. */
hm_status hm_ctx_expert_counts(const hm_ctx *c, uint64_t *out, size_t n);
/* Writes them as the expert-count file hm_ctx_params.expert_counts reads. */
hm_status hm_ctx_write_expert_counts(const hm_ctx *c, const char *path);
/* Forgets a sequence's cache (its next token is position 0). */
void hm_ctx_seq_reset(hm_ctx *c, int seq);
/* Keeps the first n positions of a sequence's cache (n <= hm_ctx_seq_len): its next token is
 * position n. A prompt that shares a prefix with what a sequence holds reuses that prefix. */
hm_status hm_ctx_seq_truncate(hm_ctx *c, int seq, int n);

/* Runs n tokens (n <= n_batch); token i belongs to sequence seq[i] (NULL: all sequence 0) and
 * takes the next position of that sequence, so tokens of one sequence go in order. logits, when
 * not NULL, receives [count][vocab] floats: one row per token whose want[i] is set (want NULL:
 * every token), in batch order. On a bad argument nothing is added to any cache. NaN or inf in a
 * wanted row (NaN in the weights) fails with HM_ERR_NUMERIC naming the token. */
hm_status hm_ctx_decode(hm_ctx *c, const int32_t *tokens, const int32_t *seq, int n,
                        const uint8_t *want, float *logits);
/* As hm_ctx_decode, on a GPU context, with each wanted row's sampling candidates in place of its
 * logits: the row's k (1..HM_SAMPLER_MAX_CANDIDATES, hm_sampler_candidates) largest logits, ties
 * to the lower token, in ascending token order, into ids and vals ([wanted rows][k]); only those
 * cross from the GPU. HM_ERR_NUMERIC when a wanted row holds NaN or +inf; HM_ERR_UNSUPPORTED on
 * a CPU context (its logits are in host memory already: hm_ctx_decode). */
hm_status hm_ctx_decode_top(hm_ctx *c, const int32_t *tokens, const int32_t *seq, int n,
                            const uint8_t *want, int k, int32_t *ids, float *vals);

/* ---- model information and performance counters --------------------------------------------- */

typedef struct hm_model_info {
    const char *arch; /* as the source spells it ("qwen3_moe") */
    int n_layers, hidden, n_experts, n_experts_used, moe_inter;
    int32_t n_vocab;
    const char *expert_type; /* the last layer's routed experts' weight type ("Q4_K") */
    /* the weights one decode token reads: everything but the routed experts (attention, router,
     * dense MLPs, output layer), and the top-k routed experts of every MoE layer */
    uint64_t decode_dense_bytes, decode_expert_bytes;
} hm_model_info;

void hm_model_get_info(const hm_model *m, hm_model_info *out);

/* The parts of the forward pass the context times. */
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
#define HM_PERF_MOE_PHASES 16
/* The phases of latent attention (HM_OP_MLA) the context times: the q / q_a / kv_a projections
 * (and q_b), the cache rows' norm, rope and store, the queries absorbed into the latent, the
 * positions walked, and the values' products (the split decode's merge). Where one job does
 * several (a batch's per-item walk), its time is the positions'. */
enum { HM_MLA_PROJ = 0, HM_MLA_STORE, HM_MLA_ABSORB, HM_MLA_WALK, HM_MLA_VALUES, HM_MLA_PHASES };

/* What a context measured since it was made or since hm_ctx_perf_reset. */
typedef struct hm_ctx_perf {
    double part_s[HM_PROF_COUNT];  /* time per part */
    double alone_s[HM_PROF_COUNT]; /* of it, the calling thread outside the pool's jobs */
    double wait_s[HM_PROF_COUNT];  /* of it, job dispatch and waiting for the slowest thread */
    uint64_t pool_jobs;            /* the thread pool's jobs, */
    double pool_run_s, pool_own_s; /* their time, and the calling thread's own share of it */
    /* prompt batches (more than 4 tokens): the expert engines' phases summed over layers, and
     * per (layer, batch): tokens, distinct experts used, tokens of the busiest expert */
    int n_moe_phases;
    double moe_phase_s[HM_PERF_MOE_PHASES];
    const char *moe_phase_name[HM_PERF_MOE_PHASES];
    uint64_t moe_batches;
    double moe_tokens, moe_active, moe_busiest;
    /* latent attention (MLA models; zeros elsewhere): each phase's time summed over layers */
    double mla_phase_s[HM_MLA_PHASES];
    /* hybrid (HM_DEVICE_CUDA with routed experts on the CPU): the GPU waiting for the CPU's
     * experts, the CPU experts' span from submit to done (where the GPU did not wait, up to the
     * wait: an upper bound), layers handed off, and of them those the GPU waited for */
    double hyb_gpu_wait_s, hyb_cpu_span_s;
    uint64_t hyb_layers, hyb_blocked;
    /* layerwise prefill: layers whose CPU experts were streamed to the GPU, and their bytes */
    uint64_t hyb_streamed, hyb_stream_bytes;
    uint64_t hyb_swaps; /* --dynamic-experts: experts swapped between the GPU and the CPU */
} hm_ctx_perf;

const char *hm_prof_name(int part);       /* "embedding", "norms+residual", ... */
const char *hm_mla_phase_name(int phase); /* "projections", "cache", ... */
void hm_ctx_perf_get(hm_ctx *c, hm_ctx_perf *out);
void hm_ctx_perf_reset(hm_ctx *c);

/* The machine's streaming read bandwidth as the benchmarks' rooflines take it: passes reads of
 * max(1 GiB, 16 x L3) by every physical core; median and best pass in 1e9 bytes/s. */
hm_status hm_measure_read_bandwidth(int passes, double *median_gbs, double *best_gbs);
/* The memory bandwidth of GPU `gpu` in 1e9 bytes/s (a device-to-device copy, read plus written,
 * best of 5): the decode bound of --device cuda. HM_ERR_UNSUPPORTED in a build without CUDA. */
hm_status hm_measure_gpu_bandwidth(int gpu, double *gbs);

/* ---- tokenizer ----------------------------------------------------------------------------- */

typedef struct hm_tokenizer hm_tokenizer;

#define HM_TOKEN_NONE (-1)

/* Encoding flags. */
enum {
    HM_TOK_ADD_SPECIAL = 1u << 0,   /* add BOS / EOS where the model says so (add_bos_token...) */
    HM_TOK_PARSE_SPECIAL = 1u << 1, /* text of control tokens ("<|im_end|>") becomes that token;
                                       user-defined tokens are always matched, as llama.cpp does */
};

/* Decoding flags. */
enum {
    HM_DETOK_SPECIAL = 1u << 0,         /* render control/unknown tokens as their text ("<s>") */
    HM_DETOK_STRIP_SPACE = 1u << 1,     /* SPM: drop the dummy-prefix space of the first piece */
    HM_DETOK_REPLACE_INVALID = 1u << 2, /* incremental decoder: invalid UTF-8 -> U+FFFD */
};

/* A model's tokenizer: path is a GGUF file (its tokenizer.ggml.* keys), a Hugging Face directory
 * (tokenizer.json, vocab.json + merges.txt, tokenizer.model; tokenizer_config.json's special
 * tokens) or one of those files. HM_ERR_NOT_FOUND when the model has none. */
hm_status hm_tokenizer_load(const char *path, hm_tokenizer **out);
void hm_tokenizer_free(hm_tokenizer *tok);
/* text[0..len) to ids; *ids is malloc'd (NULL when *n_out is 0). */
hm_status hm_tokenizer_encode_alloc(const hm_tokenizer *tok, const char *text, size_t len,
                                    unsigned flags, int32_t **ids, size_t *n_out);
/* ids to text (*text malloc'd, NUL-terminated; *len without the NUL) */
hm_status hm_tokenizer_decode(const hm_tokenizer *tok, const int32_t *ids, size_t n, unsigned flags,
                              char **text, size_t *len);
uint32_t hm_tokenizer_n_vocab(const hm_tokenizer *tok);
int32_t hm_tokenizer_bos(const hm_tokenizer *tok); /* HM_TOKEN_NONE when the model has none */
int32_t hm_tokenizer_eos(const hm_tokenizer *tok);
int32_t hm_tokenizer_eot(const hm_tokenizer *tok); /* end of turn (<|im_end|>, <|eot_id|>) */
/* true for the tokens that end a generation (eos, eot, eom and the model's other end markers) */
bool hm_tokenizer_is_eog(const hm_tokenizer *tok, int32_t id);

/* Incremental decoding: text as tokens arrive, holding back bytes of an unfinished UTF-8
 * character. push points *text at the bytes completed by id and sets *len (valid until the next
 * call); flush returns what is held. */
typedef struct hm_detok hm_detok;
hm_status hm_detok_new(const hm_tokenizer *tok, unsigned flags, hm_detok **out);
hm_status hm_detok_push(hm_detok *d, int32_t id, const char **text, size_t *len);
void hm_detok_flush(hm_detok *d, const char **text, size_t *len);
void hm_detok_free(hm_detok *d);

/* ---- chat template ------------------------------------------------------------------------- */

/* Renders messages through the chat template of the model at model_path (GGUF
 * tokenizer.chat_template, or an HF directory's tokenizer_config.json / chat_template.jinja) as
 * transformers' apply_chat_template does. messages_json: a JSON array of {"role", "content", ...};
 * tools_json: a JSON array or NULL; kwargs_json: a JSON object of extra template variables
 * ({"enable_thinking": false}) or NULL. HM_ERR_NOT_FOUND when the model has no template. */
hm_status hm_chat_render(const char *model_path, const char *messages_json, const char *tools_json,
                         const char *kwargs_json, bool add_generation_prompt, char **out,
                         size_t *out_len);

/* ---- sampler ------------------------------------------------------------------------------- */

/* Temperatures below this sample greedily. */
#define HM_SAMPLER_GREEDY_TEMP 1e-6f

/* The chain: penalties -> greedy or (top-k -> temperature -> top-p -> min-p -> seeded draw);
 * src/engine/sampler.h gives each step's exact definition. */
typedef struct hm_sampler_params {
    float temperature;        /* >= 0; below HM_SAMPLER_GREEDY_TEMP: greedy */
    int top_k;                /* >= 0; 0 = off */
    float top_p;              /* (0, 1]; 1 = off */
    float min_p;              /* [0, 1]; 0 = off */
    float repetition_penalty; /* > 0; 1 = off. HF / llama.cpp: positive logits divided, negative
                                 ones multiplied */
    float presence_penalty;   /* finite; 0 = off. OpenAI: subtracted once if the token occurred */
    float frequency_penalty;  /* finite; 0 = off. OpenAI: subtracted once per occurrence */
    int penalty_last_n;       /* >= -1: how many of the latest accepted tokens the penalties see;
                                 -1 = all since create/reset, 0 = none */
    uint64_t seed;            /* of the draw's random stream */
} hm_sampler_params;

typedef struct hm_sampler hm_sampler;

/* temperature 1, top_k 0, top_p 1, min_p 0, no penalties (window 64), seed 0 */
hm_sampler_params hm_sampler_default_params(void);
hm_status hm_sampler_create(const hm_sampler_params *params, int32_t n_vocab, hm_sampler **out);
void hm_sampler_free(hm_sampler *s);
/* Records a token (prompt or generated) in the penalty window. */
hm_status hm_sampler_accept(hm_sampler *s, int32_t token);
/* One token from logits[n_vocab] into *out; does not record it (call hm_sampler_accept). */
hm_status hm_sampler_sample(hm_sampler *s, const float *logits, int32_t *out);
/* Forgets the accepted tokens and restarts the random stream from the seed. */
void hm_sampler_reset(hm_sampler *s);
/* Sampling from candidates selected on the GPU (hm_ctx_decode_top): how many the next sample
 * needs (1 greedy, top_k with top-k on and no penalty applying, 0 = every logit), and the sample
 * from them: the same token and random step as hm_sampler_sample on the whole row. */
#define HM_SAMPLER_MAX_CANDIDATES 256
int hm_sampler_candidates(const hm_sampler *s);
hm_status hm_sampler_sample_candidates(hm_sampler *s, const int32_t *ids, const float *vals,
                                       int32_t k, int32_t *out);

/* ---- generation ---------------------------------------------------------------------------- */

typedef struct hm_generate_params {
    int n_predict;   /* most tokens to generate (>= 0) */
    int seq;         /* the context's sequence the prompt continues */
    bool ignore_eos; /* do not stop at the tokenizer's end-of-generation tokens */
} hm_generate_params;

hm_generate_params hm_generate_default_params(void); /* 128 tokens, sequence 0 */

typedef struct hm_generate_stats {
    int n_prompt, n_generated;
    double prompt_s; /* prompt processing, up to the first token's logits */
    double gen_s;    /* after that: the decode steps (n_generated - 1 of them) */
    bool stopped;    /* the callback asked to stop */
    bool eog;        /* an end-of-generation token ended it */
} hm_generate_stats;

/* Called once per generated token with its id and the text it completes (tok given; empty while
 * a UTF-8 character is unfinished; NULL without a tokenizer), then once more with id
 * HM_TOKEN_NONE and the held-back tail, if any. Returning false stops the generation. */
typedef bool (*hm_token_fn)(int32_t id, const char *text, size_t len, void *user);

/* Runs the prompt (in batches of the context's n_batch, only the last position's logits kept)
 * after what sequence p->seq already holds, then samples, reports and feeds back up to
 * p->n_predict tokens. The prompt and the generated tokens are accepted into the sampler's
 * penalty window. tok may be NULL (no text, no end-of-generation stop). stats may be NULL. */
hm_status hm_generate(hm_ctx *c, hm_sampler *smp, const hm_tokenizer *tok, const int32_t *prompt,
                      int n_prompt, const hm_generate_params *p, hm_token_fn fn, void *user,
                      hm_generate_stats *stats);

#ifdef __cplusplus
}
#endif
#endif /* HMOE_H */
