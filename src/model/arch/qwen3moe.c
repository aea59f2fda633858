/* qwen3moe.c - the Qwen3-MoE layer, as transformers' Qwen3MoeDecoderLayer computes it:
 *   h = x + o_proj(attn(rope(q_norm(q_proj(rms(x)))), rope(k_norm(k_proj(rms(x)))), v_proj(rms(x))))
 *   x' = h + moe(rms(h))   (the dense MLP on mlp_only_layers and off-step layers)
 * RMSNorm multiplies by w (not 1 + w); q_norm/k_norm are RMSNorms over each head's head_dim
 * applied before the NeoX rotation; the attention scale is head_dim^-0.5; the router is a softmax
 * over all experts in float, the top-k taken, renormalised when norm_topk_prob. */
#include "model/arch/arch_builders.h"
#include "model/arch/registry.h"
#include "model/blocks.h"

hm_status hm_qwen3moe_build(const hm_model *m, const hm_layer *layers, hm_graph *g) {
    hm_status st;
    for (uint32_t il = 0; il < m->hp.n_layers; il++) {
        const hm_layer *L = &layers[il];
        if ((st = hm_build_attn_gqa(g, L, (int)il)) || (st = hm_build_ffn_norm(g, L, (int)il)) ||
            (st = L->moe ? hm_build_moe_ffn(g, L, (int)il) : hm_build_dense_mlp(g, L, (int)il)) ||
            (st = hm_build_residual(g, (int)il)))
            return st;
    }
    return HM_OK;
}

const hm_arch_desc hm_arch_qwen3moe = {HM_ARCH_QWEN3MOE,     "qwen3_moe", "qwen3moe", "qwen3_moe",
                                       "Qwen3MoeForCausalLM", hm_qwen3moe_build};
