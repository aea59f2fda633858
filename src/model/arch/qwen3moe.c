/* qwen3moe.c - the Qwen3-MoE layer, as transformers' Qwen3MoeDecoderLayer computes it:
 *   h = x + o_proj(attn(rope(q_norm(q_proj(rms(x)))), rope(k_norm(k_proj(rms(x)))),
 * v_proj(rms(x)))) x' = h + moe(rms(h))   (the dense MLP on mlp_only_layers and off-step layers)
 * RMSNorm multiplies by w (not 1 + w); q_norm/k_norm are RMSNorms over each head's head_dim
 * applied before the NeoX rotation; the attention scale is head_dim^-0.5; the router is a softmax
 * over all experts in float, the top-k taken, renormalised when norm_topk_prob. */
#include "model/arch/arch_builders.h"
#include "model/arch/registry.h"
#include "model/blocks.h"

hm_status hm_qwen3moe_build(const hm_model *m, const hm_layer *layers, hm_graph *g) {
    return hm_build_layers(m, layers, false, g);
}

/* GGUF <-> HF layer tensor names of qwen3_moe and qwen2_moe (llama.cpp Qwen2MoeModel /
 * Qwen3MoeModel: no q/k permutation); the tensor plan decides which of these a model has (biases,
 * q/k norms, shared expert, dense). */
static const hm_name_map qwen_moe_layer[] = {
    {"attn_norm.weight", "input_layernorm.weight", 0, NULL, 0, 0},
    {"ffn_norm.weight", "post_attention_layernorm.weight", 0, NULL, 0, 0},
    HM_NAMES_GQA,
    HM_NAMES_MLP_EXPERTS,
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", 0, NULL, 0, 0},
    {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", 0, NULL, 0, 0},
    {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", 0, NULL, 0, 0},
    {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", 0, NULL, 0, 0},
    HM_NAMES_DENSE_MLP,
};
const hm_arch_names hm_qwen_moe_names = {HM_ARCH_QWEN3MOE, qwen_moe_layer,
                                         sizeof qwen_moe_layer / sizeof *qwen_moe_layer};

const hm_arch_desc hm_arch_qwen3moe = {HM_ARCH_QWEN3MOE,  "qwen3_moe",           "qwen3moe",
                                       "qwen3_moe",       "Qwen3MoeForCausalLM", hm_qwen3moe_build,
                                       &hm_qwen_moe_names};
