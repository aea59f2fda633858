/* others.c - the architectures whose configs, GGUF layouts and tensor names hmoe reads (hmoe
 * info, convert) but whose layers it does not build yet. Each moves to a file of its own with its
 * layer builder. */
#include "model/arch/registry.h"

/* qwen2_moe shares qwen3_moe's tensor names (arch/qwen3moe.c) */
const hm_arch_desc hm_arch_qwen2moe = {HM_ARCH_QWEN2MOE,  "qwen2_moe",           "qwen2moe",
                                       "qwen2_moe",       "Qwen2MoeForCausalLM", NULL,
                                       &hm_qwen_moe_names};

/* mixtral (llama.cpp LlamaModel: q/k rows permuted back to the interleaved rotary layout) */
static const hm_name_map mixtral_names[] = {
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

static const hm_arch_names mixtral = {HM_ARCH_MIXTRAL, mixtral_names,
                                      sizeof mixtral_names / sizeof *mixtral_names};
const hm_arch_desc hm_arch_mixtral = {HM_ARCH_MIXTRAL,      "mixtral", "llama", "mixtral",
                                      "MixtralForCausalLM", NULL,      &mixtral};
const hm_arch_desc hm_arch_deepseek2 = {
    HM_ARCH_DEEPSEEK2,       "deepseek_v2", "deepseek2", "deepseek_v2,deepseek_v3,kimi_k2",
    "DeepseekV3ForCausalLM", NULL,          NULL};
const hm_arch_desc hm_arch_gptoss = {HM_ARCH_GPTOSS,      "gpt_oss", "gpt-oss", "gpt_oss",
                                     "GptOssForCausalLM", NULL,      NULL};
const hm_arch_desc hm_arch_glm4moe = {HM_ARCH_GLM4MOE,      "glm4_moe", "glm4moe", "glm4_moe",
                                      "Glm4MoeForCausalLM", NULL,       NULL};
