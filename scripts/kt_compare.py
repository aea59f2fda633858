#!/usr/bin/env python3
"""kt_compare.py - one MoE layer of a GGUF through hmoe.KTMoEWrapper and kt-kernel's KTMoEWrapper
(LLAMAFILE) with the same weights and routing: how far apart the outputs are, and both speeds at
1, 64 and 512 tokens.

    PYTHONPATH=build/python python3 scripts/kt_compare.py [--gguf FILE] [--threads N] [--tokens 1,64,512]

Without --gguf, `hmoe synth --preset qwen3-30b-a3b --layers 1` writes one real-shaped layer (128
experts of 2048 x 768, Q4_K, top-8) to a temporary file. kt-kernel comes from PyPI (pip install
kt-kernel; it needs Python 3.11 and torch). On a machine without an NVIDIA driver its pinned host
buffers are replaced by plain ones (the only change to it). Exits 77 when kt-kernel is missing.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time


def unpin_without_driver(torch):
    """kt-kernel allocates pinned buffers, which need an NVIDIA driver: plain memory otherwise"""
    if torch.cuda.is_available():
        return

    def unpin(f):
        def g(*a, **k):
            k.pop("pin_memory", None)
            return f(*a, **k)
        return g
    torch.empty, torch.zeros, torch.full, torch.ones = (unpin(f) for f in (
        torch.empty, torch.zeros, torch.full, torch.ones))


def shapes(path):
    import gguf
    t = {x.name: x for x in gguf.GGUFReader(path).tensors}
    h, i, e = (int(v) for v in t["blk.0.ffn_gate_exps.weight"].shape)
    r = gguf.GGUFReader(path)
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    k = int(r.fields[f"{arch}.expert_used_count"].parts[-1][0])
    return e, h, i, k


def timed(fn, reps):
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--tokens", default="1,64,512")
    ap.add_argument("--hmoe", default=os.environ.get("HMOE_BINARY", "build/hmoe"))
    a = ap.parse_args()
    os.environ.setdefault("KT_FORCE_SYNC_SUBMIT", "1")  # CPU tensors: kt-kernel's synchronous path
    try:
        import torch
        unpin_without_driver(torch)
        import kt_kernel
    except ImportError as e:
        print(f"skip: {e} (pip install kt-kernel, Python 3.11)")
        return 77
    import hmoe
    path = a.gguf
    if not path:
        path = os.path.join(tempfile.mkdtemp(prefix="hmoe-kt-"), "layer.gguf")
        subprocess.run([a.hmoe, "synth", "--preset", "qwen3-30b-a3b", "--layers", "1", "--vocab",
                        "data/demo-vocab.gguf", "--vocab-size", "4096", "-o", path],
                       check=True, capture_output=True)
    E, H, I, k = shapes(path)
    mask = torch.zeros(E, dtype=torch.bool)
    common = dict(layer_idx=0, num_experts=E, num_experts_per_tok=k, hidden_size=H,
                  moe_intermediate_size=I, gpu_experts_mask=mask, cpuinfer_threads=a.threads,
                  threadpool_count=1, weight_path=path, chunked_prefill_size=512, method="LLAMAFILE")
    ours = hmoe.KTMoEWrapper(**common)
    ours.load_weights(torch.arange(E, dtype=torch.int64))
    theirs = kt_kernel.KTMoEWrapper(**common)
    theirs.load_weights(torch.arange(E, dtype=torch.int64))
    print(f"{path}: {E} experts, hidden {H}, intermediate {I}, top-{k}, {a.threads} threads, "
          f"kt-kernel {kt_kernel.__version__} ({getattr(kt_kernel, '__cpu_variant__', '?')}), hmoe {hmoe.version()}")
    print(f"{'tokens':>6} {'max |diff| / max |kt|':>22} {'hmoe ms':>9} {'kt-kernel ms':>13} {'hmoe / kt':>9}")
    g = torch.Generator().manual_seed(0)
    worst = 0.0
    for n in (int(x) for x in a.tokens.split(",")):
        x = torch.randn(n, H, generator=g).to(torch.bfloat16)
        ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(n)]).to(torch.int64)
        w = torch.rand(n, k, generator=g)
        w = w / w.sum(1, keepdim=True)
        o1 = ours.forward(x, ids, w).float()
        o2 = theirs.forward(x, ids, w, 0).float()
        d = float((o1 - o2).abs().max() / o2.abs().max())
        worst = max(worst, d)
        reps = max(3, min(50, 2000 // n))
        t1 = timed(lambda: ours.forward(x, ids, w), reps)
        t2 = timed(lambda: theirs.forward(x, ids, w, 0), reps)
        print(f"{n:6d} {d:22.2e} {t1 * 1e3:9.3f} {t2 * 1e3:13.3f} {t2 / t1:8.2f}x")
    return 0 if worst < 5e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
