#!/usr/bin/env python3
"""safetensors_fixtures.py - writes the safetensors test fixtures with the reference writer.

The `safetensors` package (Hugging Face's reference implementation) is the oracle: every file is
written by safetensors.numpy.save_file, and manifest.json records what it was given (names,
dtypes, shapes, byte sizes, FNV-1a 64 of each tensor's little-endian bytes and the metadata).
tests/test_safetensors.c opens the files with hmoe's reader and checks it against the manifest.

    pip install safetensors numpy ml_dtypes
    python3 tests/gen/safetensors_fixtures.py            # rewrites tests/data/safetensors/
    python3 tests/gen/safetensors_fixtures.py --corpus   # also fuzz/corpus/safetensors/ seeds

Output is deterministic (fixed seeds), so rerunning it leaves git clean.
"""
import argparse
import json
import os
import struct
import sys

import ml_dtypes
import numpy as np
import safetensors
from safetensors.numpy import save_file

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "safetensors")
CORPUS = os.path.join(ROOT, "fuzz", "corpus", "safetensors")

# numpy dtype -> safetensors spelling (as the writer records it)
DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "F8_E4M3": ml_dtypes.float8_e4m3fn,
    "F8_E5M2": ml_dtypes.float8_e5m2,
    "F8_E8M0": ml_dtypes.float8_e8m0fnu,
    "I8": np.int8,
    "U8": np.uint8,
    "I16": np.int16,
    "U16": np.uint16,
    "I32": np.int32,
    "U32": np.uint32,
    "I64": np.int64,
    "U64": np.uint64,
    "BOOL": np.bool_,
}


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def make(rng, dtype_name, shape):
    dt = DTYPES[dtype_name]
    n = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    if dtype_name == "BOOL":
        a = rng.integers(0, 2, n).astype(np.bool_)
    elif dtype_name == "F8_E8M0":
        a = np.exp2(rng.integers(-8, 8, n).astype(np.float32)).astype(dt)
    elif np.issubdtype(np.dtype(dt), np.integer):
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    else:
        a = (rng.standard_normal(n) * 4).astype(np.float32).astype(dt)
    return a.reshape(shape)


def describe(tensors, shard_of=None):
    out = {}
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a).tobytes()  # this generator runs on little-endian x86
        entry = {
            "dtype": next(k for k, v in DTYPES.items() if np.dtype(v) == a.dtype),
            "shape": list(a.shape),
            "nbytes": len(raw),
            "fnv1a64": fnv1a64(raw),
        }
        if shard_of:
            entry["shard"] = shard_of[name]
        out[name] = entry
    return out


def check_roundtrip(path, tensors):
    """The reference reader (safetensors.deserialize: names, dtypes, shapes, raw bytes) must give
    back exactly what was written."""
    with open(path, "rb") as f:
        back = {name: v for name, v in safetensors.deserialize(f.read())}
    assert set(back) == set(tensors), path
    want = describe(tensors)
    for k, v in back.items():
        got = (v["dtype"], list(v["shape"]), fnv1a64(bytes(v["data"])))
        assert got == (want[k]["dtype"], want[k]["shape"], want[k]["fnv1a64"]), (path, k, got)


def write_dtypes(manifest):
    rng = np.random.default_rng(1234)
    shapes = {
        "F64": [3],
        "F32": [2, 3],
        "F16": [4, 2],
        "BF16": [2, 2, 3],
        "F8_E4M3": [5, 4],
        "F8_E5M2": [7],
        "F8_E8M0": [6],
        "I8": [9],
        "U8": [3, 3],
        "I16": [2, 5],
        "U16": [4],
        "I32": [3, 1, 2],
        "U32": [2],
        "I64": [2, 2],
        "U64": [3],
        "BOOL": [10],
    }
    tensors = {"t.%s" % k.lower(): make(rng, k, s) for k, s in shapes.items()}
    tensors["scalar.f32"] = np.array(2.5, dtype=np.float32)  # 0-d
    tensors["scalar.bf16"] = np.array(-1.0, dtype=ml_dtypes.bfloat16)
    tensors["empty.f32"] = np.zeros([0], dtype=np.float32)
    tensors["empty.i64"] = np.zeros([3, 0, 2], dtype=np.int64)
    tensors["rank8.u8"] = make(rng, "U8", [1, 2, 1, 2, 1, 2, 1, 2])
    # One key per file: the writer keeps metadata in a Rust HashMap, so the order of two or more
    # keys changes from run to run (the files would differ on every regeneration).
    meta = {"format": "pt"}
    path = os.path.join(DATA, "dtypes.safetensors")
    save_file(tensors, path, metadata=meta)
    check_roundtrip(path, tensors)
    manifest["dtypes.safetensors"] = {
        "shards": ["dtypes.safetensors"],
        "metadata": meta,
        "tensors": describe(tensors),
    }


def write_single(manifest):
    """A directory holding model.safetensors."""
    rng = np.random.default_rng(7)
    os.makedirs(os.path.join(DATA, "single"), exist_ok=True)
    tensors = {
        "model.embed_tokens.weight": make(rng, "BF16", [8, 4]),
        "model.norm.weight": make(rng, "F32", [4]),
    }
    meta = {"producer": "hmoe tests/gen/safetensors_fixtures.py"}
    path = os.path.join(DATA, "single", "model.safetensors")
    save_file(tensors, path, metadata=meta)
    check_roundtrip(path, tensors)
    manifest["single"] = {
        "shards": ["model.safetensors"],
        "metadata": meta,
        "tensors": describe(tensors),
    }


def write_sharded(manifest):
    """A 2-shard MoE-like model with model.safetensors.index.json."""
    rng = np.random.default_rng(42)
    d = os.path.join(DATA, "sharded")
    os.makedirs(d, exist_ok=True)
    shard_names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    shards = [
        {
            "model.embed_tokens.weight": make(rng, "BF16", [16, 8]),
            "model.layers.0.self_attn.q_proj.weight": make(rng, "BF16", [8, 8]),
            "model.layers.0.mlp.gate.weight": make(rng, "BF16", [4, 8]),
            "model.layers.0.mlp.experts.0.gate_proj.weight": make(rng, "F8_E4M3", [6, 8]),
            "model.layers.0.mlp.experts.0.gate_proj.weight_scale_inv": make(rng, "F32", [1, 1]),
        },
        {
            "model.layers.0.mlp.experts.1.gate_proj.weight": make(rng, "F8_E4M3", [6, 8]),
            "model.layers.0.mlp.experts.1.gate_proj.weight_scale_inv": make(rng, "F32", [1, 1]),
            "model.norm.weight": make(rng, "BF16", [8]),
            "lm_head.weight": make(rng, "BF16", [16, 8]),
        },
    ]
    shard_of, all_tensors, total = {}, {}, 0
    for name, tensors in zip(shard_names, shards):
        path = os.path.join(d, name)
        save_file(tensors, path, metadata={"format": "pt"})
        check_roundtrip(path, tensors)
        for k, a in tensors.items():
            shard_of[k] = name
            all_tensors[k] = a
            total += a.nbytes
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(shard_of.items()))}
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    manifest["sharded"] = {
        "shards": shard_names,
        "metadata": {"format": "pt"},
        "tensors": describe(all_tensors, shard_of),
    }


def raw_file(header: bytes, data: bytes = b"", length=None) -> bytes:
    return struct.pack("<Q", len(header) if length is None else length) + header + data


def write_corpus():
    """Small seeds for fuzz/fuzz_safetensors.c: valid files and one of each kind of error."""
    os.makedirs(CORPUS, exist_ok=True)
    rng = np.random.default_rng(99)
    seeds = {}
    small = {"a": make(rng, "F32", [2, 2]), "b": make(rng, "BF16", [3]), "s": np.array(1, np.int8)}
    seeds["valid_small"] = safetensors.numpy.save(small, metadata={"format": "pt"})
    seeds["valid_all_dtypes"] = safetensors.numpy.save(
        {"t.%s" % k.lower(): make(rng, k, [2]) for k in DTYPES}
    )
    seeds["valid_empty"] = safetensors.numpy.save({})
    seeds["valid_zero_size"] = safetensors.numpy.save(
        {"e": np.zeros([0, 3], np.float32), "x": np.ones([1], np.float16)}
    )
    hdr = b'{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
    seeds["bad_truncated"] = raw_file(hdr, b"\0" * 4)
    seeds["bad_length"] = raw_file(hdr, b"\0" * 8, length=len(hdr) + 100)
    seeds["bad_json"] = raw_file(b'{"x":{"dtype":"F32","shape":[2],', b"\0" * 8)
    seeds["bad_overlap"] = raw_file(
        b'{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
        b'"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}',
        b"\1" * 6,
    )
    seeds["bad_reversed"] = raw_file(b'{"x":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}')
    seeds["bad_dtype"] = raw_file(
        b'{"__metadata__":{"k":"v"},"x":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}', b"\0"
    )
    seeds["hole"] = raw_file(
        b'{"a":{"dtype":"I16","shape":[1],"data_offsets":[4,6]},'
        b'"b":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}',
        b"\2" * 8,
    )
    seeds["bad_rank9"] = raw_file(
        b'{"r":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}', b"\1"
    )
    seeds["bad_overflow"] = raw_file(
        b'{"o":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,4]},'
        b'"p":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[4,5]}}',
        b"\0" * 5,
    )
    for name, blob in seeds.items():
        with open(os.path.join(CORPUS, name + ".safetensors"), "wb") as f:
            f.write(blob)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", action="store_true", help="also write fuzz/corpus/safetensors/")
    args = ap.parse_args()
    os.makedirs(DATA, exist_ok=True)
    manifest = {}
    write_dtypes(manifest)
    write_single(manifest)
    write_sharded(manifest)
    doc = {
        "generator": "tests/gen/safetensors_fixtures.py",
        "oracle": "safetensors %s (numpy %s, ml_dtypes %s)"
        % (safetensors.__version__, np.__version__, ml_dtypes.__version__),
        "hash": "FNV-1a 64 of the tensor's little-endian bytes, 16 hex digits",
        "models": manifest,
    }
    with open(os.path.join(DATA, "manifest.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    if args.corpus:
        write_corpus()
    return 0


if __name__ == "__main__":
    sys.exit(main())
