"""GGUF 'llama' inputs, written here with gguf.GGUFWriter from HF-layout
weights permuted the way llama.cpp's convert_hf_to_gguf.py does, so they
must convert to what the HF path gives: q/k are already interleaved."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

import convert
from conftest import convert_main, ml_logits
from helpers import (hf_weights_from, interleaved_to_rotate_half, parse_mlb, random_weights, write_gguf,
                     write_hf_dir)
from reference import RefConfig, compare, forward

CFG = RefConfig(dim=128, hidden_dim=256, n_layers=2, n_heads=8, n_kv_heads=2, vocab=96,
                rope_theta=50000.0, norm_eps=1e-6)
Q = gguf.GGMLQuantizationType


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("wtype", ["q8_0", "q4_0"])
def test_f32_gguf_equals_hf_path(tmp_path, tie, wtype):
    """Same weights through HF safetensors (converter permutes) and through a
    llama.cpp-style GGUF (already permuted, converter leaves q/k alone):
    byte-identical .mlb files. A GGUF without output.weight is tied."""
    w = random_weights(CFG, seed=41, shared=tie)
    hf = hf_weights_from(w, CFG)
    write_hf_dir(tmp_path / "hf", CFG, hf, max_pos=64, tie=tie)
    write_gguf(tmp_path / "m.gguf", CFG, hf, ctx=64)
    assert convert_main(tmp_path / "hf", "--out", tmp_path / "hf.mlb", "--wtype", wtype, "-q") == 0
    assert convert_main(tmp_path / "m.gguf", "--out", tmp_path / "gguf.mlb", "--wtype", wtype, "-q") == 0
    a, b = (tmp_path / "hf.mlb").read_bytes(), (tmp_path / "gguf.mlb").read_bytes()
    assert parse_mlb(b)["header"]["shared_classifier"] == int(tie)
    assert a == b


def test_gguf_metadata_and_max_seq(tmp_path):
    w = random_weights(CFG, seed=42)
    write_gguf(tmp_path / "m.gguf", CFG, hf_weights_from(w, CFG), ctx=8192)
    m = convert.load(tmp_path / "m.gguf")
    c = m.config
    assert (c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab) == (128, 256, 2, 8, 2, 96)
    assert c.max_seq == 8192 and c.rope_theta == 50000.0 and c.norm_eps == pytest.approx(1e-6)
    assert convert_main(tmp_path / "m.gguf", "--out", tmp_path / "m.mlb", "--max-seq", "100", "-q") == 0
    h = parse_mlb((tmp_path / "m.mlb").read_bytes())["header"]
    assert h["max_seq"] == 100 and h["rope_theta"] == 50000.0


def test_ggml_shape_order(tmp_path):
    """ggml lists ne fastest-first: w2 (dim x hidden) is stored with
    ne = [hidden, dim]; the converter must hand back dim rows of hidden."""
    w = random_weights(CFG, seed=43)
    write_gguf(tmp_path / "m.gguf", CFG, hf_weights_from(w, CFG), ctx=64)
    r = gguf.GGUFReader(str(tmp_path / "m.gguf"))
    t = {x.name: x for x in r.tensors}
    assert list(t["blk.0.ffn_down.weight"].shape) == [256, 128]
    m = convert.load(tmp_path / "m.gguf")
    assert np.array_equal(m.tensors["layers.0.w2"](), w["layers.0.w2"])
    assert np.array_equal(m.tensors["layers.1.wk"](), w["layers.1.wk"])  # interleaved as given
    assert np.array_equal(m.tensors["tok_emb"](), w["tok_emb"])


# Q8_0 GGUF: runtime vs rotate-half reference on the GGUF's own dequantized
# values, min cosine >= 0.998 (measured 0.9991); Q4_1 (SmolLM2's type) is
# dequantized exactly, so requantizing to Q8_0 costs little more.
@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_1, Q.F16])
def test_quantized_gguf_dequantized_and_follows_reference(tmp_path, ml_bin, qtype):
    w = random_weights(CFG, seed=44)
    hf = hf_weights_from(w, CFG)
    write_gguf(tmp_path / "m.gguf", CFG, hf, ctx=64, qtype=qtype)
    # the values the GGUF really holds, back in HF layout for the reference
    m = convert.load(tmp_path / "m.gguf")
    held = {k: f() for k, f in m.tensors.items()}
    ref_w = dict(held)
    for l in range(CFG.n_layers):
        for k, heads in (("wq", CFG.n_heads), ("wk", CFG.n_kv_heads)):
            ref_w[f"layers.{l}.{k}"] = interleaved_to_rotate_half(held[f"layers.{l}.{k}"], heads)
    # dequantization really happened and is close to the source
    assert np.max(np.abs(held["layers.0.w1"] - w["layers.0.w1"])) < 0.2
    assert convert_main(tmp_path / "m.gguf", "--out", tmp_path / "m.mlb", "-q") == 0
    prompt = [5, 17, 60, 2]
    run = ml_logits(ml_bin, tmp_path / "m.mlb", prompt, 16)
    ref = forward(ref_w, CFG, run["seq"], rope="rotate_half")[len(prompt) - 1:]
    r = compare(ref, run["logits"])
    assert r["min_cos"] >= 0.998 and r["agree"] >= 0.9, (r["cos"], r["agree"])


def test_rejects_other_architectures(tmp_path, capsys):
    wr = gguf.GGUFWriter(str(tmp_path / "x.gguf"), "gpt2")
    wr.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    assert convert_main(tmp_path / "x.gguf", "--out", tmp_path / "x.mlb") == 1
    assert "only 'llama' GGUF models are supported" in capsys.readouterr().err
