/* names.h - which Hugging Face tensor each llama.cpp GGUF tensor comes from, per architecture:
 * one table shared by the converter (HF -> GGUF) and the loader (a model bound by GGUF names
 * from an HF directory). Layer tensors are named after "blk.N." / "model.layers.N."; routed
 * experts are one HF tensor per expert ("%u" in the pattern) or transformers 5's fused form. */
#ifndef HM_MODEL_NAMES_H
#define HM_MODEL_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/hparams.h"

enum {
    HM_MAP_EXPERTS = 1,   /* one HF tensor per expert: "%u" in hf is the expert index */
    HM_MAP_PERMUTE_Q = 2, /* llama.cpp's LlamaModel.permute of q rows (n_heads) */
    HM_MAP_PERMUTE_K = 4, /* the same for k (n_kv_heads) */
    /* MLA: one head's slab of kv_b_proj [heads * (nope + v)][kv_lora], split as llama.cpp's
     * DeepseekV2Model.modify_tensors does: attn_k_b takes the nope rows transposed, attn_v_b
     * the v rows (converter only: the loader reads kv_b_proj as attn_kv_b) */
    HM_MAP_KV_B_K = 8,
    HM_MAP_KV_B_V = 16,
    /* gpt-oss's experts (3-D) or their biases (2-D) from the fused gate_up_proj / down_proj, as
     * released (MXFP4 blocks and scales) or as transformers saves them (arch/gptoss.h);
     * `part` is the projection (HM_GPTOSS_GATE, _UP, _DOWN) */
    HM_MAP_GPTOSS = 32,
};

typedef struct hm_name_map {
    const char *gguf; /* after "blk.N." for layer tensors, else the whole name */
    const char *hf;   /* after "model.layers.N." for layer tensors, else the whole name */
    unsigned flags;
    /* transformers 5 stores all experts in one [n_expert, n_parts * rows, cols] parameter; this
     * tensor is row block `part` of each expert's slice */
    const char *fused;
    uint32_t part, n_parts;
} hm_name_map;

/* Rows several architectures' tables share (transformers names them alike). */
/* grouped-query attention: q/k/v/o, their biases, per-head q/k norms (a model has the ones its
 * tensor plan asks for) */
#define HM_NAMES_GQA                                                                               \
    {"attn_q.weight", "self_attn.q_proj.weight", 0, NULL, 0, 0},                                   \
        {"attn_k.weight", "self_attn.k_proj.weight", 0, NULL, 0, 0},                               \
        {"attn_v.weight", "self_attn.v_proj.weight", 0, NULL, 0, 0},                               \
        {"attn_output.weight", "self_attn.o_proj.weight", 0, NULL, 0, 0},                          \
        {"attn_q.bias", "self_attn.q_proj.bias", 0, NULL, 0, 0},                                   \
        {"attn_k.bias", "self_attn.k_proj.bias", 0, NULL, 0, 0},                                   \
        {"attn_v.bias", "self_attn.v_proj.bias", 0, NULL, 0, 0},                                   \
        {"attn_q_norm.weight", "self_attn.q_norm.weight", 0, NULL, 0, 0}, {                        \
        "attn_k_norm.weight", "self_attn.k_norm.weight", 0, NULL, 0, 0                             \
    }
/* the router and the routed experts under mlp.: one tensor per expert (transformers 4.x) or the
 * fused gate_up_proj / down_proj (5.x) */
#define HM_NAMES_MLP_EXPERTS                                                                       \
    {"ffn_gate_inp.weight", "mlp.gate.weight", 0, NULL, 0, 0},                                     \
        {"ffn_gate_exps.weight",                                                                   \
         "mlp.experts.%u.gate_proj.weight",                                                        \
         HM_MAP_EXPERTS,                                                                           \
         "mlp.experts.gate_up_proj",                                                               \
         0,                                                                                        \
         2},                                                                                       \
        {"ffn_up_exps.weight",                                                                     \
         "mlp.experts.%u.up_proj.weight",                                                          \
         HM_MAP_EXPERTS,                                                                           \
         "mlp.experts.gate_up_proj",                                                               \
         1,                                                                                        \
         2},                                                                                       \
    {                                                                                              \
        "ffn_down_exps.weight", "mlp.experts.%u.down_proj.weight", HM_MAP_EXPERTS,                 \
            "mlp.experts.down_proj", 0, 1                                                          \
    }
/* DeepSeek's and GLM's ungated shared experts, and their routers' correction bias */
#define HM_NAMES_SHARED_EXPERTS                                                                    \
    {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias", 0, NULL, 0, 0},                       \
        {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight", 0, NULL, 0, 0},           \
        {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight", 0, NULL, 0, 0}, {             \
        "ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight", 0, NULL, 0, 0              \
    }
/* the dense MLP of the dense layers */
#define HM_NAMES_DENSE_MLP                                                                         \
    {"ffn_gate.weight", "mlp.gate_proj.weight", 0, NULL, 0, 0},                                    \
        {"ffn_up.weight", "mlp.up_proj.weight", 0, NULL, 0, 0}, {                                  \
        "ffn_down.weight", "mlp.down_proj.weight", 0, NULL, 0, 0                                   \
    }

typedef struct hm_arch_names {
    hm_arch arch;
    const hm_name_map *layer;
    size_t n_layer;
} hm_arch_names;

/* The table of arch (its descriptor's, src/model/arch/), NULL when there is none. */
const hm_arch_names *hm_arch_names_find(hm_arch arch);
/* The entry of a GGUF name; *layer is set for "blk.N." names (else UINT32_MAX). NULL if the name
 * is not in the table. */
const hm_name_map *hm_name_map_find(const hm_arch_names *a, const char *gguf, uint32_t *layer);
/* HF name from a pattern: "model.layers.<layer>." (layer != UINT32_MAX) + pattern with "%u"
 * replaced by expert. */
void hm_hf_name(const char *pattern, uint32_t layer, uint32_t expert, char *out, size_t cap);

#endif
