#!/usr/bin/env python3
"""Cross-checks `hmoe convert` with llama.cpp's own Python package (pip: gguf, numpy):
1. tensor names from gguf.TensorNameMap (the table convert_hf_to_gguf.py maps with), experts
   stacked, Mixtral's q/k rows permuted and DeepSeek's kv_b_proj split into attn_k_b / attn_v_b
   the way convert_hf_to_gguf.py does it, values compared exactly (kept dtypes, F16 casts) or
   byte for byte against gguf.quants.quantize (Q8_0);
2. the metadata keys llama.cpp reads, against config.json;
3. gguf.GGUFReader reads every file: tiny models written here (qwen3_moe with a dense layer,
   qwen2_moe, mixtral) and every transformers checkpoint under tests/data/ (qwen3moe, qwen2moe,
   glm4moe, mixtral, deepseek);
4. gpt-oss (tests/data/gptoss/hf, MXFP4 experts as released, and the same weights in
   transformers' float layout): the tensors and shapes llama.cpp's gpt-oss loader creates
   (llama_model_openai_moe::load_arch_tensors) and the keys it reads, names from gguf's
   TensorNameMap, the experts split and repacked as convert_hf_to_gguf.py's GptOssModel does
   (MXFP4 bytes from the source blocks, no re-quantization; their values dequantized by gguf are
   the MXFP4 values transformers reads), `hmoe logits` of the GGUF equal to that of the Hugging
   Face directory bit for bit and within the fixture's bounds of transformers' logits; a tensor
   of the wrong shape refused, naming it and both shapes.
Usage: convert_python.py HMOE_BINARY"""
import glob
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as QT
    from gguf import GGUFReader
except ImportError:
    print("convert_python: the `gguf` package is missing (pip install gguf numpy)", file=sys.stderr)
    sys.exit(1)

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg)


# ---- safetensors without the safetensors package (bf16 needs no torch) ----------------------

def bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(f):
    u = f.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def e4m3_to_f32(u8):
    """float8_e4m3fn codes from the definition: bias 7, 3 mantissa bits, S.1111.111 is NaN"""
    c = u8.astype(np.int32)
    e, m = (c >> 3) & 15, (c & 7).astype(np.float64)
    v = np.where(e == 0, m * 2.0 ** -9, (1.0 + m / 8.0) * 2.0 ** (e - 7.0))
    v = np.where((c & 0x7F) == 0x7F, np.nan, v)
    return np.where(c & 0x80, -v, v).astype(np.float32)


def st_read(path):
    """name -> float32 array in HF shape, and name -> dtype string."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out, dtypes = {}, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        buf = data[b:e]
        dt = info["dtype"]
        if dt == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        elif dt == "F16":
            a = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        elif dt == "BF16":
            a = bf16_to_f32(np.frombuffer(buf, dtype="<u2"))
        elif dt == "U8":  # gpt-oss's MXFP4 blocks and E8M0 scales, kept as bytes
            a = np.frombuffer(buf, dtype=np.uint8)
        elif dt == "F8_E4M3":  # scaled by its "<name>_scale_inv" blocks in st_read_dir
            a = e4m3_to_f32(np.frombuffer(buf, dtype=np.uint8))
        else:
            raise ValueError(f"{path}: {name}: dtype {dt}")
        out[name] = a.reshape(info["shape"])
        dtypes[name] = dt
    return out, dtypes


def st_read_dir(d):
    index = os.path.join(d, "model.safetensors.index.json")
    files = (sorted(set(json.load(open(index))["weight_map"].values()))
             if os.path.exists(index) else ["model.safetensors"])
    out, dtypes = {}, {}
    for f in files:
        a, b = st_read(os.path.join(d, f))
        out.update(a)
        dtypes.update(b)
    # FP8 weights: value = fp8 * the scale of its 128 x 128 block (float32 product, exact)
    for name in [k for k, dt in dtypes.items() if dt == "F8_E4M3"]:
        sc = out.pop(name + "_scale_inv")
        dtypes.pop(name + "_scale_inv")
        r, c = out[name].shape
        full = np.repeat(np.repeat(sc.astype(np.float32), 128, 0), 128, 1)[:r, :c]
        out[name] = (out[name] * full).astype(np.float32)
    return out, dtypes


def st_write(path, tensors, dtype):
    """float tensors as dtype (F32, F16 or BF16), uint8 ones as U8"""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors.items():
        if getattr(a, "dtype", None) == np.uint8:
            b = a.tobytes()
            header[name] = {"dtype": "U8", "shape": list(a.shape),
                            "data_offsets": [off, off + len(b)]}
            blobs.append(b)
            off += len(b)
            continue
        a = np.asarray(a, dtype=np.float32)
        if dtype == "F32":
            b = a.astype("<f4").tobytes()
        elif dtype == "F16":
            b = a.astype("<f2").tobytes()
        else:
            b = f32_to_bf16(a).astype("<u2").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---- tiny models -----------------------------------------------------------------------------

def tiny_model(d, model_type, dtype, rng):
    V, H, L, NH, NKV, HD, E, K, MI, FI, SI = 96, 64, 3, 4, 2, 16, 4, 2, 32, 64, 40
    mixtral, qwen2 = model_type == "mixtral", model_type == "qwen2_moe"
    cfg = {"model_type": model_type, "vocab_size": V, "hidden_size": H, "num_hidden_layers": L,
           "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD,
           "intermediate_size": FI, "num_experts_per_tok": K, "max_position_embeddings": 512,
           "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu",
           "tie_word_embeddings": False}
    if mixtral:
        cfg.update({"num_local_experts": E, "sliding_window": None})
        dense = []
    else:
        cfg.update({"num_experts": E, "moe_intermediate_size": MI, "norm_topk_prob": not qwen2,
                    "decoder_sparse_step": 1, "mlp_only_layers": [1]})
        dense = [1]
        if qwen2:
            cfg["shared_expert_intermediate_size"] = SI
    t = {}

    def w(name, *shape):
        t[name] = rng.uniform(-1, 1, size=shape).astype(np.float32)

    w("model.embed_tokens.weight", V, H)
    w("model.norm.weight", H)
    w("lm_head.weight", V, H)
    for il in range(L):
        p = f"model.layers.{il}."
        w(p + "input_layernorm.weight", H)
        w(p + "post_attention_layernorm.weight", H)
        w(p + "self_attn.q_proj.weight", NH * HD, H)
        w(p + "self_attn.k_proj.weight", NKV * HD, H)
        w(p + "self_attn.v_proj.weight", NKV * HD, H)
        w(p + "self_attn.o_proj.weight", H, NH * HD)
        if qwen2:
            w(p + "self_attn.q_proj.bias", NH * HD)
            w(p + "self_attn.k_proj.bias", NKV * HD)
            w(p + "self_attn.v_proj.bias", NKV * HD)
        elif not mixtral:
            w(p + "self_attn.q_norm.weight", HD)
            w(p + "self_attn.k_norm.weight", HD)
        if mixtral:
            w(p + "block_sparse_moe.gate.weight", E, H)
            for e in range(E):
                w(p + f"block_sparse_moe.experts.{e}.w1.weight", FI, H)
                w(p + f"block_sparse_moe.experts.{e}.w2.weight", H, FI)
                w(p + f"block_sparse_moe.experts.{e}.w3.weight", FI, H)
        elif il in dense:
            w(p + "mlp.gate_proj.weight", FI, H)
            w(p + "mlp.up_proj.weight", FI, H)
            w(p + "mlp.down_proj.weight", H, FI)
        else:
            w(p + "mlp.gate.weight", E, H)
            for e in range(E):
                w(p + f"mlp.experts.{e}.gate_proj.weight", MI, H)
                w(p + f"mlp.experts.{e}.up_proj.weight", MI, H)
                w(p + f"mlp.experts.{e}.down_proj.weight", H, MI)
            if qwen2:
                w(p + "mlp.shared_expert.gate_proj.weight", SI, H)
                w(p + "mlp.shared_expert.up_proj.weight", SI, H)
                w(p + "mlp.shared_expert.down_proj.weight", H, SI)
                w(p + "mlp.shared_expert_gate.weight", 1, H)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    st_write(os.path.join(d, "model.safetensors"), t, dtype)


# ---- what llama.cpp's convert_hf_to_gguf.py would write ----------------------------------------

ARCHS = {"qwen3_moe": gguf.MODEL_ARCH.QWEN3MOE, "qwen2_moe": gguf.MODEL_ARCH.QWEN2MOE,
         "mixtral": gguf.MODEL_ARCH.LLAMA, "glm4_moe": gguf.MODEL_ARCH.GLM4_MOE,
         "deepseek_v2": gguf.MODEL_ARCH.DEEPSEEK2, "deepseek_v3": gguf.MODEL_ARCH.DEEPSEEK2,
         "kimi_k2": gguf.MODEL_ARCH.DEEPSEEK2}
EXPERT = re.compile(r"^(model\.layers\.\d+\.(?:mlp|block_sparse_moe)\.experts)\.(\d+)\.(\w+)\.weight$")


def permute(w, n_head, n_head_kv):  # convert_hf_to_gguf.py LlamaModel.permute
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def split_kv_b(cfg, name, a):
    """convert_hf_to_gguf.py DeepseekV2Model.modify_tensors: kv_b_proj viewed as
    [n_head_kv, nope + v, kv_lora], split on the middle axis, k_b transposed."""
    n_head_kv, vd, nope = cfg["num_key_value_heads"], cfg["v_head_dim"], cfg["qk_nope_head_dim"]
    check(a.shape[0] == n_head_kv * (vd + nope), f"{name}: shape {a.shape}")
    kv_b = a.reshape(n_head_kv, vd + nope, a.shape[-1])
    k_b, v_b = kv_b[:, :nope], kv_b[:, nope:]
    return {name.replace("kv_b_proj", "k_b_proj"): np.ascontiguousarray(k_b.transpose(0, 2, 1)),
            name.replace("kv_b_proj", "v_b_proj"): np.ascontiguousarray(v_b)}


def expected_tensors(cfg, hf):
    """GGUF name -> float32 array (HF order), as convert_hf_to_gguf.py builds them."""
    arch = ARCHS[cfg["model_type"]]
    n = cfg["num_hidden_layers"]
    tmap = gguf.get_tensor_name_map(arch, n)
    generic = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n)  # dense MLP of mlp_only_layers
    experts, out = {}, {}
    hf = dict(hf)
    for name in [k for k in hf if k.endswith("kv_b_proj.weight")]:
        hf.update(split_kv_b(cfg, name, hf.pop(name)))
    for name, a in hf.items():
        m = EXPERT.match(name)
        if m:  # stacked per layer and projection, in expert order
            experts.setdefault(f"{m.group(1)}.{m.group(3)}.weight", {})[int(m.group(2))] = a
            continue
        if name.endswith("e_score_correction_bias"):  # convert_hf_to_gguf.py renames it so
            name = name.replace("e_score_correction_bias", "e_score_correction.bias")
        if cfg["model_type"] == "mixtral":
            if name.endswith("q_proj.weight"):
                a = permute(a, cfg["num_attention_heads"], cfg["num_attention_heads"])
            if name.endswith("k_proj.weight"):
                a = permute(a, cfg["num_attention_heads"], cfg["num_key_value_heads"])
        g = tmap.get_name(name, try_suffixes=(".weight", ".bias")) or \
            generic.get_name(name, try_suffixes=(".weight", ".bias"))
        check(g is not None, f"gguf has no name for {name}")
        out[g] = a
    for merged, by_e in experts.items():
        g = tmap.get_name(merged, try_suffixes=(".weight", ".bias"))
        check(g is not None, f"gguf has no name for {merged}")
        out[g] = np.stack([by_e[e] for e in sorted(by_e)])
    return out


def gguf_values(t):
    if t.tensor_type == QT.BF16:
        return bf16_to_f32(np.asarray(t.data).view("<u2"))
    return np.asarray(t.data)


def check_file(label, gguf_path, hf_dir, qtype=None):
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    hf, dtypes = st_read_dir(hf_dir)
    want = expected_tensors(cfg, hf)
    r = GGUFReader(gguf_path)
    got = {t.name: t for t in r.tensors}
    check(set(got) == set(want), f"{label}: tensor names differ: extra {sorted(set(got) - set(want))}"
          f", missing {sorted(set(want) - set(got))}")
    for name, a in want.items():
        t = got.get(name)
        if t is None:
            continue
        check(list(t.shape) == list(a.shape[::-1]) or (a.ndim == 2 and a.shape[0] == 1 and
                                                       list(t.shape) == [a.shape[1]]),
              f"{label}: {name}: ne {list(t.shape)}, HF shape {list(a.shape)}")
        small = a.ndim == 1 or "ffn_gate_inp" in name
        if small:
            check(t.tensor_type == QT.F32, f"{label}: {name} is {t.tensor_type.name}, want F32")
        if t.tensor_type in (QT.F32, QT.F16, QT.BF16):
            v = gguf_values(t).astype(np.float32).reshape(-1)
            exp = a.reshape(-1)
            if t.tensor_type == QT.F16:
                exp = exp.astype(np.float16).astype(np.float32)
            if t.tensor_type == QT.BF16:
                exp = bf16_to_f32(f32_to_bf16(exp))
            check(np.array_equal(v, exp), f"{label}: {name} ({t.tensor_type.name}) values differ")
        else:
            check(qtype is not None and t.tensor_type == qtype,
                  f"{label}: {name} is {t.tensor_type.name}")
            rows = a.reshape(-1, a.shape[-1])
            exp = gguf.quants.quantize(rows, t.tensor_type)
            check(np.array_equal(np.asarray(t.data).reshape(-1), exp.reshape(-1)),
                  f"{label}: {name} ({t.tensor_type.name}) differs from gguf.quants.quantize")

    # metadata llama.cpp reads
    arch = r.fields["general.architecture"].contents()
    check(arch == gguf.MODEL_ARCH_NAMES[ARCHS[cfg["model_type"]]], f"{label}: architecture {arch}")
    rope = cfg.get("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta"))
    n_exp = cfg.get("num_experts", cfg.get("num_local_experts"))
    keys = {"block_count": cfg["num_hidden_layers"], "embedding_length": cfg["hidden_size"],
            "context_length": cfg["max_position_embeddings"],
            "attention.head_count": cfg["num_attention_heads"],
            "attention.head_count_kv": cfg["num_key_value_heads"],
            "attention.layer_norm_rms_epsilon": np.float32(cfg["rms_norm_eps"]),
            "rope.freq_base": np.float32(rope), "expert_count": n_exp,
            "expert_used_count": cfg["num_experts_per_tok"],
            "feed_forward_length": cfg["intermediate_size"]}
    if cfg["model_type"] != "mixtral":
        keys["expert_feed_forward_length"] = cfg["moe_intermediate_size"]
    if cfg["model_type"] == "qwen3_moe":
        keys["attention.key_length"] = cfg["head_dim"]
        keys["attention.value_length"] = cfg["head_dim"]
        if not cfg.get("norm_topk_prob", False):
            keys["expert_weights_norm"] = False
    if cfg["model_type"] == "qwen2_moe":
        keys["expert_shared_feed_forward_length"] = cfg["shared_expert_intermediate_size"]
    if cfg["model_type"] == "glm4_moe":  # convert_hf_to_gguf.py Glm4MoeModel
        keys.pop("expert_count")
        keys["expert_count"] = cfg["n_routed_experts"]
        keys["leading_dense_block_count"] = cfg["first_k_dense_replace"]
        keys["expert_shared_count"] = cfg["n_shared_experts"]
        keys["expert_weights_scale"] = np.float32(cfg["routed_scaling_factor"])
        keys["expert_weights_norm"] = cfg["norm_topk_prob"]
        keys["expert_gating_func"] = 2  # sigmoid
        keys["attention.key_length"] = cfg["head_dim"]
        keys["attention.value_length"] = cfg["head_dim"]
        prf = cfg.get("partial_rotary_factor", (cfg.get("rope_parameters") or {}).get("partial_rotary_factor", 0.5))
        keys["rope.dimension_count"] = int(cfg["head_dim"] * prf)
    if arch == "deepseek2":  # convert_hf_to_gguf.py DeepseekV2Model.set_gguf_parameters
        deepseek_keys(cfg, keys)
        # written only when true by llama.cpp (false is its default); hmoe always writes it
        f = r.fields.get(f"{arch}.expert_weights_norm")
        norm = bool(cfg.get("norm_topk_prob", False))
        check((f is None and not norm) or (f is not None and f.contents() == norm),
              f"{label}: expert_weights_norm = {f.contents() if f else None}, want {norm}")
        # 0.1 * mscale_all_dim: llama.cpp multiplies in double, hmoe in float (1 ulp apart)
        rope_p = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
        if rope_p.get("rope_type", rope_p.get("type")) == "yarn" and rope_p.get("mscale_all_dim"):
            f = r.fields.get(f"{arch}.rope.scaling.yarn_log_multiplier")
            want = np.float32(0.1 * rope_p["mscale_all_dim"])
            check(f is not None and np.isclose(f.contents(), want, rtol=1e-6, atol=0),
                  f"{label}: rope.scaling.yarn_log_multiplier = {f.contents() if f else None}, "
                  f"want {want}")
    for k, v in keys.items():
        f = r.fields.get(f"{arch}.{k}")
        check(f is not None and f.contents() == v,
              f"{label}: {arch}.{k} = {f.contents() if f else None}, want {v}")
    return len(got)


def deepseek_keys(cfg, keys):
    rope_p = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    kvl, rope, nope = cfg["kv_lora_rank"], cfg["qk_rope_head_dim"], cfg["qk_nope_head_dim"]
    keys.pop("expert_count")
    keys.update({
        "attention.head_count_kv": 1,  # MLA as MQA over the latent
        "expert_count": cfg["n_routed_experts"],
        "leading_dense_block_count": cfg["first_k_dense_replace"],
        "vocab_size": cfg["vocab_size"],
        "attention.kv_lora_rank": kvl,
        "attention.key_length": kvl + rope,
        "attention.value_length": kvl,
        "attention.key_length_mla": nope + rope,
        "attention.value_length_mla": cfg["v_head_dim"],
        "expert_shared_count": cfg["n_shared_experts"],
        "expert_weights_scale": np.float32(cfg["routed_scaling_factor"]),
        "rope.dimension_count": rope})
    if cfg.get("q_lora_rank") is not None:
        keys["attention.q_lora_rank"] = cfg["q_lora_rank"]
    # V3 and Kimi-K2 route by sigmoid (llama.cpp: expert_gating_func 2, else softmax)
    sigmoid = cfg.get("scoring_func", "sigmoid" if cfg["model_type"] != "deepseek_v2" else
                      "softmax") == "sigmoid"
    keys["expert_gating_func"] = 2 if sigmoid else 1
    if (cfg.get("n_group") or 1) > 1:
        keys["expert_group_count"] = cfg["n_group"]
        keys["expert_group_used_count"] = cfg["topk_group"]
    if rope_p.get("rope_type", rope_p.get("type")) == "yarn":
        keys["rope.scaling.type"] = "yarn"
        keys["rope.scaling.factor"] = np.float32(rope_p["factor"])
        keys["rope.scaling.original_context_length"] = rope_p["original_max_position_embeddings"]


def convert(binary, hf_dir, out, *args):
    p = subprocess.run([binary, "convert", hf_dir, "-o", out, "--threads", "2", *args],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"hmoe convert {hf_dir} {' '.join(args)}: {p.stdout}{p.stderr}")
    return p.returncode == 0


# ---- gpt-oss --------------------------------------------------------------------------------

GPTOSS = os.path.join(ROOT, "tests", "data", "gptoss", "hf")
FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)


def ocp_values(blocks, scales):
    """MXFP4 as the OCP checkpoints store it, dequantized as transformers does: values 2j and
    2j + 1 in the low and high nibbles of byte j, times 2^(scale - 127); [..., R, C]"""
    vals = np.stack([FP4[blocks & 15], FP4[blocks >> 4]], axis=-1).reshape(*blocks.shape[:-1], 32)
    w = np.ldexp(vals, scales.astype(np.int32)[..., None] - 127)
    return w.reshape(*w.shape[:-2], -1).astype(np.float32)


def ocp_to_ggml(blocks, scales):
    """the same blocks in ggml's MXFP4 layout (block_mxfp4: the E8M0 byte, then values j and
    j + 16 in the low and high nibbles of byte j), [..., R, C/32 * 17] bytes"""
    v = np.stack([blocks & 15, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    qs = (v[..., :16] | (v[..., 16:] << 4)).astype(np.uint8)
    b = np.concatenate([scales[..., None], qs], axis=-1)
    return b.reshape(*b.shape[:-2], -1)


def gptoss_float_dir(d):
    """tests/data/gptoss/hf with its experts dequantized and saved as transformers saves a float
    gpt-oss ([E][in][out]), in float32"""
    hf, _ = st_read_dir(GPTOSS)
    for k in [k for k in hf if k.endswith("_blocks")]:
        base = k[:-len("_blocks")]
        w = ocp_values(hf.pop(k), hf.pop(base + "_scales"))  # [E][out][in]
        hf[base] = np.ascontiguousarray(w.transpose(0, 2, 1))
    cfg = json.load(open(os.path.join(GPTOSS, "config.json")))
    cfg.pop("quantization_config", None)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    st_write(os.path.join(d, "model.safetensors"), hf, "F32")


def gptoss_expected(hf):
    """GGUF name -> (values in HF order, or for MXFP4 (bytes, values)): what convert_hf_to_gguf.py
    GptOssModel writes. gate_up_proj is split into gate (even rows) and up (odd rows); the float
    layout is transposed first; the sinks are named *.sinks.weight."""
    n = 1 + max(int(k.split(".")[2]) for k in hf if k.startswith("model.layers."))
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GPT_OSS, n)
    out = {}

    def put(hf_name, a):
        g = tmap.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        check(g is not None, f"gguf has no gpt-oss name for {hf_name}")
        out[g] = a

    fused = re.compile(r"^(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)"
                       r"(_bias|_blocks|_scales)?$")
    for name, a in hf.items():
        m = fused.match(name)
        if name.endswith("sinks"):
            put(name + ".weight", a)
        elif not m:
            put(name, a)
        elif m.group(3) == "_bias":
            if m.group(2) == "down_proj":
                put(f"{m.group(1)}.down_proj.bias", a)
            else:
                put(f"{m.group(1)}.gate_proj.bias", a[..., 0::2])
                put(f"{m.group(1)}.up_proj.bias", a[..., 1::2])
        elif m.group(3) == "_blocks":
            blocks, scales = a, hf[f"{m.group(1)}.{m.group(2)}_scales"]
            parts = ([("down_proj", slice(None))] if m.group(2) == "down_proj" else
                     [("gate_proj", slice(0, None, 2)), ("up_proj", slice(1, None, 2))])
            for proj, rows in parts:
                b, s = blocks[:, rows], scales[:, rows]
                put(f"{m.group(1)}.{proj}.weight", (ocp_to_ggml(b, s), ocp_values(b, s)))
        elif m.group(3) is None:  # the float layout: [E][in][out]
            w = a.transpose(0, 2, 1)
            if m.group(2) == "down_proj":
                put(f"{m.group(1)}.down_proj.weight", w)
            else:
                put(f"{m.group(1)}.gate_proj.weight", w[:, 0::2])
                put(f"{m.group(1)}.up_proj.weight", w[:, 1::2])
    return out


def gptoss_loader_shapes(cfg):
    """llama.cpp's llama_model_openai_moe::load_arch_tensors: every tensor it creates (all
    required) and its ne"""
    H, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    E, FE = cfg["num_local_experts"], cfg["intermediate_size"]
    want = {"token_embd.weight": [H, V], "output_norm.weight": [H], "output.weight": [H, V]}
    for i in range(L):
        b = f"blk.{i}."
        want.update({b + "attn_norm.weight": [H], b + "post_attention_norm.weight": [H],
                     b + "attn_q.weight": [H, nh * hd], b + "attn_k.weight": [H, nkv * hd],
                     b + "attn_v.weight": [H, nkv * hd], b + "attn_output.weight": [nh * hd, H],
                     b + "attn_sinks.weight": [nh], b + "ffn_gate_inp.weight": [H, E],
                     b + "ffn_gate_exps.weight": [H, FE, E], b + "ffn_down_exps.weight": [FE, H, E],
                     b + "ffn_up_exps.weight": [H, FE, E], b + "attn_q.bias": [nh * hd],
                     b + "attn_k.bias": [nkv * hd], b + "attn_v.bias": [nkv * hd],
                     b + "attn_output.bias": [H], b + "ffn_gate_inp.bias": [E],
                     b + "ffn_gate_exps.bias": [FE, E], b + "ffn_down_exps.bias": [H, E],
                     b + "ffn_up_exps.bias": [FE, E]})
    return want


def gptoss_keys(cfg):
    """the keys llama.cpp reads for gpt-oss (llama_model_loader's common ones and
    load_arch_hparams': expert_feed_forward_length and sliding_window are required), against
    config.json as convert_hf_to_gguf.py writes them"""
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    return {"context_length": cfg["max_position_embeddings"],
            "embedding_length": cfg["hidden_size"], "block_count": cfg["num_hidden_layers"],
            "feed_forward_length": cfg["intermediate_size"],
            "attention.head_count": cfg["num_attention_heads"],
            "attention.head_count_kv": cfg["num_key_value_heads"],
            "attention.key_length": cfg["head_dim"], "attention.value_length": cfg["head_dim"],
            "attention.layer_norm_rms_epsilon": np.float32(cfg["rms_norm_eps"]),
            "rope.freq_base": np.float32(cfg.get("rope_theta", rope.get("rope_theta"))),
            "expert_count": cfg["num_local_experts"],
            "expert_used_count": cfg["num_experts_per_tok"],
            "expert_feed_forward_length": cfg["intermediate_size"],
            "attention.sliding_window": cfg["sliding_window"],
            "rope.scaling.type": "yarn", "rope.scaling.factor": np.float32(rope["factor"]),
            "rope.scaling.original_context_length": rope["original_max_position_embeddings"]}


def check_gptoss_file(label, path, hf_dir, dense=None, experts=None):
    """dense: the type of the big float matrices (None: F32 as the source); experts: the type the
    MXFP4 experts were asked to be (None: MXFP4, byte for byte)"""
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    hf, _ = st_read_dir(hf_dir)
    want = gptoss_expected(hf)
    shapes = gptoss_loader_shapes(cfg)
    r = GGUFReader(path)
    got = {t.name: t for t in r.tensors}
    check(set(got) == set(shapes) and set(want) == set(shapes),
          f"{label}: tensors: extra {sorted(set(got) - set(shapes))}, missing "
          f"{sorted(set(shapes) - set(got))}, expected but not llama.cpp's "
          f"{sorted(set(want) - set(shapes))}")
    arch = r.fields["general.architecture"].contents()
    check(arch == gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.GPT_OSS] == "gpt-oss",
          f"{label}: architecture {arch}")
    for k, v in gptoss_keys(cfg).items():
        f = r.fields.get(f"{arch}.{k}")
        check(f is not None and f.contents() == v,
              f"{label}: {arch}.{k} = {f.contents() if f else None}, want {v}")
    check(r.fields["tokenizer.ggml.model"].contents() == "no_vocab", f"{label}: tokenizer")
    n_mx = 0
    for name, t in got.items():
        check([int(d) for d in t.shape] == shapes.get(name),
              f"{label}: {name}: ne {list(t.shape)}, llama.cpp creates {shapes.get(name)}")
        a = want.get(name)
        if a is None:
            continue
        if isinstance(a, tuple):  # MXFP4 source
            raw, vals = a
            if experts is None:
                n_mx += 1
                check(t.tensor_type == QT.MXFP4, f"{label}: {name} is {t.tensor_type.name}")
                data = np.asarray(t.data).view(np.uint8)
                check(np.array_equal(data.reshape(-1), raw.reshape(-1)),
                      f"{label}: {name}: MXFP4 bytes differ from the repacked source blocks")
                deq = gguf.quants.dequantize(data.reshape(raw.shape), QT.MXFP4)
                check(np.array_equal(deq.reshape(-1), vals.reshape(-1)),
                      f"{label}: {name}: gguf's MXFP4 values differ from transformers'")
            else:
                check(t.tensor_type == experts, f"{label}: {name} is {t.tensor_type.name}")
                exp = gguf.quants.quantize(vals.reshape(-1, vals.shape[-1]), experts)
                check(np.array_equal(np.asarray(t.data).reshape(-1), exp.reshape(-1)),
                      f"{label}: {name} differs from gguf.quants.quantize of the MXFP4 values")
            continue
        small = a.ndim == 1 or "ffn_gate_inp" in name or name.endswith(".bias")
        if small or dense is None or "_exps" in name:
            check(t.tensor_type == QT.F32, f"{label}: {name} is {t.tensor_type.name}, want F32")
            check(np.array_equal(gguf_values(t).reshape(-1), a.reshape(-1).astype(np.float32)),
                  f"{label}: {name} values differ")
        else:
            check(t.tensor_type == dense, f"{label}: {name} is {t.tensor_type.name}")
            exp = gguf.quants.quantize(a.reshape(-1, a.shape[-1]).astype(np.float32), dense)
            check(np.array_equal(np.asarray(t.data).reshape(-1), exp.reshape(-1)),
                  f"{label}: {name} differs from gguf.quants.quantize")
    return len(got), n_mx


def logits(binary, model, ids, vocab, tmp):
    out = os.path.join(tmp, "logits.f32")
    p = subprocess.run([binary, "logits", "-m", model, "--ids", " ".join(map(str, ids)), "--out",
                        out, "--threads", "2"], capture_output=True, text=True)
    check(p.returncode == 0, f"hmoe logits -m {model}: {p.stderr[-300:]}")
    return np.fromfile(out, dtype="<f4").reshape(len(ids), vocab) if p.returncode == 0 else None


def kl_rows(p_logits, q_logits):
    """KL(p || q) per row, from logits, in float64"""
    lp = p_logits.astype(np.float64)
    lq = q_logits.astype(np.float64)
    lp = lp - lp.max(axis=1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(axis=1, keepdims=True))
    lq = lq - lq.max(axis=1, keepdims=True)
    lq -= np.log(np.exp(lq).sum(axis=1, keepdims=True))
    return (np.exp(lp) * (lp - lq)).sum(axis=1)


def check_gptoss_logits(label, binary, hf_dir, gguf_path, tmp, mxfp4):
    """the GGUF's logits equal the Hugging Face directory's bit for bit, and are within the
    fixture's bounds of transformers' (expected.json): the MXFP4 kernels quantize activations, so
    KL mean 1e-3 / max 5e-3 and every argmax (test_forward's check_gptoss_hf); float experts
    compute exactly, so 1e-3 x max|logit| (gptoss_quant_python's float checkpoint)"""
    exp = json.load(open(os.path.join(GPTOSS, "expected.json")))
    V = exp["vocab"]
    for i, ids in enumerate(exp["prompts"]):
        a = logits(binary, hf_dir, ids, V, tmp)
        b = logits(binary, gguf_path, ids, V, tmp)
        if a is None or b is None:
            continue
        check(np.array_equal(a.view(np.uint32), b.view(np.uint32)),
              f"{label} prompt {i}: GGUF logits differ from the HF directory's "
              f"(max {np.abs(a - b).max():.3g})")
        ref = np.fromfile(os.path.join(GPTOSS, exp["logits"][i]), dtype="<f4").reshape(len(ids), V)
        k = kl_rows(ref, b)
        same = (ref.argmax(axis=1) == b.argmax(axis=1)).all()
        err = np.abs(b - ref).max() / np.abs(ref).max()
        print(f"convert_python: {label} prompt {i}: vs transformers KL mean {k.mean():.2e} max "
              f"{k.max():.2e}, rel error {err:.2e}, argmax {'equal' if same else 'DIFFER'}")
        if mxfp4:
            check(k.mean() <= 1e-3 and k.max() <= 5e-3 and same,
                  f"{label} prompt {i}: KL {k.mean():.3g} / {k.max():.3g}, argmax equal {same}")
        else:
            check(err <= 1e-3, f"{label} prompt {i}: rel error {err:.3g}")


def check_gptoss_bad(binary, tmp):
    """a tensor of the wrong shape (MXFP4 scales, the float layout's experts, an attention matrix,
    a bias) is refused, naming the tensor, its shape and the expected one; nothing is written"""
    src, _ = st_read_dir(GPTOSS)
    fl = os.path.join(tmp, "gptoss-float")
    flt, _ = st_read_dir(fl)
    cases = (
        (GPTOSS, src, "model.layers.1.mlp.experts.down_proj_scales", lambda a: a[:, :, :-1],
         ["U8 [4 x 64 x 1]", "expected U8 [4 x 64 x 2]"]),
        (fl, flt, "model.layers.0.mlp.experts.gate_up_proj", lambda a: a[:, :, :-2],
         ["F32 [4 x 64 x 126]", "expected F32 [4 x 64 x 128]"]),
        (GPTOSS, src, "model.layers.0.self_attn.k_proj.weight", lambda a: a[:-1],
         ["[31, 64]", "expected [32, 64]"]),
        (GPTOSS, src, "model.layers.1.mlp.experts.gate_up_proj_bias", lambda a: a[:, :-1],
         ["F32 [4 x 127]", "expected F32 [4 x 128]"]))
    for hf_dir, sd, key, edit, needles in cases:
        d = os.path.join(tmp, "gptoss-bad")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(hf_dir, "config.json")) as fh, \
                open(os.path.join(d, "config.json"), "w") as out:
            out.write(fh.read())
        bad = dict(sd)
        bad[key] = np.ascontiguousarray(edit(bad[key]))
        st_write(os.path.join(d, "model.safetensors"), bad, "F32")
        out = os.path.join(tmp, "bad.gguf")
        p = subprocess.run([binary, "convert", d, "-o", out, "--threads", "2"],
                           capture_output=True, text=True)
        msg = p.stderr.strip()
        print(f"convert_python: gpt-oss with a misshapen {key}: {msg[-200:]}")
        check(p.returncode != 0 and f"'{key}'" in msg and all(n in msg for n in needles),
              f"gpt-oss bad {key}: rc {p.returncode}, {msg!r}")
        check(not os.path.exists(out) and not os.path.exists(out + ".part"),
              f"gpt-oss bad {key}: output left behind")


def check_gptoss(binary, tmp):
    fl = os.path.join(tmp, "gptoss-float")
    gptoss_float_dir(fl)
    out = os.path.join(tmp, "gptoss.gguf")
    for label, d, args, dense, experts in (
            ("gpt-oss MXFP4", GPTOSS, [], None, None),
            ("gpt-oss MXFP4 --type q8_0", GPTOSS, ["--type", "q8_0"], QT.Q8_0, None),
            ("gpt-oss MXFP4 --experts-type q8_0", GPTOSS, ["--experts-type", "q8_0"], None,
             QT.Q8_0),
            ("gpt-oss float layout", fl, [], None, None)):
        if not convert(binary, d, out, *args):
            continue
        n, n_mx = check_gptoss_file(label, out, d, dense, experts)
        print(f"convert_python: {label}: {n} tensors ok ({n_mx} MXFP4 expert tensors byte for "
              "byte)")
        if not args:
            check_gptoss_logits(label, binary, d, out, tmp, d == GPTOSS)
    check_gptoss_bad(binary, tmp)


def main(binary):
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:
        models = []
        for mt, dt in (("qwen3_moe", "F32"), ("qwen3_moe", "BF16"), ("qwen2_moe", "F16"),
                       ("mixtral", "F32")):
            d = os.path.join(tmp, f"{mt}-{dt}")
            tiny_model(d, mt, dt, rng)
            models.append((f"{mt} {dt}", d))
        for d in sorted(glob.glob(os.path.join(ROOT, "tests", "data", "qwen3moe", "*")) +
                        glob.glob(os.path.join(ROOT, "tests", "data", "qwen2moe", "*")) +
                        glob.glob(os.path.join(ROOT, "tests", "data", "glm4moe", "*")) +
                        glob.glob(os.path.join(ROOT, "tests", "data", "deepseek", "*")) +
                        glob.glob(os.path.join(ROOT, "tests", "data", "mixtral", "*"))):
            if not os.path.exists(os.path.join(d, "config.json")):
                continue
            models.append(("checkpoint " + os.path.relpath(d, os.path.join(ROOT, "tests", "data")), d))
        for label, d in models:
            out = os.path.join(tmp, "out.gguf")
            if convert(binary, d, out):
                n = check_file(label, out, d)
                print(f"convert_python: {label}: {n} tensors ok (source dtypes)")
            if convert(binary, d, out, "--type", "q8_0"):
                check_file(label + " q8_0", out, d, QT.Q8_0)
        check_gptoss(binary, tmp)
    print(f"convert_python: {len(models)} models and gpt-oss, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
