#!/usr/bin/env python3
"""An FP8 checkpoint of fixture model "q" in the layout of Qwen3-*-FP8 and DeepSeek-V3 releases:
every attention projection and routed-expert projection stored as float8_e4m3fn with a
"<name>_scale_inv" float32 tensor of one scale per 128 x 128 block (w ~ fp8 * scale_inv), and
config.json's quantization_config {"quant_method": "fp8", "weight_block_size": [128, 128]}.
Embeddings, lm_head, norms and routers stay bfloat16, as in those releases.

The expected logits and greedy continuations come from transformers (eager attention and experts,
float32) running model "q" with its projections replaced by the dequantized FP8 values
(fp8.float() * scale), so they test the loader and the FP8 kernels, not the quantization.

Usage: python3 tests/gen/qwen3moe_fp8_fixture.py   (writes tests/data/qwen3moe/q_fp8)
Needs the same torch / transformers as qwen3moe_fixtures.py.
"""
import json
import os
import shutil
import sys

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3moe_fixtures as fx  # noqa: E402

SRC, NAME, BLOCK = "q", "q_fp8", 128


def fp8_blocks(w):
    """w [rows, cols] float32 -> (codes, scale_inv [ceil(rows/128), ceil(cols/128)], dequantized):
    per block scale = max|w| / 448 in float32, codes = (w / scale) rounded by torch to e4m3fn"""
    r, c = w.shape
    tr, tc = -(-r // BLOCK), -(-c // BLOCK)
    s = torch.ones(tr, tc, dtype=torch.float32)
    q = torch.empty(r, c, dtype=torch.float8_e4m3fn)
    deq = torch.empty(r, c, dtype=torch.float32)
    for i in range(tr):
        for j in range(tc):
            rs, cs = slice(i * BLOCK, (i + 1) * BLOCK), slice(j * BLOCK, (j + 1) * BLOCK)
            blk = w[rs, cs].float()
            amax = float(blk.abs().max())
            sc = torch.tensor(amax / 448.0 if amax > 0 else 1.0, dtype=torch.float32)
            qb = (blk / sc).to(torch.float8_e4m3fn)
            assert not torch.isnan(qb.float()).any()
            s[i, j], q[rs, cs], deq[rs, cs] = sc, qb, qb.float() * sc
    return q, s, deq


def is_fp8(name):
    return (".self_attn." in name and name.endswith("_proj.weight")) or ".mlp.experts." in name


def main():
    if transformers.__version__ != fx.TRANSFORMERS_VERSION:
        sys.exit(f"transformers {fx.TRANSFORMERS_VERSION} is required (found {transformers.__version__})")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    seed, dtype, spec = fx.MODELS[SRC]
    assert dtype == torch.bfloat16
    cfg = fx.make_config(SRC, spec)
    model = fx.build(seed, cfg)
    with torch.no_grad():  # the bf16 checkpoint's values, computed in float32
        for p in model.parameters():
            p.data = p.data.to(torch.bfloat16).float()
    I = cfg.moe_intermediate_size
    tensors, n_fp8 = {}, 0
    hub = fx.hub_state_dict(model)
    deq = {}
    for name, w in hub.items():
        if is_fp8(name):
            q, s, d = fp8_blocks(w)
            tensors[name], tensors[name + "_scale_inv"], deq[name] = q, s, d
            n_fp8 += 1
        else:
            tensors[name] = w.to(torch.bfloat16)
    # the in-memory model gets the dequantized weights (fused experts: gate rows, then up rows)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("mlp.experts.gate_up_proj"):
                pfx = pname[: -len("gate_up_proj")]
                for e in range(p.shape[0]):
                    p[e, :I] = deq[f"{pfx}{e}.gate_proj.weight"]
                    p[e, I:] = deq[f"{pfx}{e}.up_proj.weight"]
            elif pname.endswith("mlp.experts.down_proj"):
                pfx = pname[: -len("down_proj")]
                for e in range(p.shape[0]):
                    p[e] = deq[f"{pfx}{e}.down_proj.weight"]
            elif pname in deq:
                p.copy_(deq[pname])
    model.set_attn_implementation(fx.REF_IMPL["attn_implementation"])
    model.set_experts_implementation(fx.REF_IMPL["experts_implementation"])
    model = model.float().eval()

    out_dir = os.path.join(fx.DATA, NAME)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    st = os.path.join(out_dir, "model.safetensors")
    save_file(tensors, st, metadata={"format": "pt"})
    os.chmod(st, 0o644)  # the writer creates it 0600
    with safe_open(st, "pt") as f:  # read back: codes and scales as written
        for k in tensors:
            t = f.get_tensor(k)
            assert t.dtype == tensors[k].dtype and torch.equal(t.float(), tensors[k].float()), k
    conf = cfg.to_dict()
    conf["torch_dtype"] = "bfloat16"
    conf["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                   "quant_method": "fp8", "weight_block_size": [BLOCK, BLOCK]}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"[{NAME}] from model {SRC} (seed {seed}): {n_fp8} FP8 tensors with 128 x 128 block scales")

    # prompts as model q's generator makes them, from the first prompt seed whose greedy
    # continuations have no near ties (exact continuations are compared)
    for pseed in range(seed, seed + 50):
        prompts = fx.prompts_for(pseed, cfg.vocab_size)
        runs = [fx.greedy(model, p) for p in prompts]
        if all(len(set(ids)) >= fx.MIN_DISTINCT and m >= fx.MIN_MARGIN for ids, m in runs):
            break
    else:
        sys.exit("no prompt seed without near ties in 50 tries")
    print(f"    prompt seed {pseed}")
    result = {"prompts": prompts, "greedy": [], "logits": [], "vocab": cfg.vocab_size,
              "dtype": "float8_e4m3fn (128 x 128 block scales) + bfloat16",
              "transformers": transformers.__version__, "torch": torch.__version__}
    margins = []
    for i, p in enumerate(prompts):
        lg = fx.logits_of(model, p)
        fn = f"logits_{i}.f32"
        fx.write_f32(os.path.join(out_dir, fn), lg)
        result["logits"].append(fn)
        ids, margin = runs[i]
        print(f"    prompt {i} (len {len(p)}): logits std {float(lg.std()):.3f}, "
              f"min top1-top2 margin {margin:.4g}: {ids}")
        result["greedy"].append(ids)
        margins.append(margin)
    result["seed"] = seed
    result["prompt_seed"] = pseed
    result["source_model"] = SRC
    result["attn_implementation"] = fx.REF_IMPL["attn_implementation"]
    result["experts_implementation"] = fx.REF_IMPL["experts_implementation"]
    result["greedy_min_margin"] = [round(m, 6) for m in margins]
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        f.write(fx.dump_json(result))
    size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    print(f"    {out_dir}: {size} bytes")


if __name__ == "__main__":
    main()
