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
import json
import os
import shutil
import sys

import numpy as np
import torch
import transformers
from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3moe_fixtures import N_GREEDY, greedy  # noqa: E402  the same generate() settings

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

PROMPTS = [[1], [5, 77, 19, 201, 3, 140, 64], [2, 9, 17, 33, 65, 129, 250, 7, 11, 13, 99, 101, 55,
                                                 66, 77, 88, 120, 121, 122, 30, 31, 32, 240]]


def make(name, spec):
    spec = dict(spec)
    seed = spec.pop("seed")
    torch.manual_seed(seed)
    cfg = Qwen2MoeConfig(max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
                         use_sliding_window=False, qkv_bias=True, **spec)
    model = Qwen2MoeForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(torch.rand_like(p) + 0.5)
            elif n.endswith("_proj.bias"):
                p.copy_(torch.randn_like(p) * 0.5)
    out = os.path.join(ROOT, name)
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out, safe_serialization=True)
    for extra in ("generation_config.json",):
        p = os.path.join(out, extra)
        if os.path.exists(p):
            os.remove(p)
    back = Qwen2MoeForCausalLM.from_pretrained(out, dtype=torch.float32,
                                               attn_implementation="eager").eval()
    logits_files, greedy_ids, margins = [], [], []
    for i, ids in enumerate(PROMPTS):
        ids = [t % cfg.vocab_size for t in ids]
        with torch.no_grad():
            lg = back(torch.tensor([ids])).logits[0].float().numpy().astype("<f4")
        fn = "logits_%d.f32" % i
        lg.tofile(os.path.join(out, fn))
        logits_files.append(fn)
        g, mgn = greedy(back, ids)
        greedy_ids.append(g)
        margins.append(round(mgn, 6))
    exp = {"prompts": [[t % cfg.vocab_size for t in p] for p in PROMPTS], "greedy": greedy_ids,
           "logits": logits_files, "vocab": cfg.vocab_size, "dtype": "float32",
           "transformers": transformers.__version__, "torch": torch.__version__, "seed": seed,
           "attn_implementation": "eager", "greedy_min_margin": margins}
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(exp, f, indent=1)
        f.write("\n")
    print(name, "margins", margins)


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(ROOT, exist_ok=True)
    for name, spec in MODELS.items():
        make(name, spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
