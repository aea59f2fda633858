#!/usr/bin/env python3
"""glm4moe_fixtures.py - tiny random GLM-4.5 (glm4_moe) checkpoints and transformers' logits.

transformers' Glm4MoeForCausalLM is the oracle for hmoe's GLM-4.5 forward pass: q/k/v biases,
optional q/k norms, the NeoX rotation of half of each head (partial_rotary_factor 0.5), a sigmoid
router with e_score_correction_bias and group-limited choice, the weights renormalised and scaled
by routed_scaling_factor, an ungated shared expert, dense first layers. Each model is saved as a
Hugging Face directory (config.json + model.safetensors) under tests/data/glm4moe/<name>/ with
expected.json in the format of tests/data/qwen3moe/ (tests/fixture.h reads both).

    pip install torch transformers==5.24.0 safetensors numpy
    python3 tests/gen/glm4moe_fixtures.py        # rewrites tests/data/glm4moe/

The committed files were produced with python 3.11.7, torch 2.15.0 (CPU), transformers 5.24.0,
safetensors 0.8.0, numpy 2.4.6. Fixed seeds, one thread, deterministic algorithms. RMSNorm
weights are drawn from [0.5, 1.5), the q/k/v biases from N(0, 0.5), the correction bias from
N(0, 0.1) and the router rows scaled up (transformers initialises them to ones and zeros, which
would hide a missing term). Logits come from the directory read back from disk with the eager
attention implementation.
"""
import os
import sys

import torch
from transformers import Glm4MoeConfig, Glm4MoeForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_common import init_visible, run, save_and_oracle  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "glm4moe")

MODELS = {
    # GLM-4.5-Air's choices at small size: one dense first layer, one group, scale 1, no q/k norm
    "a": dict(seed=49, vocab_size=384, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
              num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
              n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
              n_group=1, topk_group=1, routed_scaling_factor=1.0, norm_topk_prob=True,
              use_qk_norm=False, partial_rotary_factor=0.5, rope_theta=10000.0),
    # group-limited routing (4 groups, best 2), scale 2.5, q/k norms, two shared experts, MQA
    "b": dict(seed=46, vocab_size=256, hidden_size=96, intermediate_size=64, moe_intermediate_size=24,
              num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1, head_dim=24,
              n_routed_experts=16, num_experts_per_tok=4, n_shared_experts=2, first_k_dense_replace=1,
              n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
              use_qk_norm=True, partial_rotary_factor=0.5, rope_theta=1e6),
}

def make(name, spec):
    spec = dict(spec)
    seed = spec.pop("seed")
    torch.manual_seed(seed)
    cfg = Glm4MoeConfig(max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
                        attention_bias=True, num_nextn_predict_layers=0, **spec)
    model = Glm4MoeForCausalLM(cfg).float().eval()
    init_visible(model, router=True, score_bias=True)
    save_and_oracle(ROOT, name, model, Glm4MoeForCausalLM, seed)


if __name__ == "__main__":
    sys.exit(run(ROOT, MODELS, make))
