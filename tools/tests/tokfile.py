"""An independent reader of the .tok format, written from FORMAT.md's
"Tokenizer files" section, and helpers to build a Hugging Face `tokenizers`
byte-level BPE from it."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import List, Tuple

NONE = 0xFFFFFFFF


@dataclass
class TokFile:
    version: int
    kind: int
    bos: int
    eos: int
    unk: int
    pad: int
    flags: int
    pre: str
    tokens: List[str]
    types: List[int]
    merges: List[Tuple[int, int, int]]
    special: List[int]
    chat_template: str

    def merge_strings(self) -> List[Tuple[str, str]]:
        return [(self.tokens[a], self.tokens[b]) for a, b, _ in self.merges]


def read_tok(data: bytes) -> TokFile:
    if len(data) < 48 or data[:4] != b"MLTK":
        raise ValueError("not a .tok file")
    (version, kind, n_vocab, n_merges, n_special, bos, eos, unk, pad, flags, reserved) = struct.unpack_from("<11I", data, 4)
    if version != 1 or kind != 1 or reserved != 0 or flags & ~3:
        raise ValueError("bad header")
    pos = 48

    def take(n: int) -> bytes:
        nonlocal pos
        if pos + n > len(data):
            raise ValueError("truncated")
        b = data[pos:pos + n]
        pos += n
        return b

    def u32() -> int:
        return struct.unpack("<I", take(4))[0]

    pre = take(u32()).decode("ascii")
    tokens = []
    for _ in range(n_vocab):
        n = u32()
        if not 1 <= n <= 4096:
            raise ValueError("token length")
        tokens.append(take(n).decode("utf-8"))
    types = list(take(n_vocab))
    merges = [struct.unpack("<3I", take(12)) for _ in range(n_merges)]
    for a, b, m in merges:
        if tokens[m] != tokens[a] + tokens[b]:
            raise ValueError("merge result mismatch")
    special = [u32() for _ in range(n_special)]
    tmpl = take(u32()).decode("utf-8")
    if pos != len(data):
        raise ValueError("trailing bytes")
    return TokFile(version, kind, bos, eos, unk, pad, flags, pre, tokens, types, merges, special, tmpl)


def hf_tokenizer(tok: TokFile):
    """A `tokenizers` ByteLevel BPE with the .tok's vocab and merges. The
    'smollm' pre-tokenizer is Digits(individual) then ByteLevel's GPT-2 regex."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers import AddedToken

    vocab = {t: i for i, t in enumerate(tok.tokens)}
    bpe = models.BPE(vocab=vocab, merges=tok.merge_strings())
    t = Tokenizer(bpe)
    steps = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    if tok.pre == "smollm":
        steps.insert(0, pre_tokenizers.Digits(individual_digits=True))
    t.pre_tokenizer = pre_tokenizers.Sequence(steps)
    t.decoder = decoders.ByteLevel()
    t.add_special_tokens([AddedToken(tok.tokens[i], special=True, normalized=False) for i in tok.special])
    return t
