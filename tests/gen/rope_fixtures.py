#!/usr/bin/env python3
"""rope_fixtures.py - one tiny random Qwen3-MoE under every RoPE scaling hmoe implements, and
transformers' logits for a prompt that runs past the original context.

transformers' Qwen3MoeForCausalLM (its ROPE_INIT_FUNCTIONS and dynamic_rope_update) is the oracle
for hmoe's RoPE scaling. One model's weights (tests/data/rope/weights.safetensors, float32) are
shared by every variant; each variant is a directory tests/data/rope/<name>/ with its own
config.json (the same model under another `rope_parameters`), a link model.safetensors ->
../weights.safetensors, and expected.json + logits files:
    logits_full.f32  [n x vocab] float32: the whole prompt in one forward call
    logits_inc.f32   [n x vocab] float32: one token at a time through a DynamicCache (dynamic NTK
                     only: its frequencies depend on the length at each call)
The prompt is 100 tokens; the original context is 64 positions, so the last 36 positions are
past it (where linear, dynamic, YaRN and llama3 differ from the unscaled model). The generator
checks that every scaled variant's logits differ from the unscaled ones there by > 1e-2 of the
largest logit, so a reader that ignores the scaling fails the test.

    pip install torch transformers==5.24.0 safetensors numpy
    python3 tests/gen/rope_fixtures.py        # rewrites tests/data/rope/

The committed files were produced with python 3.11.7, torch 2.15.0 (run on CPU), transformers
5.24.0, safetensors 0.8.0; the run is deterministic (fixed seeds, one thread).
"""
import json
import os
import shutil
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3moe_fixtures import hub_state_dict  # noqa: E402  (the hub's per-expert layout)

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "rope")
TRANSFORMERS_VERSION = "5.24.0"
SEED = 71
N_PROMPT = 100
ORIG = 64

BASE = dict(
    vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=32, num_experts=4, num_experts_per_tok=2,
    moe_intermediate_size=32, intermediate_size=64, norm_topk_prob=True,
    tie_word_embeddings=False, rms_norm_eps=1e-6, initializer_range=0.15,
    attention_dropout=0.0, attention_bias=False, output_router_logits=False,
    use_sliding_window=False, sliding_window=None, hidden_act="silu",
)
THETA = 1000.0  # with head_dim 32 and 64 original positions YaRN's ramp spans dims 0-6 of 16

# name -> (max_position_embeddings, rope_parameters)
VARIANTS = {
    "default": (ORIG, dict(rope_type="default")),
    "linear": (ORIG, dict(rope_type="linear", factor=2.5)),
    "dynamic": (ORIG, dict(rope_type="dynamic", factor=3.0)),
    "yarn": (4 * ORIG, dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=ORIG)),
    "yarn_mscale": (4 * ORIG, dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=ORIG,
                                   mscale=0.707, mscale_all_dim=1.0)),
    "yarn_attn": (8 * ORIG, dict(rope_type="yarn", factor=8.0, original_max_position_embeddings=ORIG,
                                 attention_factor=1.3, beta_fast=16.0, beta_slow=2.0)),
    "yarn_notrunc": (4 * ORIG, dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=ORIG,
                                    truncate=False)),
    "llama3": (8 * ORIG, dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                              high_freq_factor=4.0, original_max_position_embeddings=ORIG)),
}


def config_for(mpe, rope):
    rp = dict(rope, rope_theta=THETA)
    return Qwen3MoeConfig(**BASE, max_position_embeddings=mpe, rope_parameters=rp,
                          bos_token_id=None, eos_token_id=None, pad_token_id=None)


def build():
    torch.manual_seed(SEED)
    model = Qwen3MoeForCausalLM(config_for(ORIG, VARIANTS["default"][1]))
    g = torch.Generator().manual_seed(SEED + 1000)
    with torch.no_grad():
        for n, p in sorted(model.named_parameters()):
            if n.endswith("norm.weight"):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
    return model.eval()


@torch.no_grad()
def logits_full(model, ids):
    return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()


@torch.no_grad()
def logits_inc(model, ids):
    cache = transformers.DynamicCache(config=model.config)
    rows = []
    for t in ids:
        rows.append(model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True).logits[0, -1].float())
    return torch.stack(rows)


def write_f32(path, t):
    with open(path, "wb") as f:
        f.write(t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes())


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def main():
    if transformers.__version__ != TRANSFORMERS_VERSION:
        sys.exit(f"transformers {TRANSFORMERS_VERSION} is required (found {transformers.__version__})")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    if os.path.isdir(DATA):
        shutil.rmtree(DATA)
    os.makedirs(DATA)
    model = build()
    save_file(hub_state_dict(model), os.path.join(DATA, "weights.safetensors"), metadata={"format": "pt"})
    ids = torch.randint(0, BASE["vocab_size"], (N_PROMPT,),
                        generator=torch.Generator().manual_seed(SEED + 2000)).tolist()
    base = None
    for name, (mpe, rope) in VARIANTS.items():
        d = os.path.join(DATA, name)
        os.makedirs(d)
        config_for(mpe, rope).save_pretrained(d)
        os.symlink("../weights.safetensors", os.path.join(d, "model.safetensors"))
        ref = Qwen3MoeForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                                                  experts_implementation="eager").eval()
        assert ref.model.rotary_emb.rope_type == rope["rope_type"], ref.model.rotary_emb.rope_type
        full = logits_full(ref, ids)
        write_f32(os.path.join(d, "logits_full.f32"), full)
        exp = {"prompt": ids, "vocab": BASE["vocab_size"], "orig_ctx": ORIG, "logits_full": "logits_full.f32",
               "rope_parameters": rope, "max_position_embeddings": mpe,
               "transformers": transformers.__version__, "torch": torch.__version__}
        if rope["rope_type"] == "dynamic":
            inc = logits_inc(ref, ids)
            write_f32(os.path.join(d, "logits_inc.f32"), inc)
            exp["logits_inc"] = "logits_inc.f32"
            print(f"[{name}] full vs one token at a time: {rel(inc, full):.3g}")
        if base is None:
            base = full
        else:
            early, late = rel(full[:ORIG], base[:ORIG]), rel(full[ORIG:], base[ORIG:])
            print(f"[{name}] vs default: first {ORIG} positions {early:.3g}, after {late:.3g}")
            assert late > 1e-2, f"{name}: the scaling does not show past the original context"
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(exp, f, indent=1)
            f.write("\n")
        del ref


if __name__ == "__main__":
    main()
