#!/usr/bin/env python3
"""Cross-checks our GGUF code with the `gguf` Python package (pip: gguf, numpy):
1. the gguf package writes a fixture (tests/gen/gguf_fixture.py) -> our reader checks it;
2. our writer writes a reference file -> gguf.GGUFReader reads it and every value is compared;
3. our ggml type table equals gguf.constants.GGML_QUANT_SIZES for every type the package knows.
Usage: gguf_python.py TEST_GGUF_BINARY"""
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import gguf
    from gguf import GGUFReader, GGUFValueType as VT
    from gguf.constants import GGML_QUANT_SIZES
except ImportError:
    print("gguf_python: the `gguf` package is missing (pip install gguf numpy)", file=sys.stderr)
    sys.exit(1)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "gen"))
import gguf_fixture  # noqa: E402

failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg)


def tensor_bytes(which, n):
    return bytes(((i * (7 + which * 6) + which) & 255) for i in range(n))


def main(binary):
    with tempfile.TemporaryDirectory() as d:
        gguf_fixture.main(d)
        r = subprocess.run([binary, "--check", d], capture_output=True, text=True)
        check(r.returncode == 0, "our reader on the gguf package's file:\n" + r.stdout + r.stderr)

        ours = os.path.join(d, "ours.gguf")
        r = subprocess.run([binary, "--write", ours, os.path.join(d, "pyfixture.gguf")],
                           capture_output=True, text=True)
        check(r.returncode == 0, "our writer: " + r.stdout + r.stderr)
        rd = GGUFReader(ours)
        f = rd.fields
        expect = {
            "general.architecture": ([VT.STRING], "qwen3moe"),
            "general.alignment": ([VT.UINT32], 128),
            "t.u8": ([VT.UINT8], 7), "t.i16": ([VT.INT16], -3), "t.u64": ([VT.UINT64], 1 << 40),
            "t.i64": ([VT.INT64], -5), "t.f32": ([VT.FLOAT32], 1.5), "t.f64": ([VT.FLOAT64], 2.25),
            "t.bool": ([VT.BOOL], True), "t.str": ([VT.STRING], "ünïcode"),
            "t.arr_u32": ([VT.ARRAY, VT.UINT32], [1, 2, 3]),
            "t.arr_f32": ([VT.ARRAY, VT.FLOAT32], [0.5, 0.25]),
            "t.arr_str": ([VT.ARRAY, VT.STRING], ["a", "bc", ""]),
            "t.arr_empty": ([VT.ARRAY, VT.INT32], []),
        }
        for key, (types, val) in expect.items():
            check(key in f, f"{key} missing")
            if key not in f:
                continue
            want = types[:1] if val == [] else types  # GGUFReader records no sub-type for []
            check(list(f[key].types) == want, f"{key}: types {f[key].types} != {want}")
            got = f[key].contents()
            check(got == val, f"{key}: {got!r} != {val!r}")
        check("t.nested" in f and list(f["t.nested"].types) == [VT.ARRAY, VT.ARRAY, VT.INT32],
              f"t.nested: {f['t.nested'].types if 't.nested' in f else None}")
        check(len(f) == len(expect) + 4, f"field count {len(f)}")  # + GGUF.* pseudo fields, nested
        ts = {t.name: t for t in rd.tensors}
        check(list(ts) == ["a", "b", "c", "d"], f"tensor order {list(ts)}")
        a = ts["a"]
        check(a.tensor_type == gguf.GGMLQuantizationType.F32 and list(a.shape) == [3, 2], "a meta")
        check(np.array_equal(np.asarray(a.data).reshape(-1), np.arange(6, dtype=np.float32) * 0.5),
              "a data")
        for name, which, qt, shape, nbytes in (("b", 1, "Q8_0", [64, 2], 136),
                                               ("c", 2, "BF16", [16], 32),
                                               ("d", 3, "F16", [5], 10)):
            t = ts[name]
            check(t.tensor_type.name == qt and list(t.shape) == shape and t.n_bytes == nbytes,
                  f"{name}: {t.tensor_type.name} {list(t.shape)} {t.n_bytes}")
            check(np.asarray(t.data).tobytes() == tensor_bytes(which, nbytes), f"{name} data")
            check(t.data_offset % 128 == 0, f"{name} offset {t.data_offset}")

    out = subprocess.run([binary, "--types"], capture_output=True, text=True, check=True).stdout
    ours = {int(l.split()[0]): (l.split()[1], int(l.split()[2]), int(l.split()[3]))
            for l in out.splitlines()}
    for qt, (block, size) in GGML_QUANT_SIZES.items():
        if qt.name == "Q8_1" and size == 40:
            size = 36  # gguf-py keeps Q8_1's pre-2023 layout (float d, s); ggml's block is 36 bytes
        check(int(qt) in ours, f"type {qt.name} ({int(qt)}) missing from our table")
        if int(qt) in ours:
            check(ours[int(qt)] == (qt.name, block, size),
                  f"type {int(qt)}: ours {ours[int(qt)]}, gguf {(qt.name, block, size)}")
    check(len(ours) >= len(GGML_QUANT_SIZES), "our table lacks types")
    print(f"gguf_python: {len(GGML_QUANT_SIZES)} types compared; {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
