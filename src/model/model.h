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
    const float *bq, *bk, *bv; /* q/k/v biases (qwen2moe) or NULL */
    const float *bo;           /* o_proj bias (gpt-oss) or NULL */
    const float *sinks;        /* [n_heads] attention sink logits (gpt-oss) or NULL */
    const float *router_b;     /* [n_experts] router bias (gpt-oss) or NULL */
    /* MLA (deepseek2: kv_lora_rank > 0): q = wq xn, or wq_b rms(wq_a xn) * q_a_norm with q_lora;
     * [c, k_pe] = wkv_a xn, c = rms(c) * kv_a_norm; per head h k_b[h] [nope][kv_lora] (the key's
     * up-projection, absorbed into q) and v_b[h] [kv_lora][v_head] (the value's, transposed),
     * copies owned by the model: F32 and F16 sources kept in their type, others as BF16 */
    hm_matrix wq_a, wq_b, wkv_a;
    const float *q_a_norm, *kv_a_norm;
    const void *k_b, *v_b;
    uint32_t k_b_type, v_b_type; /* HM_TYPE_F32, HM_TYPE_F16 or HM_TYPE_BF16 */
    /* a GGUF's split attn_k_b [heads * kv_lora][nope] and attn_v_b [heads * v_head][kv_lora] as
     * the file holds them, where both are quantized types the CPU kernels multiply (rows 0:
     * not): the CPU's latent attention multiplies these, half the bytes of the BF16 copies */
    hm_matrix k_bq, v_bq;
    bool moe;
    hm_matrix router;        /* [n_experts][hidden] */
    const float *exp_bias;   /* [n_experts] e_score_correction_bias (sigmoid routers), or NULL */
    hm_moe_expert *experts;  /* [n_experts] views */
    uint32_t expert_type[3]; /* gate, up, down */
    hm_matrix ffn_gate, ffn_up, ffn_down; /* dense layers */
    hm_matrix sh_gate, sh_up, sh_down;    /* the shared expert of a MoE layer (rows 0: none) */
    const float *sh_inp;                  /* [hidden] its sigmoid gate (qwen2moe), or NULL */
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
    hm_large copy;          /* the weights' copy (HM_LOAD_COPY), else empty */
    size_t n_owned, cap_owned;
    bool checking; /* load's first pass: every tensor's presence, type and shape, nothing read */
} hm_model;

/* hm_load_mode, hm_model_params and the model's functions are public (hmoe.h). */

/* MLA's score scale: qk_head_dim^-0.5, times mscale^2 under YaRN with mscale_all_dim (every
 * backend's latent attention uses it; mla.c) */
float hm_mla_scale(const hm_hparams *hp);
/* floats of the scratch of the CPU's latent attention on nth threads (mla.c) */
size_t hm_mla_scratch_floats(const hm_hparams *hp, size_t kv_dim, int nth);
/* floats of its rows for batches of up to n_batch tokens (mla.c) */
size_t hm_mla_rows_floats(const hm_hparams *hp, size_t kv_dim, int n_batch);
/* the most bytes of a quantized activation row that the CPU's latent attention (mla.c) holds
 * for the split attn_k_b / attn_v_b products: larger ones take the copies (model.c) */
size_t hm_mla_act_room(const hm_hparams *hp);
/* Layer il's k_b / v_b copies (hm_layer's layouts, 16-bit) built from the split quantized
 * tensors it has bound (k_bq, v_bq), in malloc'd memory the caller frees: for a backend that
 * reads copies where the model keeps none (the CPU multiplies the file's tensors). */
hm_status hm_model_mla_copies(const hm_model *m, int il, void **k_b, uint32_t *kt, void **v_b,
                              uint32_t *vt);

/* ---- context: KV cache + forward ------------------------------------------------------------ */

/* hm_repack_mode, hm_ctx_params and the context's functions are public (hmoe.h). */

/* Time per part of the forward pass, the pool's jobs and the experts' phases: hm_ctx_perf_get
 * (hmoe.h). */

#endif
