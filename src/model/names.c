/* names.c - llama.cpp GGUF tensor names <-> Hugging Face names, per architecture (names.h). */
#include "model/names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const hm_name_map k_global[] = {
    {"token_embd.weight", "model.embed_tokens.weight", 0, NULL, 0, 0},
    {"output_norm.weight", "model.norm.weight", 0, NULL, 0, 0},
    {"output.weight", "lm_head.weight", 0, NULL, 0, 0},
};

/* qwen3_moe and qwen2_moe (llama.cpp Qwen2MoeModel / Qwen3MoeModel: no q/k permutation); the
 * tensor plan decides which of these a model has (biases, q/k norms, shared expert, dense). */
static const hm_name_map k_qwen_layer[] = {
    {"attn_norm.weight", "input_layernorm.weight", 0, NULL, 0, 0},
    {"ffn_norm.weight", "post_attention_layernorm.weight", 0, NULL, 0, 0},
    {"attn_q.weight", "self_attn.q_proj.weight", 0, NULL, 0, 0},
    {"attn_k.weight", "self_attn.k_proj.weight", 0, NULL, 0, 0},
    {"attn_v.weight", "self_attn.v_proj.weight", 0, NULL, 0, 0},
    {"attn_output.weight", "self_attn.o_proj.weight", 0, NULL, 0, 0},
    {"attn_q.bias", "self_attn.q_proj.bias", 0, NULL, 0, 0},
    {"attn_k.bias", "self_attn.k_proj.bias", 0, NULL, 0, 0},
    {"attn_v.bias", "self_attn.v_proj.bias", 0, NULL, 0, 0},
    {"attn_q_norm.weight", "self_attn.q_norm.weight", 0, NULL, 0, 0},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", 0, NULL, 0, 0},
    {"ffn_gate_inp.weight", "mlp.gate.weight", 0, NULL, 0, 0},
    {"ffn_gate_exps.weight", "mlp.experts.%u.gate_proj.weight", HM_MAP_EXPERTS,
     "mlp.experts.gate_up_proj", 0, 2},
    {"ffn_up_exps.weight", "mlp.experts.%u.up_proj.weight", HM_MAP_EXPERTS,
     "mlp.experts.gate_up_proj", 1, 2},
    {"ffn_down_exps.weight", "mlp.experts.%u.down_proj.weight", HM_MAP_EXPERTS,
     "mlp.experts.down_proj", 0, 1},
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", 0, NULL, 0, 0},
    {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", 0, NULL, 0, 0},
    {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", 0, NULL, 0, 0},
    {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", 0, NULL, 0, 0},
    {"ffn_gate.weight", "mlp.gate_proj.weight", 0, NULL, 0, 0},
    {"ffn_up.weight", "mlp.up_proj.weight", 0, NULL, 0, 0},
    {"ffn_down.weight", "mlp.down_proj.weight", 0, NULL, 0, 0},
};

/* mixtral (llama.cpp LlamaModel: q/k rows permuted back to the interleaved rotary layout) */
static const hm_name_map k_mixtral_layer[] = {
    {"attn_norm.weight", "input_layernorm.weight", 0, NULL, 0, 0},
    {"ffn_norm.weight", "post_attention_layernorm.weight", 0, NULL, 0, 0},
    {"attn_q.weight", "self_attn.q_proj.weight", HM_MAP_PERMUTE_Q, NULL, 0, 0},
    {"attn_k.weight", "self_attn.k_proj.weight", HM_MAP_PERMUTE_K, NULL, 0, 0},
    {"attn_v.weight", "self_attn.v_proj.weight", 0, NULL, 0, 0},
    {"attn_output.weight", "self_attn.o_proj.weight", 0, NULL, 0, 0},
    {"ffn_gate_inp.weight", "block_sparse_moe.gate.weight", 0, NULL, 0, 0},
    {"ffn_gate_exps.weight", "block_sparse_moe.experts.%u.w1.weight", HM_MAP_EXPERTS, NULL, 0, 0},
    {"ffn_down_exps.weight", "block_sparse_moe.experts.%u.w2.weight", HM_MAP_EXPERTS, NULL, 0, 0},
    {"ffn_up_exps.weight", "block_sparse_moe.experts.%u.w3.weight", HM_MAP_EXPERTS, NULL, 0, 0},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
static const hm_arch_names k_archs[] = {
    {HM_ARCH_QWEN3MOE, k_qwen_layer, COUNT(k_qwen_layer)},
    {HM_ARCH_QWEN2MOE, k_qwen_layer, COUNT(k_qwen_layer)},
    {HM_ARCH_MIXTRAL, k_mixtral_layer, COUNT(k_mixtral_layer)},
};
const char hm_arch_names_supported[] = "qwen3_moe, qwen2_moe, mixtral";

const hm_arch_names *hm_arch_names_find(hm_arch arch) {
    for (size_t i = 0; i < COUNT(k_archs); i++)
        if (k_archs[i].arch == arch) return &k_archs[i];
    return NULL;
}

/* The map entry of a GGUF name; *layer is set for "blk.N." names (else UINT32_MAX). */
const hm_name_map *hm_name_map_find(const hm_arch_names *a, const char *gguf, uint32_t *layer) {
    *layer = UINT32_MAX;
    if (strncmp(gguf, "blk.", 4) != 0) {
        for (size_t i = 0; i < COUNT(k_global); i++)
            if (!strcmp(k_global[i].gguf, gguf)) return &k_global[i];
        return NULL;
    }
    char *end;
    unsigned long il = strtoul(gguf + 4, &end, 10);
    if (end == gguf + 4 || *end != '.' || il >= HM_MAX_LAYERS) return NULL;
    *layer = (uint32_t)il;
    for (size_t i = 0; i < a->n_layer; i++)
        if (!strcmp(a->layer[i].gguf, end + 1)) return &a->layer[i];
    return NULL;
}

/* HF name from a pattern: "model.layers.<layer>." + pattern with "%u" replaced by expert. */
void hm_hf_name(const char *pattern, uint32_t layer, uint32_t expert, char *out, size_t cap) {
    char tail[128];
    const char *pct = strstr(pattern, "%u");
    if (pct)
        snprintf(tail, sizeof tail, "%.*s%u%s", (int)(pct - pattern), pattern, expert, pct + 2);
    else
        snprintf(tail, sizeof tail, "%s", pattern);
    if (layer == UINT32_MAX)
        snprintf(out, cap, "%s", tail);
    else
        snprintf(out, cap, "model.layers.%u.%s", layer, tail);
}
