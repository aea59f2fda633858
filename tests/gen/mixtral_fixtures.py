#!/usr/bin/env python3
"""mixtral_fixtures.py - tiny random Mixtral checkpoints and transformers' logits for them.

transformers' MixtralForCausalLM is the oracle for hmoe's Mixtral forward pass (the Qwen3-MoE
layer graph without q/k norms: GQA attention with the NeoX rotation on the Hugging Face weights,
softmax top-k routing renormalised over the k). Each model is saved as a Hugging Face directory
(config.json + model.safetensors) under tests/data/mixtral/<name>/ with expected.json in the
format of tests/data/qwen3moe/ (tests/fixture.h reads both): three prompts, the float32 logits of
every prompt position (logits_<i>.f32), 32-token greedy continuations and their smallest top-1
margin.

    pip install torch transformers==5.24.0 safetensors numpy
    python3 tests/gen/mixtral_fixtures.py        # rewrites tests/data/mixtral/

The committed files were produced with python 3.11.7, torch 2.15.0 (CPU), transformers 5.24.0,
safetensors 0.8.0, numpy 2.4.6. Fixed seeds, one thread, deterministic algorithms. RMSNorm
weights are drawn from [0.5, 1.5) (transformers initialises them to ones) so a norm applied as
(1 + w) or not at all would show. Logits come from the directory read back from disk with the
eager attention implementation.
"""
import os
import sys

import torch
from transformers import MixtralConfig, MixtralForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_common import init_visible, run, save_and_oracle  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "mixtral")

MODELS = {
    # GQA 4:2, 4 experts top-2, tied nothing
    "a": dict(seed=21, vocab_size=384, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
              num_experts_per_tok=2, rope_theta=10000.0),
    # MQA, head_dim 32 given explicitly, 6 experts top-3, three layers, rope_theta 1e6
    "b": dict(seed=22, vocab_size=256, hidden_size=96, intermediate_size=64, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=1, head_dim=32, num_local_experts=6,
              num_experts_per_tok=3, rope_theta=1e6),
}
def make(name, spec):
    spec = dict(spec)
    seed = spec.pop("seed")
    torch.manual_seed(seed)
    cfg = MixtralConfig(max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
                        sliding_window=None, **spec)
    model = MixtralForCausalLM(cfg).float().eval()
    init_visible(model, biases=False)
    save_and_oracle(ROOT, name, model, MixtralForCausalLM, seed)


if __name__ == "__main__":
    sys.exit(run(ROOT, MODELS, make))
