#!/usr/bin/env python3
"""gpt-oss quantized as its released GGUFs are (MXFP4 experts, Q8_0 elsewhere), by the `gguf`
package, against transformers: the fixtures tests/data/gptoss/{a,b}/model.gguf (float32, from
tests/gen/gptoss_fixtures.py) are rewritten with every expert matrix in MXFP4 and the other
matrices in Q8_0 (where a row is whole 32-blocks; norms, biases and sinks stay float32), and
`hmoe logits` of every prompt is compared
1. with `hmoe logits` of the same weights dequantized by gguf.quants into an F32 GGUF: our MXFP4
   and Q8_0 kernels on the file's bits (measured KL up to 1.2e-4 mean, 2.1e-4 max; bound 1e-3,
   2e-3);
2. with transformers' float32 logits (expected.json): what the quantization costs on these random
   weights (measured up to 6.0e-3 mean, 9.1e-3 max; bound 0.05, 0.1; docs/models.md).
And the released Hugging Face layout (tests/data/gptoss/hf, MXFP4 blocks and scales) with a
tensor of the wrong shape or missing is refused with the tensor's name and shapes; its experts
dequantized as transformers does and saved as transformers saves a float gpt-oss give
transformers' logits within 1e-3.
Usage: gptoss_quant_python.py HMOE_BINARY"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import gguf
    from gguf import GGUFReader, GGUFValueType as VT
    from gguf.quants import dequantize, quantize
except ImportError:
    print("gptoss_quant_python: the `gguf` package is missing (pip install gguf numpy)",
          file=sys.stderr)
    sys.exit(1)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "gptoss")
QT = gguf.GGMLQuantizationType
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg)


def field_value(f):
    """a reader field as the writer takes it: (value, type, element type of an array)"""
    t = f.types[0]
    if t == VT.STRING:
        return bytes(f.parts[f.data[0]]).decode(), t, None
    if t == VT.ARRAY:
        sub = f.types[1]
        if sub == VT.STRING:
            return [bytes(f.parts[i]).decode() for i in f.data], t, sub
        return [f.parts[i][0].item() for i in f.data], t, sub
    return f.parts[f.data[0]][0].item(), t, None


def target_type(name, shape):
    """MXFP4 for the experts, Q8_0 for the other matrices, float32 where rows are not 32-blocks"""
    if len(shape) < 2 or shape[-1] % 32 or not name.endswith(".weight"):
        return None
    return QT.MXFP4 if "_exps." in name else QT.Q8_0


def rewrite(src, dst_q, dst_dq):
    r = GGUFReader(src)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    outs = [gguf.GGUFWriter(dst_q, arch), gguf.GGUFWriter(dst_dq, arch)]
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        v, t, sub = field_value(f)
        for w in outs:
            w.add_key_value(name, v, t, sub_type=sub)
    n_q = 0
    for t in r.tensors:
        x = np.array(t.data, dtype=np.float32).reshape(tuple(reversed([int(d) for d in t.shape])))
        qt = target_type(t.name, x.shape)
        if qt is None:
            for w in outs:
                w.add_tensor(t.name, x)
            continue
        q = quantize(x, qt)
        outs[0].add_tensor(t.name, q, raw_shape=q.shape, raw_dtype=qt)
        outs[1].add_tensor(t.name, dequantize(q, qt).astype(np.float32).reshape(x.shape))
        n_q += 1
    for w in outs:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return n_q


def logits(binary, model, ids, vocab, tmp):
    out = os.path.join(tmp, "logits.bin")
    subprocess.run([binary, "logits", "-m", model, "--ids", " ".join(map(str, ids)), "--out", out,
                    "--threads", "2"], check=True, capture_output=True)
    return np.fromfile(out, dtype="<f4").reshape(len(ids), vocab)


def kl(p_logits, q_logits):
    """KL(p || q) per row, from logits, in float64"""
    p = p_logits.astype(np.float64)
    q = q_logits.astype(np.float64)
    lp = p - p.max(axis=1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(axis=1, keepdims=True))
    lq = q - q.max(axis=1, keepdims=True)
    lq -= np.log(np.exp(lq).sum(axis=1, keepdims=True))
    return (np.exp(lp) * (lp - lq)).sum(axis=1)


def bad_checkpoints(binary, tmp):
    """the released layout (tests/data/gptoss/hf) with a tensor of the wrong shape or missing:
    refused, naming the tensor, its shape and the expected one"""
    from safetensors.numpy import load_file, save_file
    src = os.path.join(ROOT, "hf")
    sd = load_file(os.path.join(src, "model.safetensors"))
    key = "model.layers.1.mlp.experts.down_proj_scales"
    for what, edit, want in (
            ("short scales", lambda d: d.__setitem__(key, d[key][:, :, :-1].copy()), "expected U8"),
            ("no scales", lambda d: d.pop(key), "is missing"),
            ("no experts", lambda d: [d.pop(k) for k in list(d) if "layers.0.mlp.experts.gate_up" in k
                                      and not k.endswith("bias")], "is missing")):
        d = os.path.join(tmp, "bad")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(src, "config.json")) as fh, \
                open(os.path.join(d, "config.json"), "w") as out:
            out.write(fh.read())
        bad = dict(sd)
        edit(bad)
        save_file(bad, os.path.join(d, "model.safetensors"))
        r = subprocess.run([binary, "logits", "-m", d, "--ids", "1", "--out",
                            os.path.join(tmp, "x.bin")], capture_output=True, text=True)
        print(f"gptoss_quant_python: {what}: {r.stderr.strip()[-160:]}")
        check(r.returncode != 0 and want in r.stderr, f"{what}: rc {r.returncode}, {r.stderr!r}")


FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)


def float_checkpoint(binary, tmp):
    """the released layout's experts dequantized as transformers' convert_moe_packed_tensors
    does (values 2j and 2j + 1 in byte j, times 2^(scale - 127)) and saved as transformers saves a
    float gpt-oss ([E][in][out]): the same logits as transformers, to the float fixtures' 1e-3"""
    from safetensors.numpy import load_file, save_file
    src = os.path.join(ROOT, "hf")
    sd = load_file(os.path.join(src, "model.safetensors"))
    for k in [k for k in sd if k.endswith("_blocks")]:
        blocks, scales = sd.pop(k), sd.pop(k[:-len("_blocks")] + "_scales")
        vals = np.stack([FP4[blocks & 15], FP4[blocks >> 4]], axis=-1).reshape(*blocks.shape[:-1], 32)
        w = np.ldexp(vals, (scales.astype(np.int32) - 127)[..., None])
        w = w.reshape(w.shape[0], w.shape[1], -1)  # [E][out][in]
        sd[k[:-len("_blocks")]] = np.ascontiguousarray(w.transpose(0, 2, 1)).astype(np.float32)
    d = os.path.join(tmp, "float")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(src, "config.json")) as fh:
        cfg = json.load(fh)
    cfg.pop("quantization_config", None)
    with open(os.path.join(d, "config.json"), "w") as out:
        json.dump(cfg, out)
    save_file(sd, os.path.join(d, "model.safetensors"))
    with open(os.path.join(src, "expected.json")) as fh:
        exp = json.load(fh)
    V = exp["vocab"]
    for i, ids in enumerate(exp["prompts"]):
        ref = np.fromfile(os.path.join(src, exp["logits"][i]), dtype="<f4").reshape(len(ids), V)
        got = logits(binary, d, ids, V, tmp)
        err = np.abs(got - ref).max() / np.abs(ref).max()
        print(f"gptoss_quant_python: float checkpoint prompt {i}: rel error {err:.2e}")
        check(err <= 1e-3, f"float checkpoint prompt {i}: rel error {err:.3g}")


def main(binary):
    with tempfile.TemporaryDirectory(prefix="gptoss_quant.") as tmp:
        bad_checkpoints(binary, tmp)
        float_checkpoint(binary, tmp)
        for name in ("a", "b"):
            d = os.path.join(ROOT, name)
            with open(os.path.join(d, "expected.json")) as fh:
                exp = json.load(fh)
            q, dq = os.path.join(tmp, name + "-q.gguf"), os.path.join(tmp, name + "-dq.gguf")
            n_q = rewrite(os.path.join(d, "model.gguf"), q, dq)
            check(n_q > 0, f"{name}: nothing quantized")
            V = exp["vocab"]
            for i, ids in enumerate(exp["prompts"]):
                ref = np.fromfile(os.path.join(d, exp["logits"][i]), dtype="<f4").reshape(len(ids), V)
                lq = logits(binary, q, ids, V, tmp)
                ldq = logits(binary, dq, ids, V, tmp)
                k1, k2 = kl(ldq, lq), kl(ref, lq)
                print(f"gptoss_quant_python: {name} prompt {i} ({len(ids)} tokens, {n_q} matrices "
                      f"quantized): kernels vs the same weights in F32 KL mean {k1.mean():.2e} max "
                      f"{k1.max():.2e}; vs transformers KL mean {k2.mean():.2e} max {k2.max():.2e}")
                check(np.isfinite(lq).all(), f"{name} prompt {i}: logits not finite")
                check(k1.mean() <= 1e-3 and k1.max() <= 2e-3,
                      f"{name} prompt {i}: kernels KL mean {k1.mean():.3g} max {k1.max():.3g}")
                check(k2.mean() <= 0.05 and k2.max() <= 0.1,
                      f"{name} prompt {i}: quantized KL mean {k2.mean():.3g} max {k2.max():.3g}")
    print(f"gptoss_quant_python: {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
