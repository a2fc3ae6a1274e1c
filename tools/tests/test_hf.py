"""Hugging Face safetensors inputs: a tiny random Llama written here (config
+ safetensors, q/k in HF's rotate-half order), checked against a numpy
rotate-half reference forward on the HF weights themselves."""

from __future__ import annotations

import json

import numpy as np
import pytest

import convert
from conftest import convert_main, ml_logits
from helpers import (bf16_bits_to_f32, hf_as_runtime_names, hf_weights_from, parse_mlb, random_weights,
                     to_bf16_bits, write_bf16_safetensors, write_hf_dir)
from reference import RefConfig, compare, forward

# GQA with 4 query heads per KV head, head_dim 16, a non-default theta and eps.
CFG = RefConfig(dim=128, hidden_dim=256, n_layers=2, n_heads=8, n_kv_heads=2, vocab=96,
                rope_theta=50000.0, norm_eps=1e-6)
PROMPT = [5, 17, 60, 2]
STEPS = 24


def make_hf(tmp_path, tie: bool, seed: int = 31, **kw):
    w = random_weights(CFG, seed=seed, shared=tie)
    hf = hf_weights_from(w, CFG)
    d = tmp_path / ("hf_tied" if tie else "hf")
    write_hf_dir(d, CFG, hf, max_pos=64, tie=tie, **kw)
    return d, hf


def runtime_vs_reference(ml_bin, mlb, hf):
    run = ml_logits(ml_bin, mlb, PROMPT, STEPS)
    ref = forward(hf_as_runtime_names(hf, CFG), CFG, run["seq"], rope="rotate_half")[len(PROMPT) - 1:]
    return compare(ref, run["logits"])


# Measured over seeds 31, 32, 34 (24 steps each): Q8_0 min cosine 0.9988-0.9995,
# max|d|/max|ref| 0.016-0.059 (median 0.009-0.029), all 24 greedy tokens
# equal. Q4_0 (tied): mean cosine 0.974-0.978, all greedy tokens equal. The
# two wrong permutations below give min cosines far under 0.99.
@pytest.mark.parametrize("tie", [False, True])
def test_hf_q8_matches_rotate_half_reference(tmp_path, ml_bin, tie):
    d, hf = make_hf(tmp_path, tie)
    out = tmp_path / "m.mlb"
    assert convert_main(d, "--out", out, "--wtype", "q8_0", "-q") == 0
    h = parse_mlb(out.read_bytes())["header"]
    assert (h["n_heads"], h["n_kv_heads"], h["max_seq"]) == (8, 2, 64)
    assert h["rope_theta"] == 50000.0 and h["norm_eps"] == np.float32(1e-6)
    assert h["shared_classifier"] == int(tie)
    r = runtime_vs_reference(ml_bin, out, hf)
    assert r["min_cos"] >= 0.998, r["cos"]
    assert np.median(r["rel"]) < 3.5e-2 and r["max_rel"] < 8e-2, r["rel"]
    assert r["agree"] >= 0.9, r["top1"]


def test_hf_q4_follows_reference(tmp_path, ml_bin):
    d, hf = make_hf(tmp_path, tie=True)
    out = tmp_path / "m.mlb"
    assert convert_main(d, "--out", out, "--wtype", "q4_0", "-q") == 0
    r = runtime_vs_reference(ml_bin, out, hf)
    assert r["cos"].mean() >= 0.95 and r["agree"] >= 0.8, (r["cos"], r["agree"])


@pytest.mark.parametrize("bug", ["llama2c_gqa", "no_permutation"])
def test_wrong_permutations_are_caught(tmp_path, ml_bin, bug):
    """The same check fails for llama2.c's GQA mistake (wk permuted with
    n_heads) and for no permutation at all: the test has teeth."""
    d, hf = make_hf(tmp_path, tie=False)
    m = convert.load(d)
    for l in range(CFG.n_layers):
        k = hf[f"model.layers.{l}.self_attn.k_proj.weight"]
        q = hf[f"model.layers.{l}.self_attn.q_proj.weight"]
        if bug == "llama2c_gqa":
            rows = k.shape[0]
            # export.py: permute_reverse(wk, n_heads, dim1=kv_dim): heads of rows/n_heads
            m.tensors[f"layers.{l}.wk"] = lambda k=k, rows=rows: (
                k.reshape(CFG.n_heads, 2, rows // CFG.n_heads // 2, CFG.dim).transpose(0, 2, 1, 3).reshape(rows, CFG.dim))
        else:
            m.tensors[f"layers.{l}.wq"] = lambda q=q: q
            m.tensors[f"layers.{l}.wk"] = lambda k=k: k
    out = tmp_path / "bad.mlb"
    convert.write_mlb(m, out, "q8_0", quiet=True)
    r = runtime_vs_reference(ml_bin, out, hf)
    print(bug, r["min_cos"], r["cos"].mean(), r["agree"])
    assert r["min_cos"] < 0.99 and r["cos"].mean() < 0.99, r["cos"]


def test_sharded_f16_and_bf16_read_exactly(tmp_path):
    """F16 shards and hand-written BF16 safetensors convert to exactly the
    bytes of an F32 directory holding the same (rounded) values."""
    w = random_weights(CFG, seed=33, shared=False)
    hf = hf_weights_from(w, CFG)
    f16 = {k: v.astype(np.float16).astype(np.float32) for k, v in hf.items()}
    write_hf_dir(tmp_path / "f16", CFG, hf, max_pos=64, tie=False, dtype="float16", shards=3)
    write_hf_dir(tmp_path / "f16ref", CFG, f16, max_pos=64, tie=False)
    bf = {k: bf16_bits_to_f32(to_bf16_bits(v)) for k, v in hf.items()}
    write_hf_dir(tmp_path / "bfref", CFG, bf, max_pos=64, tie=False)
    (tmp_path / "bf16").mkdir()
    (tmp_path / "bf16" / "config.json").write_text((tmp_path / "bfref" / "config.json").read_text())
    names = sorted(hf)
    write_bf16_safetensors(tmp_path / "bf16" / "a.safetensors", {n: hf[n] for n in names[:7]})
    write_bf16_safetensors(tmp_path / "bf16" / "b.safetensors", {n: hf[n] for n in names[7:]})
    for a, b in (("f16", "f16ref"), ("bf16", "bfref")):
        assert convert_main(tmp_path / a, "--out", tmp_path / f"{a}.mlb", "-q") == 0
        assert convert_main(tmp_path / b, "--out", tmp_path / f"{b}.mlb", "-q") == 0
        assert (tmp_path / f"{a}.mlb").read_bytes() == (tmp_path / f"{b}.mlb").read_bytes(), a


def test_permutation_is_the_inverse_of_hf(tmp_path):
    """Row 2i of each head comes from row i, row 2i+1 from row i + hd/2."""
    hd, heads = 16, 2
    w = np.arange(heads * hd * 32, dtype=np.float32).reshape(heads * hd, 32)
    p = convert.permute_rotate_half_to_interleaved(w, heads)
    for h in range(heads):
        for i in range(hd // 2):
            assert np.array_equal(p[h * hd + 2 * i], w[h * hd + i])
            assert np.array_equal(p[h * hd + 2 * i + 1], w[h * hd + hd // 2 + i])


def test_missing_lm_head_untied_falls_back_to_shared(tmp_path, capsys):
    d, hf = make_hf(tmp_path, tie=True)
    cfg = json.loads((d / "config.json").read_text())
    cfg["tie_word_embeddings"] = False
    (d / "config.json").write_text(json.dumps(cfg))
    assert convert_main(d, "--out", tmp_path / "m.mlb") == 0
    assert "lm_head.weight is absent" in capsys.readouterr().err
    assert parse_mlb((tmp_path / "m.mlb").read_bytes())["header"]["shared_classifier"] == 1


def test_rejects_unsupported_configs(tmp_path, capsys):
    d, _ = make_hf(tmp_path, tie=True)
    cfg = json.loads((d / "config.json").read_text())
    for key, value, msg in (("rope_scaling", {"type": "linear", "factor": 2.0}, "rope_scaling"),
                            ("hidden_act", "gelu", "hidden_act"), ("head_dim", 32, "head_dim")):
        bad = dict(cfg, **{key: value})
        (d / "config.json").write_text(json.dumps(bad))
        assert convert_main(d, "--out", tmp_path / "m.mlb") == 1
        assert msg in capsys.readouterr().err
