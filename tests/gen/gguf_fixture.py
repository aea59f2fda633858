#!/usr/bin/env python3
"""Writes tests/data/gguf/pyfixture.gguf with the `gguf` package's own writer (the oracle) and a
manifest (pyfixture.json) of every metadata value and tensor that test_gguf checks our reader
against. Usage: python3 tests/gen/gguf_fixture.py [OUT_DIR]   (needs: pip install gguf numpy)"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGUFValueType as VT, GGMLQuantizationType as QT


def fnv1a(b: bytes) -> str:
    h = 1469598103934665603
    for x in b:
        h = ((h ^ x) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "pyfixture.gguf")
    rng = np.random.default_rng(1234)
    w = gguf.GGUFWriter(path, arch="qwen3moe")
    w.add_custom_alignment(64)
    kv = {}

    def add(key, val, vtype, sub=None, manifest_val=None):
        w.add_key_value(key, val, vtype, sub)
        m = {"type": vtype.name.lower(), "value": manifest_val if manifest_val is not None else val}
        if sub is not None:
            m["elem"] = sub.name.lower()
        kv[key] = m

    add("test.u8", 200, VT.UINT8)
    add("test.i8", -100, VT.INT8)
    add("test.u16", 60000, VT.UINT16)
    add("test.i16", -30000, VT.INT16)
    add("test.u32", 4000000000, VT.UINT32)
    add("test.i32", -2000000000, VT.INT32)
    # jansson holds integers as int64: values beyond it travel as strings in the manifest
    add("test.u64", 18000000000000000000, VT.UINT64, manifest_val="18000000000000000000")
    add("test.i64", -9000000000000000000, VT.INT64)
    add("test.f32", 0.1, VT.FLOAT32)
    add("test.f64", 1e-300, VT.FLOAT64)
    add("test.bool_t", True, VT.BOOL)
    add("test.bool_f", False, VT.BOOL)
    add("test.str", "héllo, wörld ✓", VT.STRING)
    add("test.str_empty", "", VT.STRING)
    add("test.arr_i32", [1, -2, 3, -4, 2147483647], VT.ARRAY, VT.INT32)
    add("test.arr_f32", [0.5, -1.25, 3.0e10], VT.ARRAY, VT.FLOAT32)
    add("test.arr_u8", list(range(0, 256, 17)), VT.ARRAY, VT.UINT8)
    add("test.arr_bool", [True, False, True], VT.ARRAY, VT.BOOL)
    add("test.arr_str", ["a", "", "Ġthe", "日本語", "x" * 300], VT.ARRAY, VT.STRING)
    add("test.arr_nested", [[1, 2, 3], [4], [5, 6]], VT.ARRAY, VT.ARRAY)
    add("qwen3moe.block_count", 2, VT.UINT32)

    tensors = []

    def tensor(name, arr, qtype=None, shape=None):
        if qtype is None:
            w.add_tensor(name, arr)
            qt = {np.float32: QT.F32, np.float16: QT.F16}[arr.dtype.type]
            ne = list(reversed(arr.shape))
        else:
            w.add_tensor(name, arr, raw_dtype=qtype)  # arr holds the raw bytes, shape in bytes
            qt = qtype
            ne = list(reversed(shape))
        tensors.append({"name": name, "type": int(qt), "ne": ne, "fnv": fnv1a(arr.tobytes())})

    tensor("token_embd.weight", rng.standard_normal((4, 64)).astype(np.float32))
    tensor("blk.0.attn_norm.weight", rng.standard_normal(64).astype(np.float32))
    tensor("blk.0.ffn_up.weight", rng.standard_normal((3, 32)).astype(np.float16))
    # quantized: raw bytes with the block geometry (2 rows x 256 elements)
    q8 = rng.integers(0, 256, size=(2, 8 * 34), dtype=np.uint8)
    tensor("blk.0.ffn_down.weight", q8, QT.Q8_0, [2, 256])
    q4k = rng.integers(0, 256, size=(2, 144), dtype=np.uint8)
    tensor("blk.0.ffn_gate.weight", q4k, QT.Q4_K, [2, 256])
    bf = rng.integers(0, 65536, size=(5, 16), dtype=np.uint16)
    tensor("blk.1.attn_q.weight", bf.view(np.uint8).reshape(5, 32), QT.BF16, [5, 16])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    kv["general.architecture"] = {"type": "string", "value": "qwen3moe"}
    kv["general.alignment"] = {"type": "uint32", "value": 64}
    with open(os.path.join(out_dir, "pyfixture.json"), "w") as f:
        json.dump({"alignment": 64, "kv": kv, "tensors": tensors}, f, indent=1, ensure_ascii=False)
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data", "gguf"))
