"""Tokenizers written by --tokenizer-out: the .tok format for GPT-2
byte-level BPE GGUFs (checked with a reader written from FORMAT.md and with
the HF `tokenizers` library), and llama2.c's tokenizer.bin for SentencePiece
GGUFs (checked byte for byte against the in-tree llama2.c tokenizer and with
`ml tokenize`)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import convert
from conftest import TESTDATA, convert_main, ml
from helpers import hf_weights_from, random_weights, write_gguf
from reference import RefConfig
from tokfile import hf_tokenizer, read_tok

CFG = RefConfig(dim=64, hidden_dim=64, n_layers=1, n_heads=2, n_kv_heads=1, vocab=300)


def byte_bpe_vocab():
    """A small GPT-2 style vocabulary: 3 special tokens, the 256 byte
    characters, and merges that build 'hello', 'Ġworld' and '12'."""
    b2u = convert.bytes_to_unicode()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = special + [b2u[b] for b in range(256)]
    merges = ["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "1 2"]
    for m in merges:
        tokens.append(m.replace(" ", ""))
    pad = CFG.vocab - len(tokens)
    tokens += [f"<unused{i}>" for i in range(pad)]
    types = [3, 3, 3] + [1] * (256 + len(merges)) + [5] * pad
    return tokens, types, merges


def test_bytes_to_unicode_is_gpt2s():
    m = convert.bytes_to_unicode()
    assert len(set(m.values())) == 256
    assert m[ord(" ")] == "Ġ" and m[ord("\n")] == "Ċ" and m[ord("A")] == "A" and m[0] == "\u0100"
    assert m[0x7F] == "\u0121" and m[0xAD] == "\u0143" and m[0xFF] == "\u00ff"
    from tokenizers import pre_tokenizers

    assert set(m.values()) == set(pre_tokenizers.ByteLevel.alphabet())
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    text = bytes(range(256)).decode("latin-1")
    mapped = "".join(p for p, _ in bl.pre_tokenize_str(text))
    assert mapped == "".join(m[b] for b in text.encode("utf-8"))


def test_gpt2_gguf_tokenizer_to_tok(tmp_path):
    tokens, types, merges = byte_bpe_vocab()
    tmpl = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    tok = {"model": "gpt2", "pre": "smollm", "tokens": tokens, "types": types, "merges": merges,
           "bos": 1, "eos": 2, "unk": 0, "chat_template": tmpl}
    w = random_weights(CFG, seed=3)
    write_gguf(tmp_path / "m.gguf", CFG, hf_weights_from(w, CFG), ctx=32, tokenizer=tok)
    out = tmp_path / "m.tok"
    assert convert_main(tmp_path / "m.gguf", "--out", tmp_path / "m.mlb", "--tokenizer-out", out, "-q") == 0
    data = out.read_bytes()
    # fixed header fields at their documented offsets
    assert data[:4] == b"MLTK"
    assert struct.unpack_from("<11I", data, 4) == (1, 1, 300, len(merges), 3, 1, 2, 0, 0xFFFFFFFF, 0, 0)
    t = read_tok(data)
    assert t.pre == "smollm" and t.tokens == tokens and t.types == types and t.special == [0, 1, 2]
    assert [f"{a} {b}" for a, b in t.merge_strings()] == merges
    assert t.merges[0] == (tokens.index("h"), tokens.index("e"), tokens.index("he"))
    assert t.chat_template == tmpl
    hf = hf_tokenizer(t)
    ids = hf.encode("<|im_start|>hello world 12<|im_end|>").ids
    assert ids == [1, tokens.index("hello"), tokens.index("Ġworld"), tokens.index("Ġ"),
                   tokens.index("1"), tokens.index("2"), 2]
    assert hf.decode(ids, skip_special_tokens=False) == "<|im_start|>hello world 12<|im_end|>"


def test_tok_limits_are_enforced():
    tokens, types, merges = byte_bpe_vocab()
    with pytest.raises(convert.ConvertError, match="not in the vocabulary"):
        convert.build_tok(tokens, types, merges + ["x yz"], "gpt2")
    with pytest.raises(convert.ConvertError, match="bytes; the .tok format allows"):
        convert.build_tok(tokens[:-1] + ["a" * 5000], types, merges, "gpt2")
    with pytest.raises(convert.ConvertError, match="outside the vocabulary"):
        convert.build_tok(tokens, types, merges, "gpt2", bos=300)


def read_llama2c_tokenizer(data: bytes):
    (max_len,) = struct.unpack_from("<I", data, 0)
    pos, pieces, scores = 4, [], []
    while pos < len(data):
        s, n = struct.unpack_from("<fi", data, pos)
        pieces.append(data[pos + 8:pos + 8 + n])
        scores.append(s)
        pos += 8 + n
    return max_len, pieces, scores


LLAMA2C_TOK = TESTDATA / "llama2c-32000.bin"


def test_sentencepiece_gguf_round_trips_llama2c_tokenizer(tmp_path, ml_bin):
    """llama2.c's tokenizer.bin -> the SentencePiece vocabulary a GGUF holds
    ('\u2581' for spaces, <s>/</s>) -> --tokenizer-out: the original bytes."""
    original = LLAMA2C_TOK.read_bytes()
    _, pieces, scores = read_llama2c_tokenizer(original)
    tokens = [p.decode("utf-8").replace(" ", "\u2581") for p in pieces]
    tokens[1], tokens[2] = "<s>", "</s>"
    types = [2, 3, 3] + [6] * 256 + [1] * (len(tokens) - 259)
    tok = {"model": "llama", "tokens": tokens, "types": types, "scores": scores, "bos": 1, "eos": 2, "unk": 0}
    cfg = RefConfig(dim=64, hidden_dim=64, n_layers=1, n_heads=2, n_kv_heads=1, vocab=len(tokens))
    w = random_weights(cfg, seed=4)
    write_gguf(tmp_path / "m.gguf", cfg, hf_weights_from(w, cfg), ctx=32, tokenizer=tok)
    out = tmp_path / "tokenizer.bin"
    assert convert_main(tmp_path / "m.gguf", "--out", tmp_path / "m.mlb", "--tokenizer-out", out, "-q") == 0
    assert out.read_bytes() == original
    ids = ml(ml_bin, "tokenize", "-z", out, "I believe the meaning of life is").stdout.split()
    assert ids == "1 306 4658 278 6593 310 2834 338".split()


def test_tokenizer_out_refused_for_llama2c(tmp_path, capsys):
    from helpers import write_llama2c_legacy

    cfg = RefConfig(dim=64, hidden_dim=64, n_layers=1, n_heads=2, n_kv_heads=1, vocab=32)
    write_llama2c_legacy(tmp_path / "m.bin", cfg, random_weights(cfg, seed=1), seq_len=8)
    assert convert_main(tmp_path / "m.bin", "--out", tmp_path / "m.mlb", "--tokenizer-out", tmp_path / "t") == 1
    assert "tokenizer.bin as-is" in capsys.readouterr().err
    assert not np.any([p.name == "m.mlb" for p in tmp_path.iterdir()])
