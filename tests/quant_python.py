#!/usr/bin/env python3
"""Our reference (de)quantization (src/quant/ref.c) against the `gguf` package (gguf.quants):
1. dequantization: random blocks of every type both sides support -> float32 results equal bit for
   bit (NaN: both NaN; F32/BF16 also keep NaN payloads); Q8_1/Q8_K, which gguf-py cannot
   dequantize, against the format's formula in numpy;
2. quantization: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 equal gguf.quants.quantize byte for byte on random
   data and edge cases (zeros, signed zeros, constants, huge/tiny magnitudes, exact rounding ties);
3. error: for each type we quantize, the RMSE of our blocks (dequantized by gguf) is no worse than
   gguf's quantizer where it has one, and better than a plain round-to-nearest quantizer written
   here (valid blocks of the same format, also dequantized by gguf) where it has none;
4. FP8 E4M3: our decoder on all 256 codes and our encoder on ties, neighbours of ties, specials and
   random values against a brute-force nearest-even reference (and ml_dtypes when installed).
Usage: quant_python.py TEST_QUANT_BINARY"""
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np

# gguf-py's numpy code warns on the edge cases we feed it on purpose (f16 overflow of d, 1/d = inf)
warnings.filterwarnings("ignore", category=RuntimeWarning)

try:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as QT
    from gguf.quants import _type_traits, dequantize, quantize
except ImportError:
    print("quant_python: the `gguf` package is missing (pip install gguf numpy)", file=sys.stderr)
    sys.exit(1)

failures = 0
TMP = tempfile.mkdtemp(prefix="quant_python.")


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg)
    return cond


def run(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{os.path.basename(binary)} {' '.join(args)}: exit {r.returncode}\n"
                           + r.stdout + r.stderr)
    return r.stdout


def ours_dequant(binary, name, raw):
    src, dst = os.path.join(TMP, "in.bin"), os.path.join(TMP, "out.bin")
    raw.tofile(src)
    run(binary, "--dequant", name, src, dst)
    return np.fromfile(dst, dtype=np.float32)


def ours_quant(binary, name, x):
    src, dst = os.path.join(TMP, "in.bin"), os.path.join(TMP, "out.bin")
    np.ascontiguousarray(x, dtype=np.float32).tofile(src)
    run(binary, "--quant", name, src, dst)
    return np.fromfile(dst, dtype=np.uint8)


# ---------------------------------------------------------------- 1. dequantization

# byte offsets of the f16 fields (scales, mins) in each block; they get finite values
F16_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
              "Q8_1": [0, 2], "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2],
              "Q6_K": [208], "IQ4_NL": [0], "IQ4_XS": [0]}


def sane_f16(rng, n):
    """finite halves: 10^-7.5 .. 10^3 (subnormals included), random sign, a few zeros"""
    v = 10.0 ** rng.uniform(-7.5, 3.0, n) * rng.choice([-1.0, 1.0], n)
    v[rng.random(n) < 0.03] = 0.0
    return v.astype(np.float16)


# hmoe's own layouts (not ggml types, so gguf-py knows nothing of them): (block, bytes)
INTERNAL = {"FP8_B128": (128, 132)}


def random_blocks(name, nblocks, rng):
    if name == "FP8_B128":  # float d (finite, random sign), 128 codes of every value incl. NaN
        raw = rng.integers(0, 256, size=(nblocks, 132), dtype=np.uint8)
        d = (10.0 ** rng.uniform(-6, 2, nblocks) * rng.choice([-1, 1], nblocks)).astype(np.float32)
        raw[:, 0:4] = d.view(np.uint8).reshape(nblocks, 4)
        return raw
    qt = QT[name]
    _, ts = GGML_QUANT_SIZES[qt]
    if name == "Q8_1":
        ts = 36  # half d, half s, 32 x int8 (gguf-py's table still says 40)
    raw = rng.integers(0, 256, size=(nblocks, ts), dtype=np.uint8)
    for off in F16_FIELDS.get(name, []):
        raw[:, off:off + 2] = sane_f16(rng, nblocks).view(np.uint8).reshape(nblocks, 2)
    if name == "Q8_K":  # float d, 256 x int8, 16 x int16 bsums (kept consistent)
        d = (10.0 ** rng.uniform(-6, 2, nblocks) * rng.choice([-1, 1], nblocks)).astype(np.float32)
        raw[:, 0:4] = d.view(np.uint8).reshape(nblocks, 4)
        qs = raw[:, 4:260].view(np.int8).astype(np.int16)
        raw[:, 260:292] = qs.reshape(nblocks, 16, 16).sum(-1).astype(np.int16).view(np.uint8)
    return raw


def formula_dequant(name, raw):
    """Q8_1, Q8_K and FP8_B128 have no gguf-py dequantizer: y = d * q, in float32 like the C code
    (FP8_B128: q from the E4M3 definition, fp8_table)"""
    if name == "FP8_B128":
        d = raw[:, 0:4].copy().view(np.float32)
        return (fp8_table()[raw[:, 4:132]].astype(np.float32) * d).reshape(-1)
    if name == "Q8_1":
        d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)
        return (raw[:, 4:36].view(np.int8).astype(np.float32) * d).reshape(-1)
    d = raw[:, 0:4].copy().view(np.float32)
    return (raw[:, 4:260].view(np.int8).astype(np.float32) * d).reshape(-1)


def compare_bits(label, ours, ref, keep_nan_bits):
    ref = np.asarray(ref, dtype=np.float32).reshape(-1)
    if not check(ours.shape == ref.shape, f"{label}: {ours.shape[0]} values, reference {ref.shape[0]}"):
        return
    ou, ru = ours.view(np.uint32), ref.view(np.uint32)
    on, rn = np.isnan(ours), np.isnan(ref)
    check(np.array_equal(on, rn), f"{label}: NaN at {np.flatnonzero(on != rn)[:5]} differs")
    bad = ou != ru
    if not keep_nan_bits:
        bad &= ~(on & rn)
    idx = np.flatnonzero(bad)
    check(idx.size == 0, f"{label}: {idx.size} values differ, first at "
          + ", ".join(f"[{i}] ours {ours[i]!r} ({ou[i]:08x}) gguf {ref[i]!r} ({ru[i]:08x})"
                      for i in idx[:4]))
    return int(on.sum())


def test_dequant(binary, ours_types, rng):
    gguf_types = {"F32", "F16"} | {t.name for t in _type_traits}
    print("dequantize (random blocks, f16 scales finite):")
    for name in ours_types:
        qt = QT[name] if name not in INTERNAL else None
        bs = INTERNAL[name][0] if name in INTERNAL else GGML_QUANT_SIZES[qt][0]
        nblocks = 1024 if bs > 1 else 65536
        if name in ("F32", "F16", "BF16"):  # every bit pattern: NaN, inf, subnormals
            raw = rng.integers(0, 256, size=(nblocks, 4 if name == "F32" else 2), dtype=np.uint8)
        else:
            raw = random_blocks(name, nblocks, rng)
        ours = ours_dequant(binary, name, raw)
        if name in gguf_types:
            ref, oracle = dequantize(raw.reshape(-1), qt), "gguf"
        elif name in ("Q8_1", "Q8_K", "FP8_B128"):
            ref, oracle = formula_dequant(name, raw), "numpy formula (gguf-py has none)"
        else:
            check(False, f"{name}: no oracle")
            continue
        nans = compare_bits(name, ours, ref, keep_nan_bits=name in ("F32", "BF16"))
        print(f"  {name:7s} {ours.size:8d} values vs {oracle}" + (f", {nans} NaN" if nans else ""))
    missing = sorted(gguf_types - set(ours_types))
    print("  (gguf-py dequantizes, we do not: " + " ".join(missing) + ")")


# ---------------------------------------------------------------- 2. exact quantization

def edge_blocks(rng):
    """(label, blocks of 32 float32) pairs of awkward inputs"""
    g = rng.standard_normal((4096, 32)).astype(np.float32)
    cases = [("gaussian", g * (10.0 ** rng.uniform(-4, 4, (4096, 1))).astype(np.float32)),
             ("uniform", rng.uniform(-1, 1, (1024, 32)).astype(np.float32)),
             ("zeros", np.zeros((2, 32), np.float32)),
             ("negative zeros", np.full((2, 32), -0.0, np.float32)),
             ("mixed zeros", np.array([[0.0, -0.0] * 16, [-0.0, 0.0] * 16], np.float32)),
             ("constants", np.array([[c] * 32 for c in (1.0, -3.7, 0.1, 5e5, -1e-7)], np.float32)),
             ("argmax ties", np.array([[5.0, -5.0] * 16, [-5.0, 5.0] * 16,
                                      [-2.0] + [2.0] * 31], np.float32)),
             ("halves", (rng.integers(-254, 255, (32, 32)) * 0.5).astype(np.float32))]
    for mag in (1e-38, 1e-36, 1e-20, 1e-9, 1e-6, 1e4, 1e6, 1e7, 1e30, 1e38):
        cases.append((f"magnitude {mag:g}", (g[:8] * np.float32(mag / 4)).astype(np.float32)))
    t8 = np.zeros((4, 32), np.float32)  # Q8_0: d = 1 or 2 -> x*id lands on k + 0.5 exactly
    t8[:2, 0], t8[2:, 0] = 127, -254
    t8[:2, 1:] = np.arange(-15.5, 15.5, 1)[:31] * np.array([[1], [-1]])
    t8[2:, 1:] = np.arange(-31, 31, 2)[:31] * np.array([[1], [-1]])
    t4 = np.zeros((4, 32), np.float32)  # Q4_0/Q5_0: d = +-1 -> x*id + 8.5 hits integers
    t4[:, 0] = (-8, 8, -16, 16)
    t4[:, 1:] = np.linspace(-7.5, 7.5, 31)[None, :].round(0) + 0.5
    t1 = np.zeros((2, 32), np.float32)  # Q4_1: min 0, max 15 -> d = 1, (x - 0) + 0.5 integers
    t1[:, 0], t1[:, 1] = 0, 15
    t1[:, 2:] = (np.arange(30) % 15 + 0.5)[None, :]
    cases += [("ties q8", t8), ("ties q4/q5", t4), ("ties q4_1", t1)]
    return cases


def test_exact_quant(binary, ours_quant_types, rng):
    cases = edge_blocks(rng)
    data = np.concatenate([c for _, c in cases]).astype(np.float32)
    labels = [lab for lab, c in cases for _ in range(len(c))]
    exact = [t for t in ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1") if t in ours_quant_types]
    print(f"quantize, byte-exact vs gguf.quants.quantize ({len(data)} blocks, {len(cases)} cases):")
    for name in exact:
        _, ts = GGML_QUANT_SIZES[QT[name]]
        ref = quantize(data, QT[name]).reshape(-1, ts)
        ours = ours_quant(binary, name, data).reshape(-1, ts)
        bad = np.flatnonzero((ours != ref).any(axis=1))
        if name in ("Q4_1", "Q5_1"):
            # numpy's min() of +0/-0 depends on its SIMD reduction order (ggml's C keeps the first
            # zero, as we do), so the sign of m may differ; there only the values must agree
            zeros = [b for b in bad if labels[b] == "mixed zeros"]
            same = [b for b in zeros if np.array_equal(dequantize(ours[b], QT[name]).view(np.uint32),
                                                       dequantize(ref[b], QT[name]).view(np.uint32))]
            bad = np.setdiff1d(bad, same)
        for b in bad[:3]:
            print(f"  {name} block {b} ({labels[b]}): x = {data[b][:6]} ...\n"
                  f"    ours {ours[b][:12]}\n    gguf {ref[b][:12]}")
        check(bad.size == 0, f"{name}: {bad.size} of {len(data)} blocks differ from gguf "
              f"(cases: {sorted(set(labels[b] for b in bad))})")
        print(f"  {name:7s} {'ok' if bad.size == 0 else 'MISMATCH'}")


# ---------------------------------------------------------------- 3. error vs baselines

KV_NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                 np.float32)


def f16(v):
    return v.astype(np.float16)


def safe_div(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b != 0, a / np.where(b != 0, b, 1), 0).astype(np.float32)


def nearest_nl(v):
    return np.abs(v[..., None] - KV_NL).argmin(-1).astype(np.uint8)


def pack_nibbles(q):  # (..., 32) codes -> (..., 16) bytes: low = 0..15, high = 16..31
    return (q[..., :16] & 0xF) | ((q[..., 16:] & 0xF) << 4)


def rtn_k4(x, nmax):
    """Q4_K (nmax 15) / Q5_K (31): per 32: s = (max - min)/nmax, m = -min; 6-bit codes of both on
    max/63; then codes round to nearest for the stored scale and min"""
    nb = x.shape[0]
    sb = x.reshape(nb, 8, 32)
    lo = np.minimum(sb.min(-1), 0)
    s, m = (sb.max(-1) - lo) / nmax, -lo
    d, dmin = f16(s.max(-1) / 63), f16(m.max(-1) / 63)
    df, mf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    ls = np.clip(np.round(safe_div(s, df)), 0, 63).astype(np.uint8)
    lm = np.clip(np.round(safe_div(m, mf)), 0, 63).astype(np.uint8)
    sc, mn = (df * ls)[..., None], (mf * lm)[..., None]
    q = np.clip(np.round(safe_div(sb + mn, sc)), 0, nmax).astype(np.uint8)
    scales = np.zeros((nb, 12), np.uint8)
    scales[:, 0:4] = ls[:, :4] | ((ls[:, 4:] >> 4) << 6)
    scales[:, 4:8] = lm[:, :4] | ((lm[:, 4:] >> 4) << 6)
    scales[:, 8:12] = (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)
    q4 = q.reshape(nb, 4, 2, 32)
    qs = ((q4[:, :, 0] & 0xF) | ((q4[:, :, 1] & 0xF) << 4)).reshape(nb, 128)
    parts = [d.view(np.uint8).reshape(nb, 2), dmin.view(np.uint8).reshape(nb, 2), scales]
    if nmax == 31:
        qh = np.zeros((nb, 32), np.uint8)
        for j in range(8):
            qh |= ((q[:, j] >> 4) & 1) << j
        parts.append(qh)
    return np.concatenate(parts + [qs], axis=1)


def rtn_q6_k(x):
    """per 16: s = amax/31; 8-bit codes of s on max/127; codes round to nearest"""
    nb = x.shape[0]
    sb = x.reshape(nb, 16, 16)
    s = np.abs(sb).max(-1) / 31
    d = f16(s.max(-1) / 127)
    df = d.astype(np.float32)[:, None]
    ls = np.clip(np.round(safe_div(s, df)), 0, 127).astype(np.int8)
    sc = (df * ls)[..., None]
    L = (np.clip(np.round(safe_div(sb, sc)), -32, 31) + 32).astype(np.uint8).reshape(nb, 2, 4, 32)
    ql = np.concatenate([(L[:, :, 0] & 0xF) | ((L[:, :, 2] & 0xF) << 4),
                         (L[:, :, 1] & 0xF) | ((L[:, :, 3] & 0xF) << 4)], axis=2).reshape(nb, 128)
    qh = ((L[:, :, 0] >> 4) | ((L[:, :, 1] >> 4) << 2) | ((L[:, :, 2] >> 4) << 4)
          | ((L[:, :, 3] >> 4) << 6)).reshape(nb, 64)
    return np.concatenate([ql, qh, ls.view(np.uint8), d.view(np.uint8).reshape(nb, 2)], axis=1)


def rtn_iq4_xs(x):
    """per 32: s = amax/127; 6-bit codes of s on max/31; nearest code book entry"""
    nb = x.shape[0]
    sb = x.reshape(nb, 8, 32)
    s = np.abs(sb).max(-1) / 127
    d = f16(s.max(-1) / 31)
    df = d.astype(np.float32)[:, None]
    ls = np.clip(np.round(safe_div(s, df)), 0, 31).astype(np.int32)
    q = nearest_nl(safe_div(sb, (df * ls)[..., None]))
    u = (ls + 32).astype(np.uint16)
    scales_h = np.zeros(nb, np.uint16)
    for j in range(8):
        scales_h |= ((u[:, j] >> 4) & 3) << (2 * j)
    scales_l = ((u[:, 0::2] & 0xF) | ((u[:, 1::2] & 0xF) << 4)).astype(np.uint8)
    return np.concatenate([d.view(np.uint8).reshape(nb, 2), scales_h.view(np.uint8).reshape(nb, 2),
                           scales_l, pack_nibbles(q).reshape(nb, 128)], axis=1)


def rtn_iq4_nl(x):
    """per 32: d = amax/127 (f16), nearest code book entry"""
    sb = x.reshape(-1, 32)
    d = f16(np.abs(sb).max(-1) / 127)
    q = nearest_nl(safe_div(sb, d.astype(np.float32)[:, None]))
    return np.concatenate([d.view(np.uint8).reshape(-1, 2), pack_nibbles(q)], axis=1)


RTN = {"Q4_K": lambda x: rtn_k4(x, 15), "Q5_K": lambda x: rtn_k4(x, 31), "Q6_K": rtn_q6_k,
       "IQ4_XS": rtn_iq4_xs, "IQ4_NL": rtn_iq4_nl}


def rmse(a, b):
    return float(np.sqrt(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)))


def test_rmse(binary, ours_quant_types, rng):
    n = 256 * 1024
    sets = {"gaussian": rng.standard_normal(n),
            "laplace": rng.laplace(size=n),
            "gauss+0.5": rng.standard_normal(n) + 0.5}
    gguf_quant = {t.name for t, c in _type_traits.items() if "quantize_blocks" in c.__dict__}
    print("RMSE (every result dequantized by gguf-py; 'rtn' = plain round-to-nearest of the same "
          "format, used where gguf-py has no quantizer):")
    print(f"  {'type':7s} {'data':10s} {'ours':>10s} {'gguf':>10s} {'rtn':>10s}  ours/ref")
    for name in ours_quant_types:
        if name in INTERNAL:
            continue  # not a gguf-py type: test_fp8_b128 checks it byte for byte
        qt = QT[name]
        bs, ts = GGML_QUANT_SIZES[qt]
        for label, x in sets.items():
            x = x.astype(np.float32).reshape(-1, 256)
            ours_raw = ours_quant(binary, name, x)
            ours = rmse(dequantize(ours_raw, qt).reshape(-1), x.reshape(-1))
            g = r = float("nan")
            if name in gguf_quant:
                g = rmse(dequantize(quantize(x, qt).reshape(-1), qt).reshape(-1), x.reshape(-1))
                ref, ok = g, ours <= g
            elif name in RTN:
                rtn_raw = RTN[name](x.reshape(-1, bs))
                check(rtn_raw.shape[1] == ts, f"{name}: rtn block is {rtn_raw.shape[1]} bytes")
                r = rmse(dequantize(rtn_raw.reshape(-1), qt).reshape(-1), x.reshape(-1))
                ref, ok = r, ours < r
            else:
                check(False, f"{name}: nothing to compare with")
                continue
            check(ok, f"{name} on {label}: our rmse {ours:.6f} is worse than {ref:.6f}")
            cols = " ".join("%10s" % ("-" if v != v else "%.6f" % v) for v in (ours, g, r))
            print(f"  {name:7s} {label:10s} {cols}  {ours / ref:.3f}")


# ---------------------------------------------------------------- 4. FP8 E4M3

def fp8_table():
    """value of every code from the definition: bias 7, 3 mantissa bits, S.1111.111 is NaN"""
    c = np.arange(256)
    e, m = (c >> 3) & 15, (c & 7).astype(np.float64)
    mag = np.where(e == 0, m * 2.0 ** -9, (1 + m / 8) * 2.0 ** (e - 7))
    v = np.where(c & 0x80, -mag, mag)
    v[(c & 0x7f) == 0x7f] = np.nan
    return v.astype(np.float32)


def fp8_encode_ref(x):
    """nearest finite code, ties to the even code; |x| >= 448 -> +-448; NaN -> 0x7f | sign"""
    pos = fp8_table()[:0x7f].astype(np.float64)  # codes 0..0x7e, increasing
    a = np.abs(x.astype(np.float64))
    lo = np.clip(np.searchsorted(pos, a, side="right") - 1, 0, 0x7e)
    hi = np.minimum(lo + 1, 0x7e)
    dlo, dhi = a - pos[lo], pos[hi] - a
    code = np.where(dhi < dlo, hi, np.where(dlo < dhi, lo, np.where(lo % 2 == 0, lo, hi)))
    code = np.where(a >= 448, 0x7e, code)
    code = np.where(np.isnan(x), 0x7f, code)
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def test_fp8(binary, rng):
    out = os.path.join(TMP, "fp8.bin")
    run(binary, "--fp8-decode", out)
    ours = np.fromfile(out, np.float32)
    compare_bits("fp8 decode", ours, fp8_table(), keep_nan_bits=False)
    pos = fp8_table()[:0x7f].astype(np.float32)
    mids = ((pos[:-1].astype(np.float64) + pos[1:]) / 2).astype(np.float32)
    x = np.concatenate([pos, mids, np.nextafter(mids, np.float32(np.inf)),
                        np.nextafter(mids, np.float32(0)),
                        (2.0 ** rng.uniform(-14, 9.5, 50000)).astype(np.float32),
                        np.array([0, 448, 449, 464, 479.99, 480, 1e30, np.finfo(np.float32).max,
                                  np.inf, np.nan, 1e-45, 1e-40, 2.0 ** -10, 1.5 * 2.0 ** -10],
                                 np.float32)])
    x = np.concatenate([x, -x]).astype(np.float32)
    src = os.path.join(TMP, "fp8in.bin")
    x.tofile(src)
    run(binary, "--fp8-encode", src, out)
    got, want = np.fromfile(out, np.uint8), fp8_encode_ref(x)
    bad = np.flatnonzero(got != want)
    check(bad.size == 0, f"fp8 encode: {bad.size} of {x.size} differ, e.g. "
          + ", ".join(f"{x[i]!r} -> {got[i]:#04x} want {want[i]:#04x}" for i in bad[:4]))
    print(f"fp8 e4m3: 256 codes decoded, {x.size} values encoded vs brute-force nearest-even", end="")
    try:
        import ml_dtypes
    except ImportError:
        print("; ml_dtypes not installed: that cross-check skipped")
        return
    md = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    compare_bits("fp8 decode vs ml_dtypes", ours, md, keep_nan_bits=False)
    mx = x.astype(ml_dtypes.float8_e4m3fn)
    ok = ~np.isnan(mx.astype(np.float32))  # ml_dtypes does not saturate: overflow is NaN there
    bad = np.flatnonzero((mx.view(np.uint8) != got) & ok)
    check(bad.size == 0, f"fp8 encode vs ml_dtypes: {bad.size} differ, e.g. "
          + ", ".join(f"{x[i]!r}" for i in bad[:4]))
    print(f"; ml_dtypes {ml_dtypes.__version__} agrees on {int(ok.sum())} in-range values")


def test_fp8_b128(binary, ours_quant_types, rng):
    """FP8_B128 quantizer byte for byte against numpy: d = max|x| / 448 in float32, codes the
    nearest-even E4M3 of x * (1 / d) (fp8_encode_ref), all-zero blocks d = 0 and codes 0"""
    if "FP8_B128" not in ours_quant_types:
        check(False, "FP8_B128: no quantizer")
        return
    g = rng.standard_normal((2048, 128)).astype(np.float32)
    x = np.concatenate([g * (10.0 ** rng.uniform(-6, 4, (2048, 1))).astype(np.float32),
                        rng.laplace(size=(512, 128)).astype(np.float32),
                        np.zeros((2, 128), np.float32)]).astype(np.float32)
    ours = ours_quant(binary, "FP8_B128", x).reshape(-1, 132)
    amax = np.abs(x).max(axis=1).astype(np.float32)
    d = (amax / np.float32(448.0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d > 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    want = np.zeros((x.shape[0], 132), np.uint8)
    want[:, 0:4] = d.view(np.uint8).reshape(-1, 4)
    want[:, 4:] = fp8_encode_ref((x * inv[:, None]).astype(np.float32)).reshape(-1, 128)
    bad = np.flatnonzero((ours != want).any(axis=1))
    check(bad.size == 0, f"FP8_B128 quantize: {bad.size} of {x.shape[0]} blocks differ from numpy")
    deq = formula_dequant("FP8_B128", ours)
    r = rmse(deq, x.reshape(-1)) / float(np.sqrt(np.mean(x.astype(np.float64) ** 2)))
    print(f"FP8_B128: {x.shape[0]} blocks quantized byte for byte as numpy does "
          f"(relative RMSE {r:.4f})")


def main(binary):
    lines = dict(ln.split(" ", 1) for ln in run(binary, "--list").strip().splitlines())
    deq, qnt = lines["dequant"].split(), lines["quant"].split()
    rng = np.random.default_rng(20240601)
    test_dequant(binary, deq, rng)
    test_exact_quant(binary, qnt, rng)
    test_rmse(binary, qnt, rng)
    test_fp8(binary, rng)
    test_fp8_b128(binary, qnt, rng)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    try:
        main(sys.argv[1])
    except RuntimeError as e:
        check(False, str(e))
    finally:
        import shutil
        shutil.rmtree(TMP, ignore_errors=True)
    print(f"quant_python: {'FAILED, ' + str(failures) + ' failures' if failures else 'ok'}")
    sys.exit(1 if failures else 0)
