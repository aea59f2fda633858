/* qwen2moe.c - Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B), as transformers'
 * Qwen2MoeDecoderLayer computes it:
 *   h = x + o_proj(attn(rope(q_proj(rms(x)) + bq), rope(k_proj(rms(x)) + bk), v_proj(rms(x)) + bv))
 *   x' = h + moe(rms(h)) + sigmoid(shared_expert_gate . rms(h)) * shared_expert(rms(h))
 * Qwen3-MoE's layer with q/k/v biases instead of q/k norms, and a shared SwiGLU expert of
 * shared_expert_intermediate_size behind a sigmoid gate (one weight row) next to the routed ones;
 * the router's top-k is renormalised only when norm_topk_prob (false in the released models).
 * Layers in mlp_only_layers or off decoder_sparse_step are dense (hfconfig.c). Tensor names are
 * Qwen3-MoE's (arch/qwen3moe.c). Fixtures: tests/gen/qwen2moe_fixtures.py. */
#include "model/arch/arch_builders.h"
#include "model/arch/registry.h"
#include "model/blocks.h"

hm_status hm_qwen2moe_build(const hm_model *m, const hm_layer *layers, hm_graph *g) {
    return hm_build_layers(m, layers, false, g);
}

const hm_arch_desc hm_arch_qwen2moe = {HM_ARCH_QWEN2MOE,  "qwen2_moe",           "qwen2moe",
                                       "qwen2_moe",       "Qwen2MoeForCausalLM", hm_qwen2moe_build,
                                       &hm_qwen_moe_names};
