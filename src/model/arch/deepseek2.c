/* deepseek2.c - DeepSeek-V2, V2-Lite, V3/R1 and Kimi-K2 (deepseek_v2, deepseek_v3, kimi_k2), as
 * transformers' DeepseekV2/V3DecoderLayer compute them:
 *   h = x + o_proj(mla(rms(x)))      (multi-head latent attention: mla.c)
 *   x' = h + moe(rms(h)) + shared(rms(h))     (dense MLP on the first first_k_dense_replace)
 * V2 routes by softmax (greedy, or group_limited_greedy by the groups' best scores), never
 * renormalised, times routed_scaling_factor; V3 and Kimi-K2 by sigmoid with the correction bias
 * and group-limited choice (the router node follows hparams' gating). The shared experts are one
 * ungated SwiGLU of n_shared_experts x moe_intermediate_size. The next-token-prediction layer of
 * V3 (num_nextn_predict_layers) is not run. MLA runs on the CPU only (the CUDA backend refuses the
 * node). Fixtures: tests/gen/deepseek_fixtures.py. */
#include "model/arch/arch_builders.h"
#include "model/arch/registry.h"
#include "model/blocks.h"

hm_status hm_deepseek2_build(const hm_model *m, const hm_layer *layers, hm_graph *g) {
    return hm_build_layers(m, layers, true, g);
}

/* llama.cpp's deepseek2 names <-> transformers'. attn_kv_b is the older GGUFs' (and HF's)
 * kv_b_proj, which the loader reads from an HF directory; current llama.cpp GGUFs split it into
 * attn_k_b / attn_v_b (model.c reads either), which the converter writes. */
static const hm_name_map deepseek2_layer[] = {
    {"attn_norm.weight", "input_layernorm.weight", 0, NULL, 0, 0},
    {"ffn_norm.weight", "post_attention_layernorm.weight", 0, NULL, 0, 0},
    {"attn_q.weight", "self_attn.q_proj.weight", 0, NULL, 0, 0},
    {"attn_q_a.weight", "self_attn.q_a_proj.weight", 0, NULL, 0, 0},
    {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight", 0, NULL, 0, 0},
    {"attn_q_b.weight", "self_attn.q_b_proj.weight", 0, NULL, 0, 0},
    {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight", 0, NULL, 0, 0},
    {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight", 0, NULL, 0, 0},
    {"attn_kv_b.weight", "self_attn.kv_b_proj.weight", 0, NULL, 0, 0},
    {"attn_k_b.weight", "self_attn.kv_b_proj.weight", HM_MAP_KV_B_K, NULL, 0, 0},
    {"attn_v_b.weight", "self_attn.kv_b_proj.weight", HM_MAP_KV_B_V, NULL, 0, 0},
    {"attn_output.weight", "self_attn.o_proj.weight", 0, NULL, 0, 0},
    HM_NAMES_MLP_EXPERTS,
    HM_NAMES_SHARED_EXPERTS,
    HM_NAMES_DENSE_MLP,
};

static const hm_arch_names deepseek2_names = {HM_ARCH_DEEPSEEK2, deepseek2_layer,
                                              sizeof deepseek2_layer / sizeof *deepseek2_layer};
const hm_arch_desc hm_arch_deepseek2 = {
    HM_ARCH_DEEPSEEK2,       "deepseek_v2",      "deepseek2",     "deepseek_v2,deepseek_v3,kimi_k2",
    "DeepseekV3ForCausalLM", hm_deepseek2_build, &deepseek2_names};
