/* gptoss.c - gpt-oss (20b, 120b), as transformers' GptOssDecoderLayer computes it:
 *   h = x + o_proj(attn(rope(q_proj(rms(x)) + bq), rope(k_proj(...) + bk), v_proj(...) + bv)) + bo
 *   x' = h + moe(rms(h))
 * GQA attention with a learned sink logit per head joining each softmax's denominator, over the
 * last sliding_window positions on the sliding layers (every other one, from layer 0); the NeoX
 * rotation with YaRN (not truncated); a router with a bias whose top-k logits are softmaxed (the
 * renormalised softmax top-k); experts of the clamped SwiGLU (alpha 1.702, limit 7) with biases,
 * MXFP4 in the released checkpoints. Runs from llama.cpp GGUF files and from the Hugging Face
 * checkpoints (model.c repacks their MXFP4 blocks and scales); the CPU and the CUDA backend.
 * Fixtures: tests/gen/gptoss_fixtures.py (transformers' logits; the weights written as a llama.cpp
 * GGUF, and one checkpoint as released, in MXFP4). */
#include "model/arch/arch_builders.h"
#include "model/arch/registry.h"
#include "model/blocks.h"

hm_status hm_gptoss_build(const hm_model *m, const hm_layer *layers, hm_graph *g) {
    return hm_build_layers(m, layers, false, g);
}

const hm_arch_desc hm_arch_gptoss = {HM_ARCH_GPTOSS,      "gpt_oss",       "gpt-oss", "gpt_oss",
                                     "GptOssForCausalLM", hm_gptoss_build, NULL};
