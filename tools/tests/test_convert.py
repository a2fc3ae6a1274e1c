"""llama2.c inputs and the .mlb layout: header fields, 64-byte alignment of
every array, the exact file size, tensor round trips, GQA, tied and untied
classifiers, rejection of K % 32 != 0, legacy vs "ak42" v1, --pad-hidden."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import convert
from conftest import convert_main, ml, ml_logits
from helpers import dequant_mlb, parse_mlb, random_weights, write_llama2c_legacy, write_llama2c_v1
from reference import RefConfig, compare, forward

GQA = RefConfig(dim=64, hidden_dim=128, n_layers=2, n_heads=8, n_kv_heads=2, vocab=96)


def convert_ok(*args) -> None:
    assert convert_main(*args, "-q") == 0


@pytest.mark.parametrize("wtype,code", [("q8_0", 8), ("q4_0", 2)])
@pytest.mark.parametrize("shared", [True, False])
def test_layout_header_and_round_trip(tmp_path, wtype, code, shared):
    w = random_weights(GQA, seed=5, shared=shared)
    ckpt = tmp_path / "m.bin"
    write_llama2c_legacy(ckpt, GQA, w, seq_len=40)
    out = tmp_path / "m.mlb"
    convert_ok(ckpt, "--out", out, "--wtype", wtype)
    data = out.read_bytes()
    p = parse_mlb(data)
    h = p["header"]
    assert (h["version"], h["dim"], h["n_layers"], h["n_heads"], h["n_kv_heads"]) == (1, 64, 2, 8, 2)
    assert (h["hidden_dim"], h["vocab"], h["max_seq"], h["wtype"]) == (128, 96, 40, code)
    assert h["rope_theta"] == 10000.0 and h["norm_eps"] == np.float32(1e-5)
    assert h["shared_classifier"] == (1 if shared else 0)
    assert all(o % 64 == 0 for o in h["offsets"])
    # the file ends exactly at the last array; the layout function agrees
    assert h["end"] == len(data)
    _, total = convert.layout(convert.Config(64, 128, 2, 8, 2, 96, 40, 1e4, 1e-5, shared), wtype)
    assert total == len(data)
    expected_arrays = 2 + GQA.n_layers * (2 + 7 * 2) + 1 + (0 if shared else 2)
    assert len(h["offsets"]) == expected_arrays
    # round trip of every tensor within its quantization error
    for name, x in w.items():
        y = dequant_mlb(p, name).reshape(x.shape)
        if x.ndim == 1:
            assert np.array_equal(y, x), name
            continue
        amax = np.max(np.abs(x.reshape(-1, 32)), axis=1, keepdims=True)
        err = np.abs(y.reshape(-1, 32) - x.reshape(-1, 32))
        bound = amax / 127 / 2 if wtype == "q8_0" else amax / 8
        assert np.all(err <= bound * 1.000001 + 1e-30), name


def test_freq_cis_skipped_and_classifier_read(tmp_path):
    """The legacy freq_cis slots hold a marker value; an unshared classifier
    after them must come through intact."""
    w = random_weights(GQA, seed=6, shared=False)
    ckpt = tmp_path / "m.bin"
    write_llama2c_legacy(ckpt, GQA, w, seq_len=40)
    m = convert.load(ckpt)
    assert set(m.tensors) == set(w)
    for k in w:
        assert np.array_equal(m.tensors[k](), w[k]), k
    assert not np.any(m.tensors["wcls"]() == 1234.5)


@pytest.mark.parametrize("shared", [True, False])
def test_ak42_v1_equals_legacy(tmp_path, shared):
    w = random_weights(GQA, seed=8, shared=shared)
    write_llama2c_legacy(tmp_path / "legacy.bin", GQA, w, seq_len=40)
    write_llama2c_v1(tmp_path / "v1.bin", GQA, w, seq_len=40)
    convert_ok(tmp_path / "legacy.bin", "--out", tmp_path / "a.mlb")
    convert_ok(tmp_path / "v1.bin", "--out", tmp_path / "b.mlb")
    assert (tmp_path / "a.mlb").read_bytes() == (tmp_path / "b.mlb").read_bytes()


def test_rejects_ak42_v2_and_truncated(tmp_path, capsys):
    w = random_weights(GQA, seed=9)
    write_llama2c_v1(tmp_path / "v.bin", GQA, w, seq_len=40)
    data = bytearray((tmp_path / "v.bin").read_bytes())
    data[4:8] = struct.pack("<i", 2)
    (tmp_path / "v2.bin").write_bytes(bytes(data))
    assert convert_main(tmp_path / "v2.bin", "--out", tmp_path / "o.mlb") == 1
    assert "version 2 is not supported" in capsys.readouterr().err
    write_llama2c_legacy(tmp_path / "l.bin", GQA, w, seq_len=40)
    (tmp_path / "t.bin").write_bytes((tmp_path / "l.bin").read_bytes()[:-4])
    assert convert_main(tmp_path / "t.bin", "--out", tmp_path / "o.mlb") == 1
    err = capsys.readouterr().err
    assert "bytes but its header" in err
    assert not (tmp_path / "o.mlb").exists()


def test_rejects_k_not_multiple_of_32(tmp_path, capsys):
    cfg = RefConfig(dim=48, hidden_dim=64, n_layers=1, n_heads=4, n_kv_heads=2, vocab=32)
    write_llama2c_legacy(tmp_path / "d.bin", cfg, random_weights(cfg, seed=1), seq_len=8)
    assert convert_main(tmp_path / "d.bin", "--out", tmp_path / "o.mlb") == 1
    err = capsys.readouterr().err
    assert "tensor tok_emb (32x48): K = 48 columns (dim) is not a multiple of 32" in err

    cfg = RefConfig(dim=64, hidden_dim=100, n_layers=2, n_heads=4, n_kv_heads=2, vocab=32)
    write_llama2c_legacy(tmp_path / "h.bin", cfg, random_weights(cfg, seed=1), seq_len=8)
    assert convert_main(tmp_path / "h.bin", "--out", tmp_path / "o.mlb") == 1
    err = capsys.readouterr().err
    assert "tensor layers.0.w2 (64x100): K = 100 columns (hidden_dim)" in err and "--pad-hidden" in err
    assert not (tmp_path / "o.mlb").exists()
    assert not list(tmp_path.glob(".o.mlb.tmp*")), "no temporary file may be left behind"


def test_pad_hidden_is_exact(tmp_path, ml_bin):
    """hidden 100 padded to 128: the runtime on the padded Q8_0 model tracks
    the f32 reference of the *unpadded* weights as closely as an unpadded
    model would (padding adds no error of its own)."""
    cfg = RefConfig(dim=64, hidden_dim=100, n_layers=2, n_heads=4, n_kv_heads=2, vocab=64)
    w = random_weights(cfg, seed=12)
    write_llama2c_legacy(tmp_path / "h.bin", cfg, w, seq_len=32)
    out = tmp_path / "p.mlb"
    convert_ok(tmp_path / "h.bin", "--out", out, "--pad-hidden")
    p = parse_mlb(out.read_bytes())
    assert p["header"]["hidden_dim"] == 128
    w1 = dequant_mlb(p, "layers.0.w1")
    w2 = dequant_mlb(p, "layers.1.w2")
    assert np.all(w1[100:] == 0) and np.all(w2[:, 100:] == 0)
    run = ml_logits(ml_bin, out, [1, 5, 9], 12)
    ref = forward(w, cfg, run["seq"])[2:]
    r = compare(ref, run["logits"])
    assert r["min_cos"] > 0.999, r["min_cos"]
    assert r["agree"] == 1.0


def test_max_seq_and_ml_info(tmp_path, ml_bin):
    w = random_weights(GQA, seed=13)
    write_llama2c_legacy(tmp_path / "m.bin", GQA, w, seq_len=40)
    out = tmp_path / "m.mlb"
    convert_ok(tmp_path / "m.bin", "--out", out, "--max-seq", "16", "--wtype", "q4_0")
    info = ml(ml_bin, "info", out).stdout
    for line in ("max_seq:           16", "n_kv_heads:        2", "head_dim:          8",
                 "wtype:             q4_0", "hidden_dim:        128"):
        assert line in info
    r = ml(ml_bin, "run", out, "--tokens", "1", "-n", "15", "--temp", "0")
    assert len(r.stdout.split()) == 15
    assert convert_main(tmp_path / "m.bin", "--out", out, "--max-seq", "0") == 1


# Measured on seeds 21-23 (24 steps): Q8_0 min cosine 0.9988, max|d|/max|ref|
# <= 0.056, top-1 agreement 23/24; Q4_0 mean cosine 0.93-0.95 (a random
# network amplifies 4-bit noise far more than a trained one).
@pytest.mark.parametrize("wtype,min_cos,mean_cos,max_rel,agree",
                         [("q8_0", 0.997, 0.999, 0.08, 0.9), ("q4_0", 0.6, 0.9, 1.0, 0.5)])
def test_llama2c_gqa_numerics(tmp_path, ml_bin, wtype, min_cos, mean_cos, max_rel, agree):
    """A GQA llama2.c model (8 query heads sharing 2 KV heads): the runtime on
    the converted file follows the f32 interleaved-RoPE reference."""
    w = random_weights(GQA, seed=21, shared=False)
    write_llama2c_legacy(tmp_path / "m.bin", GQA, w, seq_len=40)
    out = tmp_path / "m.mlb"
    convert_ok(tmp_path / "m.bin", "--out", out, "--wtype", wtype)
    run = ml_logits(ml_bin, out, [3, 17, 42], 24)
    ref = forward(w, GQA, run["seq"])[2:]
    r = compare(ref, run["logits"])
    assert r["min_cos"] >= min_cos and r["cos"].mean() >= mean_cos, r["cos"]
    assert r["max_rel"] <= max_rel and r["agree"] >= agree, (r["max_rel"], r["agree"])
