/* arch.h - llama.cpp's GGUF layout of each supported architecture: which tensors a model has
 * (names, shapes, roles), the metadata keys that describe it, and hyper-parameters read back from
 * GGUF metadata. Adding an architecture means adding it here (and a forward pass in its file). */
#ifndef HM_MODEL_ARCH_H
#define HM_MODEL_ARCH_H

#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "format/hparams.h"

typedef enum hm_tensor_cat {
    HM_CAT_EMBED = 0, /* token embeddings */
    HM_CAT_OUTPUT,    /* lm_head */
    HM_CAT_ATTN,      /* attention projections, biases, sinks, q/k norms */
    HM_CAT_ROUTED,    /* routed experts (the part that can live on the CPU) */
    HM_CAT_SHARED,    /* shared experts */
    HM_CAT_DENSE,     /* dense MLP layers */
    HM_CAT_ROUTER,    /* expert router (+ bias / correction bias) */
    HM_CAT_NORM,      /* block and final norms */
    HM_CAT_OTHER,
    HM_CAT_COUNT
} hm_tensor_cat;

const char *hm_tensor_cat_name(hm_tensor_cat c);
/* Category of a tensor from its llama.cpp GGUF name or its Hugging Face name. */
hm_tensor_cat hm_tensor_cat_gguf(const char *name);
hm_tensor_cat hm_tensor_cat_hf(const char *name);

typedef enum hm_init {
    HM_INIT_WEIGHT = 0, /* random, std 0.5 / sqrt(fan_in) */
    HM_INIT_NORM,       /* all ones */
    HM_INIT_SMALL,      /* random, std 0.02 (biases, router, sinks, embeddings) */
} hm_init;

typedef struct hm_tensor_spec {
    char name[HM_GGUF_MAX_NAME + 1];
    uint32_t n_dims;
    uint64_t ne[HM_GGUF_MAX_DIMS];
    uint32_t type; /* hm_type */
    hm_tensor_cat cat;
    hm_init init;
} hm_tensor_spec;

typedef struct hm_plan_types {
    int experts; /* routed experts' type (hm_type) */
    int dense;   /* attention, dense MLP, shared experts, embeddings, output */
} hm_plan_types;

/* The type llama.cpp's quantizer falls back to when a row of ne0 elements is not a whole number of
 * `type` blocks (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K/IQ4_XS -> IQ4_NL, then F16).
 */
uint32_t hm_type_for_row(uint32_t type, uint64_t ne0);

/* Every tensor of the model in llama.cpp's order and shapes (ne[0] = contiguous dimension).
 * *out is malloc'd; free() it. */
hm_status hm_arch_tensor_plan(const hm_hparams *hp, const hm_plan_types *types,
                              hm_tensor_spec **out, size_t *n_out);

/* Writes the architecture's llama.cpp metadata keys (general.architecture, <arch>.*) for hp. */
hm_status hm_hparams_write_gguf(hm_gguf_writer *w, const hm_hparams *hp, const char *model_name);

/* Reads hyper-parameters from a GGUF's metadata (llama.cpp key names); dense/MoE layers are taken
 * from the tensors present when the file has them. Errors name the file and the key. */
hm_status hm_hparams_from_gguf(const hm_gguf *g, hm_hparams *out);

/* ---- presets (real models' shapes, for synth and benchmarks) ---- */
typedef struct hm_preset {
    const char *name; /* "qwen3-30b-a3b" */
    const char *description;
    const char *vocab_hint; /* preferred vocab GGUF file name (tokenizers/gguf*), or NULL */
    int default_experts_type;
    hm_hparams hp;
} hm_preset;

const hm_preset *hm_preset_find(const char *name);
size_t hm_preset_count(void);
const hm_preset *hm_preset_at(size_t i);

#endif
