#!/usr/bin/env python3
"""python_moe.py - the `hmoe` Python package against a numpy reference of the MoE layer and the
`gguf` package's dequantization, and, where kt-kernel is importable, against kt-kernel itself.

    PYTHONPATH=BUILD/python HMOE_BINARY=BUILD/hmoe python3 tests/python_moe.py

Checks: import without torch or numpy; float32 and bfloat16 weights (torch and numpy inputs,
an intermediate size that is not a multiple of 256) within each format's tolerance of a float64
reference; -1 ids and the GPU-expert mask skipped, the mask updated in place; KTMoEWrapper over a
GGUF (LLAMAFILE, Q4_K experts) against the dequantized reference; two wrappers in one process
independent; bad dtypes, shapes and a tensor-parallel partition refused with errors naming them.
Exits 77 when numpy is missing."""
import os
import subprocess
import sys
import tempfile

FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def raises(fn, exc, needle, what):
    try:
        fn()
    except exc as e:
        check(needle in str(e), f"{what}: {type(e).__name__}: {e}")
        return
    except Exception as e:  # noqa: BLE001
        check(False, f"{what}: {type(e).__name__} instead of {exc.__name__}: {e}")
        return
    check(False, f"{what}: no error")


def ref_moe(np, x, ids, w, gate, up, down, mask=None):
    """float64 reference: sum_j w * down(silu(gate x) * up x) over the ids not -1 or masked"""
    out = np.zeros((x.shape[0], down.shape[1]), dtype=np.float64)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            if e < 0 or (mask is not None and mask[e]):
                continue
            g = gate[e].astype(np.float64) @ x[t].astype(np.float64)
            u = up[e].astype(np.float64) @ x[t].astype(np.float64)
            h = g / (1 + np.exp(-g)) * u
            out[t] += float(w[t, j]) * (down[e].astype(np.float64) @ h)
    return out


def rel(np, a, b):
    return float(np.abs(np.asarray(a, dtype=np.float64) - b).max() / (np.abs(b).max() + 1e-30))


def routing(np, rng, n, E, k):
    ids = np.stack([rng.choice(E, size=k, replace=False) for _ in range(n)]).astype(np.int32)
    w = rng.random((n, k)).astype(np.float32)
    return ids, w / w.sum(1, keepdims=True)


def test_import_alone():
    code = ("import sys; sys.modules['torch'] = None; sys.modules['numpy'] = None\n"
            "import hmoe; print(hmoe.version())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    check(r.returncode == 0 and r.stdout.strip(), f"import hmoe without torch or numpy ({r.stderr.strip()[-200:]})")


def test_f32(np, hmoe):
    rng = np.random.default_rng(1)
    E, H, I, k = 8, 64, 40, 2  # I = 40: not a multiple of 256
    gate = rng.standard_normal((E, I, H), dtype=np.float32) * 0.1
    up = rng.standard_normal((E, I, H), dtype=np.float32) * 0.1
    down = rng.standard_normal((E, H, I), dtype=np.float32) * 0.1
    m = hmoe.MoE.from_tensors(gate, up, down, threads=2)
    check((m.num_experts, m.hidden_size, m.intermediate_size) == (E, H, I), "MoE shapes")
    for n in (1, 3, 17, 64):
        x = rng.standard_normal((n, H), dtype=np.float32)
        ids, w = routing(np, rng, n, E, k)
        ids[0, 1] = -1  # skipped
        out = np.empty((n, H), dtype=np.float32)
        m.submit(x, ids, w, out)
        m.wait()
        e = rel(np, out, ref_moe(np, x, ids, w, gate, up, down))
        check(e < 1e-4, f"float32 weights, {n} tokens: max rel err {e:.2e}")
    # accumulate adds onto out; int64 ids are taken
    x = rng.standard_normal((5, H), dtype=np.float32)
    ids, w = routing(np, rng, 5, E, k)
    out = np.ones((5, H), dtype=np.float32)
    m.submit(x, ids.astype(np.int64), w, out, accumulate=True)
    m.wait()
    e = rel(np, out, ref_moe(np, x, ids, w, gate, up, down) + 1)
    check(e < 1e-4, f"accumulate and int64 ids: {e:.2e}")
    # the mask: masked experts skipped, and set_mask replaces it
    mask = np.zeros(E, dtype=bool)
    mask[[1, 5]] = True
    m.set_mask(mask)
    out = np.empty((5, H), dtype=np.float32)
    m.submit(x, ids, w, out)
    m.wait()
    check(rel(np, out, ref_moe(np, x, ids, w, gate, up, down, mask)) < 1e-4, "mask skips experts 1, 5")
    # errors name the argument
    raises(lambda: m.submit(x.astype(np.float16), ids, w, out), TypeError, "hidden_states is float16",
           "float16 hidden states refused")
    raises(lambda: m.submit(x[:, :32].copy(), ids, w, out), ValueError, "hidden_states has shape [5, 32]",
           "wrong hidden size refused")
    raises(lambda: m.submit(x, ids[:, :1].copy(), w, out), ValueError, "topk_weights has shape",
           "ids and weights of different k refused")
    raises(lambda: m.submit(x, ids.astype(np.float32), w, out), TypeError, "topk_ids is float32",
           "float ids refused")
    bad = ids.copy()
    bad[0, 0] = E
    raises(lambda: (m.submit(x, bad, w, out), m.wait()), RuntimeError, "", "id outside the experts refused")
    raises(lambda: m.submit(x.T, ids, w, out), ValueError, "", "a transposed view refused")
    raises(lambda: hmoe.MoE.from_tensors(gate, up, down[:, :, :8].copy()), ValueError, "down has shape",
           "mis-shaped down refused")
    raises(lambda: hmoe.MoE.from_tensors(gate, up.astype(np.float16), down), TypeError, "up is float16",
           "float16 weights refused")


def test_stream(np, hmoe):
    """submit_on_stream / wait_on_stream through a stand-in cudaLaunchHostFunc (tests/fake_cudart.c):
    the inputs are read, the int64 ids converted and the mask applied when the stream gets there"""
    fake = os.environ.get("HMOE_FAKE_CUDART")
    if not fake:
        print("skip: HMOE_FAKE_CUDART not set (the stream path)")
        return
    import ctypes
    os.environ["HMOE_CUDART"] = fake
    lib = ctypes.CDLL(fake)
    rng = np.random.default_rng(4)
    E, H, I, k, n = 8, 32, 24, 2, 6
    gate, up = (rng.standard_normal((E, I, H), dtype=np.float32) * 0.1 for _ in range(2))
    down = rng.standard_normal((E, H, I), dtype=np.float32) * 0.1
    m = hmoe.MoE.from_tensors(gate, up, down, threads=2)
    x = np.zeros((n, H), dtype=np.float32)
    ids = np.zeros((n, k), dtype=np.int64)
    w = np.zeros((n, k), dtype=np.float32)
    out = np.zeros((n, H), dtype=np.float32)
    mask = np.zeros(E, dtype=np.uint8)
    mask[3] = 1
    lib.fake_stream_hold(1)  # the stream is busy: the buffers are filled "by earlier work"
    m.submit_on_stream(7, x, ids, w, out, mask=mask)
    raises(lambda: m.submit_on_stream(7, x, ids, w, out), RuntimeError, "wait_on_stream",
           "a second submit before the wait is refused")
    m.wait_on_stream(7)
    x[:] = rng.standard_normal((n, H), dtype=np.float32)
    r_ids, r_w = routing(np, rng, n, E, k)
    ids[:] = r_ids
    w[:] = r_w
    lib.fake_stream_hold(0)
    lib.fake_stream_sync()
    e = rel(np, out, ref_moe(np, x, ids, w, gate, up, down, mask.astype(bool)))
    check(e < 1e-4, f"stream path: inputs read in stream order, int64 ids, mask applied ({e:.2e})")
    m.submit_on_stream(7, x, ids, w, out)  # the mask given before stays
    m.wait_on_stream(7)
    lib.fake_stream_sync()
    check(rel(np, out, ref_moe(np, x, ids, w, gate, up, down, mask.astype(bool))) < 1e-4,
          "stream path: a second batch after the wait")


def test_bf16_torch(np, hmoe):
    try:
        import torch
    except ImportError:
        print("skip: torch missing (bfloat16 through DLPack)")
        return
    g = torch.Generator().manual_seed(2)
    E, H, I, k, n = 6, 128, 96, 3, 9
    gate = (torch.randn(E, I, H, generator=g) * 0.1).to(torch.bfloat16)
    up = (torch.randn(E, I, H, generator=g) * 0.1).to(torch.bfloat16)
    down = (torch.randn(E, H, I, generator=g) * 0.1).to(torch.bfloat16)
    x = torch.randn(n, H, generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(n)]).to(torch.int64)
    w = torch.rand(n, k, generator=g)
    w = w / w.sum(1, keepdim=True)
    mask = torch.zeros(E, dtype=torch.bool)
    wr = hmoe.KTMoEWrapper(0, E, k, H, I, mask, 2, 1, None, 64, method="BF16")
    wr.load_weights_from_tensors(gate, up, down)
    out = wr.forward(x, ids, w)
    f = lambda t: t.float().numpy()  # noqa: E731
    ref = ref_moe(np, f(x), ids.numpy(), w.numpy(), f(gate), f(up), f(down))
    check(out.dtype == torch.bfloat16 and tuple(out.shape) == (n, H), "bf16 in, bf16 out")
    e = rel(np, f(out), ref)
    check(e < 2e-2, f"bfloat16 weights through KTMoEWrapper: max rel err {e:.2e} (bf16 rounding)")
    # the mask is updated in place, as SGLang does with gpu_experts_mask.copy_()
    new = torch.zeros(E, dtype=torch.bool)
    new[0] = True
    wr.gpu_experts_mask.copy_(new)
    out2 = wr.forward(x, ids, w)
    ref2 = ref_moe(np, f(x), ids.numpy(), w.numpy(), f(gate), f(up), f(down), new.numpy())
    check(rel(np, f(out2), ref2) < 2e-2, "gpu_experts_mask updated in place takes effect")
    raises(lambda: wr.forward(x.to(torch.float16), ids, w), TypeError, "float16", "fp16 never read as bf16")
    raises(lambda: hmoe.KTMoEWrapper(0, E, k, H, I, torch.zeros(E + 1, dtype=torch.bool), 2, 1, None, 64),
           ValueError, "gpu_experts_mask has shape", "mask of the wrong length refused")
    raises(lambda: hmoe.KTMoEWrapper(0, E, k, H, I, None, 2, 1, None, 64, method="NOPE"), ValueError,
           "method", "unknown method refused")


def test_gguf(np, hmoe):
    binary = os.environ.get("HMOE_BINARY")
    try:
        import gguf
        from gguf import quants
    except ImportError:
        print("skip: the gguf package is missing")
        return
    if not binary:
        print("skip: HMOE_BINARY not set")
        return
    tmp = tempfile.mkdtemp(prefix="hmoe-py-")
    path = os.path.join(tmp, "tiny.gguf")
    subprocess.run([binary, "synth", "--preset", "qwen3-tiny", "--vocab", "none", "-o", path],
                   check=True, capture_output=True)
    r = gguf.GGUFReader(path)
    t = {x.name: x for x in r.tensors}
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    E = int(r.fields[f"{arch}.expert_count"].parts[-1][0])
    k = int(r.fields[f"{arch}.expert_used_count"].parts[-1][0])
    deq = {p: quants.dequantize(t[f"blk.0.ffn_{p}_exps.weight"].data, t[f"blk.0.ffn_{p}_exps.weight"].tensor_type)
           for p in ("gate", "up", "down")}
    _, I, H = deq["gate"].shape
    rng = np.random.default_rng(3)
    wr = hmoe.KTMoEWrapper(0, E, k, H, I, None, 2, 1, path, 64, method="LLAMAFILE")
    wr.load_weights()
    for n in (1, 4, 33):
        x = rng.standard_normal((n, H), dtype=np.float32)
        ids, w = routing(np, rng, n, E, k)
        out = wr.forward(x, ids, w)
        e = rel(np, out, ref_moe(np, x, ids, w, deq["gate"], deq["up"], deq["down"]))
        check(e < 3e-2, f"GGUF {t['blk.0.ffn_gate_exps.weight'].tensor_type.name} experts, {n} tokens vs "
                        f"gguf's dequantization: {e:.2e} (int8 activations)")
    # a second wrapper (another layer) is independent of the first
    wr1 = hmoe.KTMoEWrapper(1, E, k, H, I, None, 2, 1, path, 64, method="LLAMAFILE")
    wr1.load_weights()
    x = rng.standard_normal((4, H), dtype=np.float32)
    ids, w = routing(np, rng, 4, E, k)
    a = wr.forward(x, ids, w).copy()
    wr1.forward(x, ids, w)
    check(np.array_equal(a, wr.forward(x, ids, w)), "two wrappers in one process: independent")
    # the physical-to-logical map permutes the experts
    perm = list(reversed(range(E)))
    wrp = hmoe.KTMoEWrapper(0, E, k, H, I, None, 2, 1, path, 64, method="LLAMAFILE")
    wrp.load_weights(np.array(perm, dtype=np.int64))
    pids = np.array([[perm.index(e) for e in row] for row in ids], dtype=np.int32)
    check(np.array_equal(wrp.forward(x, pids, w), a), "physical_to_logical_map permutes the experts")
    raises(lambda: hmoe.KTMoEWrapper(0, E, k, H, I // 2, None, 2, 1, path, 64).load_weights(), ValueError,
           "tensor-parallel", "a partition of the intermediate size is named as such")
    raises(lambda: hmoe.KTMoEWrapper(0, E, k, H + 1, I, None, 2, 1, path, 64).load_weights(), ValueError,
           "hidden_size", "wrong hidden size named")
    raises(lambda: hmoe.KTMoEWrapper(5, E, k, H, I, None, 2, 1, path, 64).load_weights(), ValueError,
           "layer 5", "a layer the model does not have")
    raises(lambda: hmoe.MoE(os.path.join(tmp, "none.gguf"), 0), RuntimeError, "none.gguf", "a missing file named")


def test_kt_kernel():
    """the same weights and routing through kt-kernel (where it imports): scripts/kt_compare.py"""
    binary = os.environ.get("HMOE_BINARY")
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    if not binary:
        return
    path = os.path.join(tempfile.mkdtemp(prefix="hmoe-kt-"), "tiny.gguf")
    subprocess.run([binary, "synth", "--preset", "qwen3-tiny", "--vocab",
                    os.path.join(root, "data", "demo-vocab.gguf"), "--vocab-size", "4096", "-o", path],
                   check=True, capture_output=True)
    r = subprocess.run([sys.executable, os.path.join(root, "scripts", "kt_compare.py"), "--gguf", path,
                        "--threads", "2", "--tokens", "1,7,33"], capture_output=True, text=True, timeout=600)
    if r.returncode == 77:
        print("skip: kt-kernel is not installed (the comparison with it runs where it is)")
        return
    rows = [ln for ln in r.stdout.splitlines() if ln.strip()[:1].isdigit()]
    check(r.returncode == 0 and len(rows) == 3, "kt-kernel and hmoe agree on the same weights and routing:\n"
          + "\n".join(rows) + (r.stderr[-500:] if r.returncode else ""))


def main():
    try:
        import numpy as np
    except ImportError:
        print("skip: numpy missing")
        return 77
    import hmoe
    test_import_alone()
    test_f32(np, hmoe)
    test_stream(np, hmoe)
    test_bf16_torch(np, hmoe)
    test_gguf(np, hmoe)
    test_kt_kernel()
    print(f"{len(FAILS)} failed" + (": " + "; ".join(FAILS) if FAILS else ""))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
