/* mixtral.c - Mixtral, as transformers' MixtralDecoderLayer computes it:
 *   h = x + o_proj(attn(rope(q_proj(rms(x))), rope(k_proj(rms(x))), v_proj(rms(x))))
 *   x' = h + moe(rms(h))
 * the Qwen3-MoE layer without q/k norms: GQA attention with the NeoX rotation of the Hugging Face
 * weights, a router softmax over all experts with the top-k renormalised over the k (hfconfig.c
 * sets norm_topk_prob), SwiGLU experts (w1 gate, w3 up, w2 down), no shared expert, no dense
 * layers. llama.cpp's GGUF permutes q and k rows for the interleaved rotation, which such files
 * get (hparams rope_interleaved, set from GGUF). Fixtures: tests/gen/mixtral_fixtures.py. */
#include "model/arch/arch_builders.h"
#include "model/arch/registry.h"
#include "model/blocks.h"

hm_status hm_mixtral_build(const hm_model *m, const hm_layer *layers, hm_graph *g) {
    return hm_build_layers(m, layers, false, g);
}

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
const hm_arch_desc hm_arch_mixtral = {HM_ARCH_MIXTRAL,      "mixtral",        "llama", "mixtral",
                                      "MixtralForCausalLM", hm_mixtral_build, &mixtral};
