"""Quantization parity: the converter's Q8_0/Q4_0 bytes equal the runtime's.

Three independent views are compared:
  * convert.py's vectorized numpy quantizers;
  * a scalar, element-by-element re-statement of FORMAT.md's rules here;
  * the runtime's own writer (runtime::model::writer::write_model, built
    into a tiny binary), whose whole .mlb must be byte-identical to the
    converter's for the same f32 weights.
"""

from __future__ import annotations

import numpy as np
import pytest

import convert
from conftest import convert_main, ml, run_ref_writer
from helpers import file_order, random_weights, write_llama2c_legacy
from reference import RefConfig

F = np.float32


def special_blocks() -> np.ndarray:
    """Blocks of 32 that hit every branch of the rules."""
    rng = np.random.default_rng(7)
    blocks = []
    blocks.append(np.zeros(32, F))                                  # zero block: d = 0
    blocks.append(np.full(32, -0.0, F))                             # negative zeros
    b = np.zeros(32, F); b[0] = 127; b[1:9] = [2.5, -2.5, 0.5, -0.5, 1.5, -1.5, 126.5, -126.5]
    blocks.append(b)                                                # exact .5 ties (round away)
    b = rng.standard_normal(32).astype(F); b[5] = -9.0; blocks.append(b)   # negative max
    b = rng.standard_normal(32).astype(F); b[3] = 3.0; b[20] = -3.0; blocks.append(b)  # equal |max|, + first
    b = rng.standard_normal(32).astype(F); b[3] = -3.0; b[20] = 3.0; blocks.append(b)  # equal |max|, - first
    blocks.append((rng.standard_normal(32) * 1e-40).astype(F))      # subnormals: 127/amax overflows
    b = np.zeros(32, F); b[9] = 1e-45; blocks.append(b)             # smallest subnormal, rest zero
    blocks.append((rng.standard_normal(32) * 1e37).astype(F))       # huge
    blocks.append(np.full(32, 0.1, F))                              # constant
    b = np.linspace(-1, 1, 32).astype(F); blocks.append(b)
    blocks.append(rng.uniform(-1, 1, 32).astype(F) * F(1e-3))
    return np.stack(blocks)


def scalar_q8(block):
    amax = F(0)
    for v in block:
        amax = max(amax, abs(F(v)))
    d = F(amax / F(127))
    q = []
    with np.errstate(over="ignore", invalid="ignore"):
        idv = F(F(127) / amax) if amax != 0 else F(0)
        for v in block:
            v = F(v)
            r = np.trunc(F(F(v * idv) + np.copysign(F(0.5), v)))
            q.append(0 if np.isnan(r) else int(min(127, max(-127, r))))
    return q, d


def scalar_q4(block):
    mx = F(0)
    for v in block:
        if abs(F(v)) > abs(mx):
            mx = F(v)
    d = F(mx / F(-8))
    nib = []
    with np.errstate(over="ignore", invalid="ignore"):
        idv = F(F(1) / d) if d != 0 else F(0)
        for v in block:
            r = np.trunc(F(F(F(v) * idv) + F(8.5)))
            nib.append(0 if np.isnan(r) else int(min(15, max(0, r))))
    return [nib[i] | (nib[i + 16] << 4) for i in range(16)], d


def test_vectorized_equals_scalar_rules():
    rng = np.random.default_rng(1)
    x = np.concatenate([special_blocks(), (rng.standard_normal((64, 32)) * rng.uniform(1e-3, 10, (64, 1))).astype(F)])
    q8, d8 = convert.quantize_q8_0(x)
    q4, d4 = convert.quantize_q4_0(x)
    for i, block in enumerate(x):
        q, d = scalar_q8(block)
        assert list(q8[i * 32:(i + 1) * 32]) == q, f"Q8_0 block {i}"
        assert np.float32(d).tobytes() == d8[i].tobytes(), f"Q8_0 scale {i}"
        q, d = scalar_q4(block)
        assert list(q4[i * 16:(i + 1) * 16]) == q, f"Q4_0 block {i}"
        assert np.float32(d).tobytes() == d4[i].tobytes(), f"Q4_0 scale {i}"


def test_known_values():
    b = np.zeros(32, F)
    b[0], b[1], b[2], b[3] = 127, 2.5, -2.5, 0.49
    q, d = convert.quantize_q8_0(b)
    assert d[0] == 1.0 and list(q[:5]) == [127, 3, -3, 0, 0]
    b = np.zeros(32, F)
    b[0], b[16], b[1] = -8, 8, 1
    q, d = convert.quantize_q4_0(b)
    # max = -8 -> d = 1; -8 -> nibble 0, +8 -> 16.5 clamps to 15, 1 -> 9, 0 -> 8
    assert d[0] == 1.0
    assert q[0] == 0 | (15 << 4) and q[1] == 9 | (8 << 4) and q[2] == 8 | (8 << 4)
    z, dz = convert.quantize_q4_0(np.zeros(32, F))
    assert all(z == 0x88) and dz[0] == 0


@pytest.mark.parametrize("wtype", ["q8_0", "q4_0"])
def test_round_trip_error_bounds(wtype):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((256, 32)) * rng.uniform(1e-2, 5, (256, 1))).astype(F)
    q, d = convert.quantize(x, wtype)
    y = convert.dequantize(q, d, wtype).reshape(x.shape)
    err = np.abs(y - x)
    amax = np.max(np.abs(x), axis=1, keepdims=True)
    if wtype == "q8_0":
        assert np.all(err <= amax / 127 * 0.5000001 + 1e-12)
    else:
        # half a step (amax/8/2) except the clamped element opposite the max: one step
        assert np.all(err <= amax / 8 * 1.0000001)
        assert np.mean(err <= amax / 16 * 1.0000001) > 0.99
        rel = np.linalg.norm(y - x) / np.linalg.norm(x)
        assert 0.03 < rel < 0.12, rel


def inject_special(w):
    """Overwrite the first rows of tok_emb (64 wide = 2 blocks per row) with
    the special blocks, so the file-level test sees them too."""
    sb = special_blocks().reshape(-1)
    emb = w["tok_emb"].copy().reshape(-1)
    emb[: sb.size] = sb
    w["tok_emb"] = emb.reshape(w["tok_emb"].shape)
    return w


CFG = RefConfig(dim=64, hidden_dim=96, n_layers=2, n_heads=4, n_kv_heads=2, vocab=64)


@pytest.mark.parametrize("wtype", ["q8_0", "q4_0"])
@pytest.mark.parametrize("shared", [True, False])
def test_file_bytes_equal_runtime_writer(tmp_path, ref_writer, ml_bin, wtype, shared):
    w = inject_special(random_weights(CFG, seed=11, shared=shared))
    ckpt = tmp_path / "model.bin"
    write_llama2c_legacy(ckpt, CFG, w, seq_len=48)
    out = tmp_path / "conv.mlb"
    assert convert_main(ckpt, "--out", out, "--wtype", wtype, "-q") == 0
    values = np.concatenate([w[n].reshape(-1) for n in file_order(CFG, shared)])
    h = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=96, vocab=64, max_seq=48,
             rope_theta=10000.0, norm_eps=1e-5, shared=shared)
    expected = run_ref_writer(ref_writer, tmp_path / "ref.mlb", values, h, wtype)
    got = out.read_bytes()
    assert len(got) == len(expected)
    if got != expected:
        first = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
        pytest.fail(f"converter and runtime writer differ first at byte {first} of {len(got)}")
    info = ml(ml_bin, "info", out).stdout
    assert "dim:               64" in info and f"wtype:             {wtype}" in info
    assert f"shared_classifier: {'true' if shared else 'false'}" in info
