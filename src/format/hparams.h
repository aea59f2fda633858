/* hparams.h - model hyper-parameters in one struct, filled from a Hugging Face config.json
 * (transformers 4.x and 5.x spellings) or from GGUF metadata (llama.cpp key names). */
#ifndef HM_FORMAT_HPARAMS_H
#define HM_FORMAT_HPARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define HM_MAX_LAYERS 512

typedef enum hm_arch {
    HM_ARCH_UNKNOWN = 0,
    HM_ARCH_QWEN3MOE,  /* HF qwen3_moe        GGUF "qwen3moe" */
    HM_ARCH_QWEN2MOE,  /* HF qwen2_moe        GGUF "qwen2moe" */
    HM_ARCH_MIXTRAL,   /* HF mixtral          GGUF "llama" with llama.expert_count > 0 */
    HM_ARCH_DEEPSEEK2, /* HF deepseek_v2 / deepseek_v3 / kimi_k2   GGUF "deepseek2" */
    HM_ARCH_GPTOSS,    /* HF gpt_oss          GGUF "gpt-oss" */
    HM_ARCH_GLM4MOE,   /* HF glm4_moe         GGUF "glm4moe" */
    HM_ARCH_COUNT
} hm_arch;

typedef enum hm_rope_type {
    HM_ROPE_NONE = 0, /* no scaling */
    HM_ROPE_LINEAR,   /* positions divided by rope_factor */
    HM_ROPE_DYNAMIC,  /* dynamic NTK: the base grows with the sequence past rope_orig_ctx */
    HM_ROPE_YARN,     /* YaRN, with DeepSeek's mscale terms */
    HM_ROPE_LLAMA3,   /* Llama 3.1: low frequencies divided by rope_factor, a smooth ramp between */
} hm_rope_type;

typedef enum hm_gating {
    HM_GATING_SOFTMAX = 0, /* softmax over all experts, then top-k */
    HM_GATING_SIGMOID,     /* DeepSeek-V3: sigmoid scores (+ e_score_correction_bias for choice) */
    HM_GATING_SOFTMAX_TOPK /* gpt-oss: top-k on logits, softmax over the k chosen */
} hm_gating;

typedef enum hm_ffn_act {
    HM_ACT_SILU = 0,   /* SwiGLU: silu(gate) * up */
    HM_ACT_GELU,       /* GeGLU */
    HM_ACT_SWIGLU_OAI, /* gpt-oss: clamp(gate, max=limit), clamp(up, -limit, limit),
                          gate * sigmoid(alpha * gate) * (up + 1) */
} hm_ffn_act;

typedef struct hm_hparams {
    hm_arch arch;
    char model_type[32]; /* as the source spelled it: HF model_type or GGUF architecture */

    /* trunk */
    uint32_t vocab_size;
    uint32_t hidden;         /* hidden_size / embedding_length */
    uint32_t n_layers;       /* transformer blocks (without MTP/nextn layers) */
    uint32_t n_nextn_layers; /* extra multi-token-prediction layers stored after n_layers */
    uint32_t max_ctx;        /* max_position_embeddings / context_length */
    float norm_eps;          /* rms_norm_eps */
    bool tie_embeddings;     /* lm_head shares token_embd */

    /* attention */
    uint32_t n_heads, n_kv_heads;
    uint32_t head_dim;       /* q/k head size (MLA: qk_nope + qk_rope) */
    uint32_t v_head_dim;     /* v head size (== head_dim except MLA) */
    bool qk_norm;            /* per-head RMSNorm of q and k (qwen3, glm4moe with use_qk_norm) */
    bool attn_bias;          /* q/k/v projections have biases (qwen2moe, gpt-oss, glm4moe) */
    bool attn_out_bias;      /* o projection bias (gpt-oss) */
    bool attn_sinks;         /* learned per-head sink logits (gpt-oss) */
    uint32_t sliding_window; /* 0 = none */
    uint8_t layer_sliding[HM_MAX_LAYERS]; /* 1 = this layer uses the sliding window */
    /* MLA (deepseek2) */
    uint32_t q_lora_rank; /* 0 = no q compression (V2-Lite) */
    uint32_t kv_lora_rank;
    uint32_t qk_rope_head_dim, qk_nope_head_dim;

    /* rotary embedding */
    float rope_theta;
    float partial_rotary; /* fraction of head_dim rotated (1.0 = all; glm4moe 0.5) */
    uint32_t rope_dim; /* rotated dims per head (head_dim * partial_rotary, or qk_rope_head_dim) */
    hm_rope_type rope_type;
    bool rope_interleaved;  /* rotate pairs (2i, 2i + 1), as llama.cpp's permuted q/k of LlamaModel
                               GGUFs need; else NeoX halves (i, i + rope_dim / 2) */
    float rope_factor;      /* scaling factor (linear, dynamic, yarn, llama3) */
    uint32_t rope_orig_ctx; /* original_max_position_embeddings (yarn, llama3);
                               max_position_embeddings (dynamic) */
    float rope_low_freq_factor, rope_high_freq_factor; /* llama3 */
    float yarn_beta_fast, yarn_beta_slow;
    float yarn_mscale, yarn_mscale_all_dim; /* deepseek yarn mscale terms (0 if absent) */
    float yarn_attn_factor;                 /* attention_factor when given explicitly, else 0 */
    bool yarn_no_truncate; /* gpt-oss "truncate": false: YaRN correction range not rounded
                              (false = floor/ceil it, transformers' default) */

    /* feed-forward */
    uint32_t ffn_inter;           /* dense MLP intermediate size (intermediate_size) */
    uint32_t n_experts;           /* routed experts (0: dense model) */
    uint32_t n_experts_used;      /* top-k */
    uint32_t moe_inter;           /* routed expert intermediate size */
    uint32_t n_shared_experts;    /* shared experts (deepseek: n_shared_experts; qwen2moe: 1) */
    uint32_t shared_inter;        /* total intermediate size of the shared expert block */
    bool shared_gate;             /* qwen2moe: sigmoid gate on the shared expert output */
    uint32_t first_k_dense;       /* deepseek/glm: first_k_dense_replace layers are dense */
    uint32_t decoder_sparse_step; /* qwen: MoE every N layers (1 = every layer) */
    uint8_t layer_dense[HM_MAX_LAYERS]; /* 1 = dense MLP in this layer (resolved from all rules) */
    bool norm_topk_prob;                /* renormalise the top-k weights to sum to 1 */
    hm_gating gating;
    float routed_scaling;         /* routed_scaling_factor (1.0 when absent) */
    uint32_t n_group, topk_group; /* group-limited routing (deepseek-v3): 0/0 = off */
    bool expert_bias;             /* routed experts have biases (gpt-oss) */
    bool router_bias;             /* router has a bias (gpt-oss) */
    bool score_correction_bias;   /* e_score_correction_bias present (sigmoid gating) */
    hm_ffn_act act;
    float swiglu_alpha, swiglu_limit; /* gpt-oss: 1.702, 7.0 */
} hm_hparams;

const char *hm_arch_name(hm_arch arch);      /* our name: "qwen3moe", "mixtral", ... */
const char *hm_arch_gguf_name(hm_arch arch); /* llama.cpp general.architecture value */

/* Parses a Hugging Face config.json (path to the file or to a directory holding it). Errors name
 * the file and the key (missing, wrong JSON type, out of range, inconsistent). */
hm_status hm_hparams_from_hf_config(const char *path, hm_hparams *out);
/* Same, from JSON text already in memory; `name` is used in error messages. */
hm_status hm_hparams_from_hf_json(const char *json, size_t len, const char *name, hm_hparams *out);

/* True when layer il has routed experts (false: dense MLP). */
static inline bool hm_hparams_layer_is_moe(const hm_hparams *hp, uint32_t il) {
    return hp->n_experts > 0 && il < HM_MAX_LAYERS && !hp->layer_dense[il];
}

/* Checks internal consistency (heads divide, top-k <= experts, layers <= HM_MAX_LAYERS, ...). */
hm_status hm_hparams_validate(const hm_hparams *hp, const char *name);

#endif
