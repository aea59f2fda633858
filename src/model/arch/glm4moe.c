/* glm4moe.c - GLM-4.5 / GLM-4.6 (glm4_moe), as transformers' Glm4MoeDecoderLayer computes it:
 *   h = x + o_proj(attn(rope(qn(q_proj(rms(x)) + bq)), rope(kn(k_proj(rms(x)) + bk)), ...))
 *   x' = h + moe(rms(h)) + shared(rms(h))       (dense MLP on the first first_k_dense_replace)
 * q/k/v biases (attention_bias), optional per-head q/k RMSNorms (use_qk_norm), NeoX rotation of
 * the first partial_rotary_factor (0.5) of each head; a sigmoid router choosing by score +
 * e_score_correction_bias within the best topk_group of n_group groups, weights the scores
 * renormalised (norm_topk_prob) times routed_scaling_factor; shared experts (one SwiGLU of
 * n_shared_experts x moe_intermediate_size, no gate) added to the routed sum. The
 * next-token-prediction layers stored after the last one (num_nextn_predict_layers) are not run.
 * llama.cpp names the post-attention norm post_attention_norm. Fixtures:
 * tests/gen/glm4moe_fixtures.py. */
#include "model/arch/arch_builders.h"
#include "model/arch/registry.h"
#include "model/blocks.h"

hm_status hm_glm4moe_build(const hm_model *m, const hm_layer *layers, hm_graph *g) {
    return hm_build_layers(m, layers, false, g);
}

/* llama.cpp's GLM4_MOE names <-> transformers' (4.x: one tensor per expert; 5.x: fused) */
static const hm_name_map glm4moe_layer[] = {
    {"attn_norm.weight", "input_layernorm.weight", 0, NULL, 0, 0},
    {"post_attention_norm.weight", "post_attention_layernorm.weight", 0, NULL, 0, 0},
    HM_NAMES_GQA,
    HM_NAMES_MLP_EXPERTS,
    HM_NAMES_SHARED_EXPERTS,
    HM_NAMES_DENSE_MLP,
};

static const hm_arch_names glm4moe_names = {HM_ARCH_GLM4MOE, glm4moe_layer,
                                            sizeof glm4moe_layer / sizeof *glm4moe_layer};
const hm_arch_desc hm_arch_glm4moe = {HM_ARCH_GLM4MOE, "glm4_moe",           "glm4moe",
                                      "glm4_moe",      "Glm4MoeForCausalLM", hm_glm4moe_build,
                                      &glm4moe_names};
