#!/usr/bin/env python3
"""deepseek_fixtures.py - tiny random DeepSeek-V3 and DeepSeek-V2 checkpoints and transformers'
logits for them.

transformers' DeepseekV3ForCausalLM and DeepseekV2ForCausalLM are the oracles for hmoe's
multi-head latent attention (q with and without its low-rank path, the latent and the rotated
key shared by the heads, YaRN with mscale and mscale_all_dim), the sigmoid router with its
correction bias, groups and scale (V3) and the softmax router with its scale (V2), the shared
experts and dense first layers. Each model is saved as a Hugging Face directory (config.json +
model.safetensors) under tests/data/deepseek/<name>/ with expected.json in the format of
tests/data/qwen3moe/ (tests/fixture.h reads both).

    pip install torch transformers==5.24.0 safetensors numpy
    python3 tests/gen/deepseek_fixtures.py [NAME ...]  # rewrites tests/data/deepseek/[NAME]

The committed files were produced with python 3.11.7, torch 2.15.0 (CPU), transformers 5.24.0,
safetensors 0.8.0, numpy 2.4.6. Fixed seeds, one thread, deterministic algorithms. RMSNorm
weights are drawn from [0.5, 1.5), the correction bias from N(0, 0.1) and the router rows scaled
up, so that every term shows. v3b's YaRN has an original context of 16 positions: its longer
prompt and the greedy continuations run past it.
"""
import json
import os
import sys

import torch
from transformers import DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_common import init_visible, run, save_and_oracle  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "deepseek")

COMMON = dict(max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False)
MODELS = {
    # V3's layer: q through its low rank, sigmoid router in 4 groups (best 2), scale 2.5, 2 shared
    "v3a": (DeepseekV3Config, DeepseekV3ForCausalLM, dict(
        seed=51, vocab_size=384, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=48,
        kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=24, v_head_dim=20,
        n_routed_experts=16, num_experts_per_tok=4, n_shared_experts=2, first_k_dense_replace=1,
        n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # no q compression, YaRN (factor 4 past 16 positions, mscale terms), one group, scale 1
    "v3b": (DeepseekV3Config, DeepseekV3ForCausalLM, dict(
        seed=52, vocab_size=256, hidden_size=96, intermediate_size=64, moe_intermediate_size=24,
        num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=6, q_lora_rank=None,
        kv_lora_rank=48, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
        n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
        n_group=1, topk_group=1, routed_scaling_factor=1.0, norm_topk_prob=True,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 16, "mscale": 0.707,
                         "mscale_all_dim": 0.707, "beta_fast": 32.0, "beta_slow": 1.0})),
    # Kimi-K2's layout (DeepseekV3ForCausalLM, model_type kimi_k2): q through its low rank, one
    # group, scale 2.827, one shared expert, rope theta 50000 and YaRN with mscale 1 past 16
    # positions (factor 32, beta_fast 1, beta_slow 1, as its config.json)
    "kimi": (DeepseekV3Config, DeepseekV3ForCausalLM, dict(
        seed=54, vocab_size=320, hidden_size=64, intermediate_size=80, moe_intermediate_size=24,
        num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=8, q_lora_rank=40,
        kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16,
        n_routed_experts=24, num_experts_per_tok=6, n_shared_experts=1, first_k_dense_replace=1,
        n_group=1, topk_group=1, routed_scaling_factor=2.827, norm_topk_prob=True,
        rope_parameters={"rope_type": "yarn", "rope_theta": 50000.0, "factor": 32.0,
                         "original_max_position_embeddings": 16, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "beta_fast": 1.0, "beta_slow": 1.0},
        _model_type="kimi_k2")),
    # V2-Lite's layer: no q compression, softmax greedy routing not renormalised, scale 2
    "v2a": (DeepseekV2Config, DeepseekV2ForCausalLM, dict(
        seed=53, vocab_size=384, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None,
        kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16,
        n_routed_experts=8, num_experts_per_tok=3, n_shared_experts=2, first_k_dense_replace=1,
        topk_method="greedy", routed_scaling_factor=2.0, norm_topk_prob=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # V2 with 32-wide nope and value heads and a 64-wide latent: converted to Q8_0, attn_k_b and
    # attn_v_b have whole 32-value blocks per row, so the CPU multiplies them quantized
    "v2b": (DeepseekV2Config, DeepseekV2ForCausalLM, dict(
        seed=55, vocab_size=320, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None,
        kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32,
        n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
        topk_method="greedy", routed_scaling_factor=1.0, norm_topk_prob=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
}

def make(name, entry):
    Config, Model, spec = entry
    spec = dict(spec)
    seed = spec.pop("seed")
    model_type = spec.pop("_model_type", None)
    torch.manual_seed(seed)
    model = Model(Config(**COMMON, **spec)).float().eval()
    init_visible(model, router=True, score_bias=True)
    save_and_oracle(ROOT, name, model, Model, seed)
    if model_type:  # the checkpoint's own name for the architecture (the loader's to map)
        path = os.path.join(ROOT, name, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        cfg["model_type"] = model_type
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":  # names on the command line: only those
    sys.exit(run(ROOT, {k: v for k, v in MODELS.items() if not sys.argv[1:] or k in sys.argv[1:]},
                 make))
