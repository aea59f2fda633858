"""fixture_common.py - what the architecture fixture generators share (mixtral, qwen2moe,
glm4moe, deepseek, gptoss): the prompts, the initialisation that makes every term visible, and
transformers' oracle outputs written in the layout of tests/data/qwen3moe/ (tests/fixture.h):
expected.json (prompts, 32-token greedy continuations, their smallest top-1 margin) and the
float32 logits of every prompt position (logits_<i>.f32)."""
import json
import os
import shutil
import sys

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3moe_fixtures import greedy  # noqa: E402  the same generate() settings

PROMPTS = [[1], [5, 77, 19, 201, 3, 140, 64], [2, 9, 17, 33, 65, 129, 250, 7, 11, 13, 99, 101, 55,
                                                 66, 77, 88, 120, 121, 122, 30, 31, 32, 240]]


def init_visible(model, biases=True, router=False, score_bias=False):
    """RMSNorm weights from [0.5, 1.5) (transformers makes them ones: a norm applied as 1 + w
    would not show), q/k/v biases from N(0, 0.5), optionally the router rows scaled up
    (mlp.gate.weight) and the e_score_correction_bias buffers from N(0, 0.1) (zeros otherwise)"""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(torch.rand_like(p) + 0.5)
            elif biases and n.endswith("_proj.bias"):
                p.copy_(torch.randn_like(p) * 0.5)
            elif router and n.endswith("mlp.gate.weight"):
                p.copy_(torch.randn_like(p) * 0.5)
        for n, b in model.named_buffers():
            if score_bias and n.endswith("e_score_correction_bias"):
                b.copy_(torch.randn_like(b) * 0.1)


def write_oracle(out, model, vocab, seed, extra=None):
    """transformers' logits and greedy continuations of PROMPTS (ids mod vocab) into out/"""
    logits_files, greedy_ids, margins = [], [], []
    for i, ids in enumerate(PROMPTS):
        ids = [t % vocab for t in ids]
        with torch.no_grad():
            lg = model(torch.tensor([ids])).logits[0].float().numpy().astype("<f4")
        fn = "logits_%d.f32" % i
        lg.tofile(os.path.join(out, fn))
        logits_files.append(fn)
        g, mgn = greedy(model, ids)
        greedy_ids.append(g)
        margins.append(round(mgn, 6))
    exp = {"prompts": [[t % vocab for t in p] for p in PROMPTS], "greedy": greedy_ids,
           "logits": logits_files, "vocab": vocab, "dtype": "float32"}
    exp.update(extra or {})
    exp.update({"transformers": transformers.__version__, "torch": torch.__version__, "seed": seed,
                "attn_implementation": "eager", "greedy_min_margin": margins})
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(exp, f, indent=1)
        f.write("\n")
    return margins


def save_and_oracle(root, name, model, model_cls, seed):
    """model saved as a Hugging Face directory root/name (no generation_config.json), read back
    with eager attention, and its oracle outputs written next to it"""
    out = os.path.join(root, name)
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out, safe_serialization=True)
    p = os.path.join(out, "generation_config.json")
    if os.path.exists(p):
        os.remove(p)
    back = model_cls.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    print(name, "margins", write_oracle(out, back, back.config.vocab_size, seed))


def run(root, models, make):
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(root, exist_ok=True)
    for name, spec in models.items():
        make(name, spec)
    return 0
