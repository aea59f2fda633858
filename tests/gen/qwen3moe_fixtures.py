#!/usr/bin/env python3
"""qwen3moe_fixtures.py - tiny random Qwen3-MoE checkpoints and transformers' logits for them.

transformers' Qwen3MoeForCausalLM is the oracle for hmoe's Qwen3-MoE forward pass. This script builds
four tiny random models (fixed seeds), saves each as a Hugging Face checkpoint directory
(config.json + model.safetensors) under tests/data/qwen3moe/<name>/, loads it back from disk and
records, per model, three prompts, the float32 logits of every prompt position, a 32-token greedy
continuation of each prompt and (bf16-saved models) the logits computed in bfloat16.
See tests/data/qwen3moe/README.md for what each model exercises and the file formats.

    pip install torch            # CPU is enough
    pip install transformers==5.24.0 safetensors numpy
    python3 tests/gen/qwen3moe_fixtures.py       # rewrites tests/data/qwen3moe/

The committed files were produced with (exact versions):
    python 3.11.7, torch 2.15.0+cu132 (run on CPU), transformers 5.24.0, safetensors 0.8.0,
    numpy 2.4.6
The run is deterministic (fixed seeds, one CPU thread, deterministic algorithms): running it twice
gives byte-identical files. Weights depend only on torch's CPU generator; logits can differ in the
last bits on another CPU or torch build.

Saved layout. In memory, transformers 5.24 keeps the experts of a sparse layer fused
(`mlp.experts.gate_up_proj` [E, 2*moe_inter, hidden] = [gate; up], `mlp.experts.down_proj`
[E, hidden, moe_inter]). Its save_pretrained converts them back to the Hugging Face hub layout
(`mlp.experts.<e>.{gate,up,down}_proj.weight`, as in Qwen/Qwen3-30B-A3B), so with 5.24.0 the file
written by save_pretrained is kept as it is. The script checks that: the file must hold exactly the
hub names and shapes (expected_layout()), and every per-expert tensor must equal, bit for bit, its
slice of the fused in-memory tensor. Should a transformers version write another layout, the file
is rewritten here with the `safetensors` package into the hub layout (rewrite_hub_layout()). Either
way the saved directory is then reloaded with Qwen3MoeForCausalLM.from_pretrained and its logits
must be bit-identical to those of the in-memory model.

Other choices:
- RMSNorm weights (input/post-attention/final norms and q_norm/k_norm) are initialised to ones by
  transformers; they are drawn uniformly from [0.5, 1.5) here so a weight applied as (1 + w) or
  not at all would show.
- The reference uses attn_implementation="eager" and experts_implementation="eager" (the plain
  code of modeling_qwen3_moe.py); the defaults (sdpa, grouped_mm) are run too and their largest
  difference is printed for information only.
- Reference logits are computed from the directory read back from disk (weights upcast to float32
  where saved in bfloat16), so they are exactly what the file holds.
- bf16 models are made by casting the parameters only: model.to(bfloat16) would also round the
  float32 RoPE inv_freq buffer, which from_pretrained(dtype=bfloat16) keeps in float32.
- Self-consistency: the 23-token prompt's logits computed at once must match those computed one
  token at a time through a DynamicCache (`cache=`: 5.24's name for `past_key_values`, which is a
  deprecated alias until 5.40) within 1e-5 of the largest logit.
"""
import json
import os
import shutil
import sys

import numpy as np
import safetensors
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "qwen3moe")

TRANSFORMERS_VERSION = "5.24.0"
PROMPT_LENS = (1, 7, 23)
N_GREEDY = 32
MIN_DISTINCT = 4  # each greedy continuation must have at least this many distinct tokens
MIN_MARGIN = 5e-3  # smallest top1 - top2 logit gap allowed along a greedy continuation
KV_RTOL = 1e-5
REF_IMPL = dict(attn_implementation="eager", experts_implementation="eager")

COMMON = dict(
    max_position_embeddings=256,
    attention_dropout=0.0,
    attention_bias=False,
    output_router_logits=False,
    use_sliding_window=False,
    sliding_window=None,
    hidden_act="silu",
)

# name -> (init seed, dtype saved, config)
MODELS = {
    "a": (
        13,
        torch.float32,
        dict(
            vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=32, intermediate_size=96, norm_topk_prob=True,
            tie_word_embeddings=False, rope_theta=10000.0, rms_norm_eps=1e-6,
            initializer_range=0.15,
        ),
    ),
    "b": (
        24,
        torch.float32,
        dict(
            vocab_size=384, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=1, head_dim=32, num_experts=8, num_experts_per_tok=3,
            moe_intermediate_size=48, intermediate_size=96, norm_topk_prob=False,
            tie_word_embeddings=True, mlp_only_layers=[1], rope_theta=1e6, rms_norm_eps=1e-5,
            initializer_range=0.2,
        ),
    ),
    "c": (
        44,
        torch.bfloat16,
        dict(
            vocab_size=256, hidden_size=96, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=8, head_dim=8, num_experts=16, num_experts_per_tok=4,
            moe_intermediate_size=32, intermediate_size=64, decoder_sparse_step=2,
            norm_topk_prob=True, tie_word_embeddings=False, rope_theta=1e6, rms_norm_eps=1e-6,
            initializer_range=0.2,
        ),
    ),
    "q": (
        48,
        torch.bfloat16,
        dict(
            vocab_size=512, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64, num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=256, intermediate_size=256, norm_topk_prob=True,
            tie_word_embeddings=False, rope_theta=1e6, rms_norm_eps=1e-6,
            initializer_range=0.1,
        ),
    ),
}


def is_sparse(cfg, i):
    """The rule of Qwen3MoeDecoderLayer.__init__ in transformers 5.24."""
    return (
        i not in cfg.mlp_only_layers
        and cfg.num_experts > 0
        and (i + 1) % cfg.decoder_sparse_step == 0
    )


def expected_layout(cfg):
    """Tensor name -> shape of a hub Qwen3-MoE checkpoint (one tensor per expert)."""
    H, V, D = cfg.hidden_size, cfg.vocab_size, cfg.head_dim
    nq, nkv, I, E = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.moe_intermediate_size, cfg.num_experts
    t = {"model.embed_tokens.weight": [V, H], "model.norm.weight": [H]}
    if not cfg.tie_word_embeddings:
        t["lm_head.weight"] = [V, H]
    for L in range(cfg.num_hidden_layers):
        p = f"model.layers.{L}."
        t[p + "input_layernorm.weight"] = [H]
        t[p + "post_attention_layernorm.weight"] = [H]
        t[p + "self_attn.q_proj.weight"] = [nq * D, H]
        t[p + "self_attn.k_proj.weight"] = [nkv * D, H]
        t[p + "self_attn.v_proj.weight"] = [nkv * D, H]
        t[p + "self_attn.o_proj.weight"] = [H, nq * D]
        t[p + "self_attn.q_norm.weight"] = [D]
        t[p + "self_attn.k_norm.weight"] = [D]
        if is_sparse(cfg, L):
            t[p + "mlp.gate.weight"] = [E, H]
            for e in range(E):
                t[p + f"mlp.experts.{e}.gate_proj.weight"] = [I, H]
                t[p + f"mlp.experts.{e}.up_proj.weight"] = [I, H]
                t[p + f"mlp.experts.{e}.down_proj.weight"] = [H, I]
        else:
            F = cfg.intermediate_size
            t[p + "mlp.gate_proj.weight"] = [F, H]
            t[p + "mlp.up_proj.weight"] = [F, H]
            t[p + "mlp.down_proj.weight"] = [H, F]
    return t


def hub_state_dict(model):
    """The in-memory weights under hub names (fused experts split per expert)."""
    cfg = model.config
    I = cfg.moe_intermediate_size
    out = {}
    for name, p in model.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        if name.endswith("mlp.experts.gate_up_proj"):
            pfx = name[: -len("gate_up_proj")]
            for e in range(p.shape[0]):
                out[f"{pfx}{e}.gate_proj.weight"] = p[e, :I, :]
                out[f"{pfx}{e}.up_proj.weight"] = p[e, I:, :]
        elif name.endswith("mlp.experts.down_proj"):
            pfx = name[: -len("down_proj")]
            for e in range(p.shape[0]):
                out[f"{pfx}{e}.down_proj.weight"] = p[e]
        else:
            out[name] = p
    return {k: v.detach().contiguous().clone() for k, v in out.items()}


def rewrite_hub_layout(model, path):
    save_file(hub_state_dict(model), path, metadata={"format": "pt"})


def check_file(model, path):
    """True when the file has exactly the hub layout and the in-memory values, bit for bit."""
    want = expected_layout(model.config)
    ref = hub_state_dict(model)
    assert set(want) == set(ref), sorted(set(want) ^ set(ref))
    with safe_open(path, "pt") as f:
        keys = set(f.keys())
        if keys != set(want):
            print(f"    layout differs from the hub's: extra {sorted(keys - set(want))[:4]}, "
                  f"missing {sorted(set(want) - keys)[:4]}")
            return False
        for k in sorted(keys):
            t = f.get_tensor(k)
            if list(t.shape) != want[k] or t.dtype != ref[k].dtype or not torch.equal(t, ref[k]):
                print(f"    {k}: {list(t.shape)} {t.dtype} differs from {want[k]} {ref[k].dtype}")
                return False
    return True


def make_config(name, spec):
    cfg = Qwen3MoeConfig(**COMMON, **spec, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    assert cfg.model_type == "qwen3_moe"
    return cfg


def build(seed, cfg):
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(cfg)
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for n, p in sorted(model.named_parameters()):
            if n.endswith("norm.weight"):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
    for i, layer in enumerate(model.model.layers):
        sparse = type(layer.mlp).__name__ == "Qwen3MoeSparseMoeBlock"
        assert sparse == is_sparse(cfg, i), (i, type(layer.mlp).__name__)
    return model.eval()


def prompts_for(seed, vocab):
    g = torch.Generator().manual_seed(seed + 2000)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in PROMPT_LENS]


@torch.no_grad()
def logits_of(model, ids):
    x = torch.tensor([ids], dtype=torch.long)
    return model(input_ids=x, use_cache=False).logits[0].float()


@torch.no_grad()
def logits_incremental(model, ids):
    cache = transformers.DynamicCache(config=model.config)
    rows = []
    for t in ids:
        out = model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True)
        rows.append(out.logits[0, -1].float())
    return torch.stack(rows)


@torch.no_grad()
def greedy(model, ids):
    x = torch.tensor([ids], dtype=torch.long)
    out = model.generate(
        input_ids=x,
        attention_mask=torch.ones_like(x),
        do_sample=False,
        max_new_tokens=N_GREEDY,
        eos_token_id=None,
        pad_token_id=0,
        use_cache=True,
        output_logits=True,
        return_dict_in_generate=True,
    )
    new = out.sequences[0, len(ids):].tolist()
    assert len(new) == N_GREEDY
    margin = float("inf")
    for step, lg in enumerate(out.logits):
        top = torch.topk(lg[0].float(), 2).values
        margin = min(margin, float(top[0] - top[1]))
        assert int(lg[0].argmax()) == new[step]
    return new, margin


def write_f32(path, t):
    a = t.detach().to(torch.float32).contiguous().numpy().astype("<f4", copy=False)
    with open(path, "wb") as f:
        f.write(a.tobytes())


def rel_err(a, b):
    return float((a - b).abs().max() / b.abs().max())


def make_model(name, seed, save_dtype, spec):
    out_dir = os.path.join(DATA, name)
    cfg = make_config(name, spec)
    model = build(seed, cfg)
    if save_dtype != torch.float32:
        # Parameters only: model.to() would also round the float32 RoPE inv_freq buffer to bf16,
        # which from_pretrained(dtype=bfloat16) does not do.
        with torch.no_grad():
            for p in model.parameters():
                p.data = p.data.to(save_dtype)
        assert model.model.rotary_emb.inv_freq.dtype == torch.float32
    dtype_name = {torch.float32: "float32", torch.bfloat16: "bfloat16"}[save_dtype]
    sparse_layers = [i for i in range(cfg.num_hidden_layers) if is_sparse(cfg, i)]
    print(f"[{name}] seed {seed}, saved {dtype_name}, sparse layers {sparse_layers}")

    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True)
    st = os.path.join(out_dir, "model.safetensors")
    os.chmod(st, 0o644)  # the writer creates it 0600
    assert sorted(os.listdir(out_dir)) == ["config.json", "generation_config.json", "model.safetensors"], os.listdir(out_dir)
    # generation_config.json only says use_cache / output_* defaults (no bos/eos, no sampling): drop it.
    with open(os.path.join(out_dir, "generation_config.json")) as f:
        gen = json.load(f)
    assert set(gen) <= {"_from_model_config", "output_attentions", "output_hidden_states",
                        "transformers_version", "use_cache"}, gen
    os.remove(os.path.join(out_dir, "generation_config.json"))
    if check_file(model, st):
        print("    save_pretrained wrote the hub per-expert layout: file kept as written")
    else:
        print("    save_pretrained wrote another layout: rewriting model.safetensors in the hub layout")
        rewrite_hub_layout(model, st)
        assert check_file(model, st)

    prompts = prompts_for(seed, cfg.vocab_size)

    # The in-memory model (upcast) and the directory read back must agree bit for bit.
    mem = model.float().eval()
    mem.set_attn_implementation(REF_IMPL["attn_implementation"])
    mem.set_experts_implementation(REF_IMPL["experts_implementation"])
    ref = Qwen3MoeForCausalLM.from_pretrained(out_dir, dtype=torch.float32, **REF_IMPL).float().eval()
    assert ref.config._attn_implementation == "eager" and ref.config._experts_implementation == "eager"
    for p in prompts:
        assert torch.equal(logits_of(mem, p), logits_of(ref, p)), "reloaded model differs from the in-memory one"
    print("    reloaded checkpoint: logits bit-identical to the in-memory model")
    del mem, model

    result = {
        "prompts": prompts,
        "greedy": [],
        "logits": [],
        "vocab": cfg.vocab_size,
        "dtype": dtype_name,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    margins = []
    for i, p in enumerate(prompts):
        lg = logits_of(ref, p)
        assert lg.shape == (len(p), cfg.vocab_size)
        assert float(lg.std()) > 0.1, f"logits too flat: std {float(lg.std())}"
        fn = f"logits_{i}.f32"
        write_f32(os.path.join(out_dir, fn), lg)
        result["logits"].append(fn)
        ids, margin = greedy(ref, p)
        assert ids[0] == int(lg[-1].argmax())
        distinct = len(set(ids))
        print(f"    prompt {i} (len {len(p)}): logits std {float(lg.std()):.3f}, greedy {distinct} distinct, "
              f"min top1-top2 margin {margin:.4g}: {ids}")
        assert distinct >= MIN_DISTINCT, f"greedy continuation has only {distinct} distinct tokens"
        assert margin >= MIN_MARGIN, f"greedy continuation has a near tie (margin {margin})"
        result["greedy"].append(ids)
        margins.append(margin)

    # Self-consistency: whole-prompt logits == one-token-at-a-time logits through the KV cache.
    p = prompts[-1]
    full, inc = logits_of(ref, p), logits_incremental(ref, p)
    e = rel_err(inc, full)
    print(f"    KV-cache check (len {len(p)}): max|full-incremental| / max|full| = {e:.3g} "
          f"(max abs {float((full - inc).abs().max()):.3g})")
    assert e <= KV_RTOL, e

    # Information only: the default kernels (sdpa attention, grouped_mm experts).
    dflt = Qwen3MoeForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()
    d = max(rel_err(logits_of(dflt, q), logits_of(ref, q)) for q in prompts)
    print(f"    default kernels ({dflt.config._attn_implementation}, {dflt.config._experts_implementation}) "
          f"vs eager: max rel diff {d:.3g}")
    del dflt

    if save_dtype == torch.bfloat16:
        bf = Qwen3MoeForCausalLM.from_pretrained(out_dir, dtype=torch.bfloat16, **REF_IMPL).eval()
        assert bf.model.embed_tokens.weight.dtype == torch.bfloat16
        result["logits_bf16"] = []
        for i, q in enumerate(prompts):
            lb = logits_of(bf, q)
            fn = f"logits_bf16_{i}.f32"
            write_f32(os.path.join(out_dir, fn), lb)
            result["logits_bf16"].append(fn)
            lf = logits_of(ref, q)
            agree = float((lb.argmax(-1) == lf.argmax(-1)).float().mean())
            print(f"    bf16 compute, prompt {i}: max rel diff vs float32 {rel_err(lb, lf):.3g}, "
                  f"argmax agreement {agree:.2f}")
        del bf

    # Extra keys (not needed to use the files, kept for the reader).
    result["seed"] = seed
    result["sparse_layers"] = sparse_layers
    result["attn_implementation"] = REF_IMPL["attn_implementation"]
    result["experts_implementation"] = REF_IMPL["experts_implementation"]
    result["greedy_min_margin"] = [round(m, 6) for m in margins]
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        f.write(dump_json(result))


def dump_json(obj):
    """One key per line; a list of lists gets one inner list per line."""
    def val(v):
        if isinstance(v, list) and v and all(isinstance(x, list) for x in v):
            return "[\n" + ",\n".join("  " + json.dumps(x) for x in v) + "\n ]"
        return json.dumps(v)
    return "{\n" + ",\n".join(f" {json.dumps(k)}: {val(v)}" for k, v in obj.items()) + "\n}\n"


def main():
    if transformers.__version__ != TRANSFORMERS_VERSION:
        sys.exit(f"transformers {TRANSFORMERS_VERSION} is required (found {transformers.__version__})")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    try:
        transformers.utils.logging.disable_progress_bar()
    except AttributeError:
        pass
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"safetensors {safetensors.__version__}, numpy {np.__version__}")
    os.makedirs(DATA, exist_ok=True)
    names = sys.argv[1:] or list(MODELS)
    for name in names:
        seed, dtype, spec = MODELS[name]
        make_model(name, seed, dtype, spec)
    total = 0
    for name in sorted(os.listdir(DATA)):
        d = os.path.join(DATA, name)
        if os.path.isdir(d):
            total += sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"total size of the model directories: {total} bytes")


if __name__ == "__main__":
    main()
