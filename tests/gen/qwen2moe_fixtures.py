#!/usr/bin/env python3
"""qwen2moe_fixtures.py - tiny random Qwen2-MoE checkpoints and transformers' logits for them.

transformers' Qwen2MoeForCausalLM is the oracle for hmoe's Qwen2-MoE forward pass (Qwen3-MoE's
layer with q/k/v biases instead of q/k norms, and a shared expert behind a sigmoid gate next to
the routed ones). Each model is saved as a Hugging Face directory (config.json +
model.safetensors) under tests/data/qwen2moe/<name>/ with expected.json in the format of
tests/data/qwen3moe/ (tests/fixture.h reads both): three prompts, the float32 logits of every
prompt position (logits_<i>.f32), 32-token greedy continuations and their smallest top-1 margin.

    pip install torch transformers==5.24.0 safetensors numpy
    python3 tests/gen/qwen2moe_fixtures.py        # rewrites tests/data/qwen2moe/

The committed files were produced with python 3.11.7, torch 2.15.0 (CPU), transformers 5.24.0,
safetensors 0.8.0, numpy 2.4.6. Fixed seeds, one thread, deterministic algorithms. RMSNorm
weights are drawn from [0.5, 1.5) and the q/k/v biases from N(0, 0.5) (transformers initialises
them to ones and zeros), so a norm applied as (1 + w), or a bias left out, would show. Logits
come from the directory read back from disk with the eager attention implementation.
"""
import os
import sys

import torch
from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_common import init_visible, run, save_and_oracle  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "qwen2moe")

MODELS = {
    # Qwen1.5-MoE's choices: top-k not renormalised, a shared expert wider than the routed ones,
    # every layer sparse; GQA 4:2
    "a": dict(seed=39, vocab_size=384, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
              shared_expert_intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, num_experts=6, num_experts_per_tok=2, norm_topk_prob=False,
              decoder_sparse_step=1, mlp_only_layers=[], rope_theta=10000.0),
    # renormalised top-3, a dense first layer (mlp_only_layers), MQA, three layers, theta 1e6
    "b": dict(seed=35, vocab_size=256, hidden_size=96, intermediate_size=64, moe_intermediate_size=48,
              shared_expert_intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=1, num_experts=8, num_experts_per_tok=3, norm_topk_prob=True,
              decoder_sparse_step=1, mlp_only_layers=[0], rope_theta=1e6),
}

def make(name, spec):
    spec = dict(spec)
    seed = spec.pop("seed")
    torch.manual_seed(seed)
    cfg = Qwen2MoeConfig(max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
                         use_sliding_window=False, qkv_bias=True, **spec)
    model = Qwen2MoeForCausalLM(cfg).float().eval()
    init_visible(model)
    save_and_oracle(ROOT, name, model, Qwen2MoeForCausalLM, seed)


if __name__ == "__main__":
    sys.exit(run(ROOT, MODELS, make))
