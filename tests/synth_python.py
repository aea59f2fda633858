#!/usr/bin/env python3
"""`hmoe synth` against llama.cpp's expectations, checked with the `gguf` Python package:
- every preset's tensor plan (`hmoe synth --plan`): each name is one of the tensor names llama.cpp
  defines for the architecture (gguf.constants.MODEL_TENSORS / TENSOR_NAMES), and each shape is the
  one llama.cpp's converter gives the real model, computed here from the model's real
  Hugging Face config.json (tests/data/model_configs) with llama.cpp's rules (ne[0] = HF's last
  dimension; experts stacked as ne[2]; MLA kv_b split into k_b {nope, kv_lora, heads} and
  v_b {kv_lora, v, heads}); quantized types only where rows are whole blocks (GGML_QUANT_SIZES);
- the qwen3-tiny file written for real: read by gguf.GGUFReader, metadata under llama.cpp's key
  names (gguf.Keys), every tensor dequantized by gguf.quants finite and of sane magnitude.
Usage: synth_python.py HMOE_BINARY"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf
from gguf.constants import MODEL_ARCH_NAMES, MODEL_TENSORS, TENSOR_NAMES, GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "data", "model_configs")
PRESETS = {  # preset -> real config
    "qwen3-30b-a3b": "Qwen3-30B-A3B",
    "qwen3-235b-a22b": "Qwen3-235B-A22B",
    "deepseek-v2-lite": "DeepSeek-V2-Lite",
    "deepseek-v3": "DeepSeek-V3",
    "mixtral-8x7b": "Mixtral-8x7B-v0.1",
    "gpt-oss-20b": "gpt-oss-20b",
    "qwen3-tiny": None,
}
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg)


def expected_tensors(c):
    """llama.cpp GGUF tensors {name: ne} of the model described by HF config c."""
    mt = c["model_type"]
    H, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    nh = c["num_attention_heads"]
    nkv = c.get("num_key_value_heads", nh)
    hd = c.get("head_dim") or H // nh
    E = c.get("num_experts") or c.get("num_local_experts") or c.get("n_routed_experts") or 0
    t = {"token_embd.weight": [H, V], "output_norm.weight": [H]}
    if not c.get("tie_word_embeddings", False):
        t["output.weight"] = [H, V]
    for i in range(L):
        b = f"blk.{i}."
        t[b + "attn_norm.weight"] = [H]
        if mt.startswith("deepseek"):
            nope, rope, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
            kvl, ql = c["kv_lora_rank"], c.get("q_lora_rank")
            if ql:
                t[b + "attn_q_a.weight"] = [H, ql]
                t[b + "attn_q_a_norm.weight"] = [ql]
                t[b + "attn_q_b.weight"] = [ql, nh * (nope + rope)]
            else:
                t[b + "attn_q.weight"] = [H, nh * (nope + rope)]
            t[b + "attn_kv_a_mqa.weight"] = [H, kvl + rope]
            t[b + "attn_kv_a_norm.weight"] = [kvl]
            t[b + "attn_k_b.weight"] = [nope, kvl, nh]
            t[b + "attn_v_b.weight"] = [kvl, vd, nh]
            t[b + "attn_output.weight"] = [nh * vd, H]
        else:
            t[b + "attn_q.weight"] = [H, nh * hd]
            t[b + "attn_k.weight"] = [H, nkv * hd]
            t[b + "attn_v.weight"] = [H, nkv * hd]
            t[b + "attn_output.weight"] = [nh * hd, H]
            if mt == "qwen3_moe":
                t[b + "attn_q_norm.weight"] = [hd]
                t[b + "attn_k_norm.weight"] = [hd]
            if mt == "gpt_oss":
                t[b + "attn_q.bias"] = [nh * hd]
                t[b + "attn_k.bias"] = [nkv * hd]
                t[b + "attn_v.bias"] = [nkv * hd]
                t[b + "attn_output.bias"] = [H]
                t[b + "attn_sinks.weight"] = [nh]
        t[b + ("post_attention_norm.weight" if mt == "gpt_oss" else "ffn_norm.weight")] = [H]
        dense = mt.startswith("deepseek") and i < c.get("first_k_dense_replace", 0)
        dense = dense or (mt.startswith("qwen") and i in c.get("mlp_only_layers", []))
        if dense:
            F = c["intermediate_size"]
            t[b + "ffn_gate.weight"] = [H, F]
            t[b + "ffn_up.weight"] = [H, F]
            t[b + "ffn_down.weight"] = [F, H]
            continue
        FE = c.get("moe_intermediate_size") or c["intermediate_size"]
        t[b + "ffn_gate_inp.weight"] = [H, E]
        t[b + "ffn_gate_exps.weight"] = [H, FE, E]
        t[b + "ffn_up_exps.weight"] = [H, FE, E]
        t[b + "ffn_down_exps.weight"] = [FE, H, E]
        if mt == "gpt_oss":
            t[b + "ffn_gate_inp.bias"] = [E]
            t[b + "ffn_gate_exps.bias"] = [FE, E]
            t[b + "ffn_up_exps.bias"] = [FE, E]
            t[b + "ffn_down_exps.bias"] = [H, E]
        if c.get("topk_method") == "noaux_tc":
            t[b + "exp_probs_b.bias"] = [E]
        ns = c.get("n_shared_experts") or 0
        if ns:
            SF = ns * FE
            t[b + "ffn_gate_shexp.weight"] = [H, SF]
            t[b + "ffn_up_shexp.weight"] = [H, SF]
            t[b + "ffn_down_shexp.weight"] = [SF, H]
    return t


def allowed_names(arch_name):
    arch = next(a for a, n in MODEL_ARCH_NAMES.items() if n == arch_name)
    return {TENSOR_NAMES[x] for x in MODEL_TENSORS[arch]}


def name_ok(name, templates):
    base, _, suffix = name.rpartition(".")
    if suffix not in ("weight", "bias"):
        return False
    if base.startswith("blk."):
        parts = base.split(".", 2)
        if not parts[1].isdigit():
            return False
        return "blk.{bid}." + parts[2] in templates
    return base in templates


def plan(binary, preset):
    out = subprocess.run([binary, "synth", "--preset", preset, "--plan"], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)


def check_types(preset, tensors):
    for t in tensors:
        qt = GGMLQuantizationType[t["type"]]
        block, _ = GGML_QUANT_SIZES[qt]
        check(t["ne"][0] % block == 0, f"{preset}: {t['name']} {t['type']} ne0 {t['ne'][0]} % {block}")
        if t["name"].endswith("norm.weight") or t["name"].endswith(".bias") or "gate_inp" in t["name"]:
            check(t["type"] == "F32", f"{preset}: {t['name']} should be F32, is {t['type']}")


def check_info(binary, path, reader):
    """`hmoe info --json` on a GGUF agrees with what gguf.GGUFReader sees in the file."""
    info = json.loads(subprocess.run([binary, "info", "--json", "--tensors", path], capture_output=True,
                                     text=True, check=True).stdout)
    n_el = sum(int(t.n_elements) for t in reader.tensors)
    n_b = sum(int(t.n_bytes) for t in reader.tensors)
    check(info["architecture"] == "qwen3moe" and info["format"] == "gguf", "info: architecture")
    check(info["n_tensors"] == len(reader.tensors), "info: tensor count")
    check(info["params_total"] == n_el, f"info: params {info['params_total']} vs {n_el}")
    check(info["bytes_total"] == n_b and sum(info["bytes_by_category"].values()) == n_b, "info: bytes")
    routed = sum(int(t.n_bytes) for t in reader.tensors if "_exps" in t.name)
    check(info["bytes_by_category"]["routed experts"] == routed, "info: routed expert bytes")
    check(info["placement"]["experts_cpu_cpu_bytes"] == routed and
          info["placement"]["experts_cpu_gpu_bytes"] == n_b - routed, "info: placement")
    routed_el = sum(int(t.n_elements) for t in reader.tensors if "_exps" in t.name)
    check(info["params_active"] == n_el - routed_el + routed_el // 8 * 2, "info: active params (top-2 of 8)")
    hp = info["hparams"]
    check(hp["n_layers"] == 2 and hp["n_experts"] == 8 and hp["n_experts_used"] == 2 and
          hp["hidden"] == 256 and hp["tie_embeddings"] is True, f"info: hparams {hp}")
    check(len(info["tensors"]) == len(reader.tensors), "info: --tensors table")


def write_safetensors(path, tensors):
    """Minimal safetensors writer (the format: u64 header length, JSON header, data)."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, arr in tensors.items():
        b = arr.astype(np.float16).tobytes()
        header[name] = {"dtype": "F16", "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def check_info_hf(binary, d):
    """`hmoe info` on a tiny Hugging Face qwen3_moe directory (config.json + safetensors)."""
    hf = os.path.join(d, "hf")
    os.makedirs(hf)
    cfg = {"model_type": "qwen3_moe", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 1,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 64,
           "moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2,
           "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
           "tie_word_embeddings": False, "norm_topk_prob": True}
    json.dump(cfg, open(os.path.join(hf, "config.json"), "w"))
    z = np.zeros
    t = {"model.embed_tokens.weight": z((64, 32)), "lm_head.weight": z((64, 32)), "model.norm.weight": z(32),
         "model.layers.0.input_layernorm.weight": z(32), "model.layers.0.post_attention_layernorm.weight": z(32),
         "model.layers.0.self_attn.q_proj.weight": z((32, 32)), "model.layers.0.self_attn.k_proj.weight": z((16, 32)),
         "model.layers.0.self_attn.v_proj.weight": z((16, 32)), "model.layers.0.self_attn.o_proj.weight": z((32, 32)),
         "model.layers.0.self_attn.q_norm.weight": z(8), "model.layers.0.self_attn.k_norm.weight": z(8),
         "model.layers.0.mlp.gate.weight": z((4, 32))}
    for e in range(4):
        for p, shape in (("gate_proj", (16, 32)), ("up_proj", (16, 32)), ("down_proj", (32, 16))):
            t[f"model.layers.0.mlp.experts.{e}.{p}.weight"] = z(shape)
    write_safetensors(os.path.join(hf, "model.safetensors"), t)
    info = json.loads(subprocess.run([binary, "info", "--json", hf], capture_output=True, text=True,
                                     check=True).stdout)
    total = sum(int(np.prod(a.shape)) for a in t.values())
    routed = sum(int(np.prod(a.shape)) for n, a in t.items() if ".experts." in n)
    check(info["format"] == "safetensors" and info["architecture"] == "qwen3_moe", f"hf info: {info.get('architecture')}")
    check(info["params_total"] == total, f"hf info: params {info['params_total']} vs {total}")
    check(info["params_active"] == total - routed + routed // 4 * 2, "hf info: active params")
    check(info["bytes_by_category"]["routed experts"] == 2 * routed, "hf info: routed bytes")
    check(info["bytes_by_category"]["router"] == 2 * 4 * 32, "hf info: router bytes")
    check(info["hparams"]["n_experts"] == 4, "hf info: hparams")
    r = subprocess.run([binary, "info", os.path.join(d, "missing")], capture_output=True, text=True)
    check(r.returncode == 1 and "no such file" in r.stderr, "info on a missing path")


def main(binary):
    for preset, cfg in PRESETS.items():
        p = plan(binary, preset)
        templates = allowed_names(p["architecture"])
        names = [t["name"] for t in p["tensors"]]
        check(len(names) == len(set(names)), f"{preset}: duplicate names")
        for n in names:
            check(name_ok(n, templates), f"{preset}: '{n}' is not a llama.cpp {p['architecture']} tensor name")
        check_types(preset, p["tensors"])
        if cfg:
            c = json.load(open(os.path.join(CONFIGS, cfg, "config.json")))
            exp = expected_tensors(c)
            got = {t["name"]: t["ne"] for t in p["tensors"]}
            check(set(got) == set(exp), f"{preset}: names differ: extra {sorted(set(got) - set(exp))[:5]} "
                                        f"missing {sorted(set(exp) - set(got))[:5]}")
            for n in exp:
                if n in got:
                    check(got[n] == exp[n], f"{preset}: {n}: ours {got[n]}, llama.cpp {exp[n]}")
        print(f"{preset}: {len(names)} tensors, {p['total_bytes'] / 1e9:.2f} GB checked")

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tiny.gguf")
        subprocess.run([binary, "synth", "--preset", "qwen3-tiny", "-o", path, "--seed", "7"],
                       check=True, capture_output=True)
        r = gguf.GGUFReader(path)
        f = r.fields
        K = gguf.Keys
        def val(key):
            return f[key].contents() if key in f else None
        a = "qwen3moe"
        check(val(K.General.ARCHITECTURE) == a, "architecture")
        for key, want in ((K.LLM.BLOCK_COUNT, 2), (K.LLM.EMBEDDING_LENGTH, 256), (K.LLM.EXPERT_COUNT, 8),
                          (K.LLM.EXPERT_USED_COUNT, 2), (K.LLM.EXPERT_FEED_FORWARD_LENGTH, 256),
                          (K.Attention.HEAD_COUNT, 4), (K.Attention.HEAD_COUNT_KV, 2),
                          (K.Attention.KEY_LENGTH, 64), (K.LLM.CONTEXT_LENGTH, 4096)):
            check(val(key.format(arch=a)) == want, f"{key.format(arch=a)} = {val(key.format(arch=a))}, want {want}")
        check(abs(val(K.Rope.FREQ_BASE.format(arch=a)) - 1e6) < 1, "rope freq base")
        toks = val(K.Tokenizer.LIST)
        check(toks is not None and len(toks) == 151936 and toks[-1] == "[PAD151935]", "padded vocab")
        check(val(K.Tokenizer.MODEL) == "gpt2", "tokenizer model")
        p = {t["name"]: t for t in plan(binary, "qwen3-tiny")["tensors"]}
        check(len(r.tensors) == len(p), "tensor count")
        for t in r.tensors:
            pt = p.get(t.name)
            check(pt is not None and [int(x) for x in t.shape] == pt["ne"] and t.tensor_type.name == pt["type"],
                  f"tiny: {t.name} differs from the plan")
            x = dequantize(t.data, t.tensor_type).astype(np.float64)
            check(np.isfinite(x).all(), f"tiny: {t.name} has non-finite values")
            if "norm" in t.name:
                check(np.all(x == 1.0), f"tiny: {t.name} is not all ones")
            else:
                check(0.005 < x.std() < 0.2 and abs(x.mean()) < 0.01, f"tiny: {t.name} std {x.std():.4f} mean {x.mean():.4f}")
        # same seed, same bytes; another seed, other bytes
        path2 = os.path.join(d, "tiny2.gguf")
        subprocess.run([binary, "synth", "--preset", "qwen3-tiny", "-o", path2, "--seed", "7", "--threads", "1"],
                       check=True, capture_output=True)
        check(open(path, "rb").read() == open(path2, "rb").read(), "synth is not deterministic across thread counts")
        check_info(binary, path, r)
        check_info_hf(binary, d)
    print(f"synth_python: {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
