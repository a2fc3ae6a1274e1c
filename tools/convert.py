#!/usr/bin/env python3
"""Convert a Llama-style model into legacy-ml's .mlb format (FORMAT.md).

Inputs (detected from the path, or forced with --input-format):

* llama2.c float32 checkpoints: the legacy layout (7 x int32 header, a
  negative vocab meaning an unshared classifier, freq_cis slots skipped) and
  the versioned "ak42" layout, version 1 (fp32, 256-byte header);
* a Hugging Face Llama directory: config.json + *.safetensors;
* a GGUF file whose general.architecture is "llama" (any tensor type the
  `gguf` package can dequantize).

Weights are quantized to Q8_0 or Q4_0 with exactly the runtime's rules
(runtime/src/core/quant.rs), so the bytes equal what runtime's own writer
produces for the same f32 values. --tokenizer-out writes the tokenizer of a
GGUF model: a .tok file (FORMAT.md, "Tokenizer files") for GPT-2 byte-level
BPE vocabularies, or a llama2.c tokenizer.bin for SentencePiece ones.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

QK = 32
ALIGN = 64
HEADER_BYTES = 256
MLB_MAGIC = b"MLB1"
MLB_VERSION = 1
WTYPES = {"q8_0": 8, "q4_0": 2}

AK42_MAGIC = 0x616B3432
TOK_MAGIC = b"MLTK"
TOK_VERSION = 1
TOK_KIND_BYTE_BPE = 1
TOK_NONE = 0xFFFFFFFF
# Limits of the .tok format (FORMAT.md, "Tokenizer files").
TOK_MAX_VOCAB = 1 << 20
TOK_MAX_MERGES = 1 << 22
TOK_MAX_TOKEN_BYTES = 4096
TOK_MAX_PRE_BYTES = 64
TOK_MAX_TEMPLATE_BYTES = 1 << 20

# llama.cpp's token types (tokenizer.ggml.token_type).
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED, TT_UNUSED, TT_BYTE = 1, 2, 3, 4, 5, 6


class ConvertError(Exception):
    """A model that cannot be converted; the message names the reason."""


def log(msg: str) -> None:
    print(f"convert: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Model description

@dataclass
class Config:
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab: int
    max_seq: int
    rope_theta: float
    norm_eps: float
    shared_classifier: bool

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.head_dim * self.n_kv_heads


@dataclass
class Model:
    """A model ready to write: its config and a loader per runtime tensor.

    Loaders return float32 arrays already in the runtime's layout (rows x cols,
    one row per output; wq/wk rows in interleaved-RoPE order)."""

    config: Config
    tensors: Dict[str, Callable[[], np.ndarray]]
    source: str = ""
    tokenizer_writer: Optional[Callable[[Path], str]] = None
    notes: List[str] = field(default_factory=list)


def tensor_plan(c: Config) -> List[Tuple[str, Tuple[int, ...], bool]]:
    """(name, shape, quantized) of every tensor in file order (FORMAT.md)."""
    plan: List[Tuple[str, Tuple[int, ...], bool]] = [("tok_emb", (c.vocab, c.dim), True)]
    for l in range(c.n_layers):
        p = f"layers.{l}."
        plan += [
            (p + "attn_norm", (c.dim,), False),
            (p + "wq", (c.dim, c.dim), True),
            (p + "wk", (c.kv_dim, c.dim), True),
            (p + "wv", (c.kv_dim, c.dim), True),
            (p + "wo", (c.dim, c.dim), True),
            (p + "ffn_norm", (c.dim,), False),
            (p + "w1", (c.hidden_dim, c.dim), True),
            (p + "w2", (c.dim, c.hidden_dim), True),
            (p + "w3", (c.hidden_dim, c.dim), True),
        ]
    plan.append(("final_norm", (c.dim,), False))
    if not c.shared_classifier:
        plan.append(("wcls", (c.vocab, c.dim), True))
    return plan


def round_up(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def layout(c: Config, wtype: str) -> Tuple[List[dict], int]:
    """Offsets of every array, exactly as FORMAT.md's pseudocode computes them."""
    off = HEADER_BYTES
    entries = []
    for name, shape, quant in tensor_plan(c):
        n = int(np.prod(shape))
        e = {"name": name, "shape": shape, "quant": quant}
        if quant:
            qb = n if wtype == "q8_0" else n // 2
            off = round_up(off)
            e["q_offset"], e["q_bytes"] = off, qb
            off += qb
            off = round_up(off)
            e["d_offset"], e["d_bytes"] = off, n // QK * 4
            off += n // QK * 4
        else:
            off = round_up(off)
            e["q_offset"], e["q_bytes"] = off, n * 4
            off += n * 4
        entries.append(e)
    return entries, off


def validate_config(c: Config) -> None:
    """The header rules of FORMAT.md plus K % 32 for every matrix, with the
    tensor named, before a single weight is read."""
    for k in ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab", "max_seq"):
        v = getattr(c, k)
        if not isinstance(v, int) or v <= 0 or v >= 1 << 32:
            raise ConvertError(f"{k} is {v}: it must be a positive 32-bit integer")
    if c.dim % c.n_heads:
        raise ConvertError(f"dim {c.dim} is not a multiple of n_heads {c.n_heads}")
    if c.n_heads % c.n_kv_heads:
        raise ConvertError(f"n_heads {c.n_heads} is not a multiple of n_kv_heads {c.n_kv_heads}")
    if c.head_dim % 2:
        raise ConvertError(f"head_dim {c.head_dim} is odd: RoPE rotates pairs")
    if not (np.isfinite(c.rope_theta) and c.rope_theta > 0):
        raise ConvertError(f"rope_theta {c.rope_theta} must be finite and > 0")
    if not (np.isfinite(c.norm_eps) and c.norm_eps >= 0):
        raise ConvertError(f"norm_eps {c.norm_eps} must be finite and >= 0")
    for name, shape, quant in tensor_plan(c):
        if quant and shape[1] % QK:
            what = "hidden_dim" if name.endswith(".w2") else "dim"
            hint = " (convert with --pad-hidden to zero-pad the FFN width exactly)" if what == "hidden_dim" else ""
            raise ConvertError(
                f"tensor {name} ({shape[0]}x{shape[1]}): K = {shape[1]} columns ({what}) "
                f"is not a multiple of {QK}, so its rows cannot be split into Q8_0/Q4_0 blocks{hint}"
            )


# ---------------------------------------------------------------------------
# Quantization: bit-identical to runtime/src/core/quant.rs (all f32 arithmetic)

def quantize_q8_0(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Q8_0 blocks of 32: amax = max|x|, d = amax/127, id = 127/amax (0 when
    amax is 0), q = trunc(x*id + copysign(0.5, x)) clamped to [-127, 127].
    Returns (int8 quants, f32 scales) in row-major block order."""
    b = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, QK)
    amax = np.max(np.abs(b), axis=1)
    d = amax / np.float32(127.0)
    idv = np.zeros_like(amax)
    with np.errstate(over="ignore", invalid="ignore"):
        np.divide(np.float32(127.0), amax, out=idv, where=amax != 0)
        r = np.trunc(b * idv[:, None] + np.copysign(np.float32(0.5), b))
    r = np.where(np.isnan(r), np.float32(0), r)  # Rust: NaN as i8 == 0
    q = np.clip(r, -127, 127).astype(np.int8)
    return q.reshape(-1), d.astype(np.float32)


def quantize_q4_0(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Q4_0 blocks of 32 (ggml's rule): max = the first element of largest
    magnitude with its sign (0.0 when all are zero), d = max / -8,
    id = 1/d (0 when d is 0), nibble = min(15, trunc(x*id + 8.5)); byte i
    holds element i (low nibble) and element i+16 (high nibble)."""
    b = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, QK)
    a = np.abs(b)
    idx = np.argmax(a, axis=1)
    mx = b[np.arange(b.shape[0]), idx]
    # Rust starts from +0.0 and only replaces it on a strictly larger |v|:
    # a block of (negative) zeros keeps +0.0, so d is -0.0 bit for bit.
    mx = np.where(a[np.arange(b.shape[0]), idx] > 0, mx, np.float32(0.0)).astype(np.float32)
    d = mx / np.float32(-8.0)
    idv = np.zeros_like(d)
    with np.errstate(over="ignore", invalid="ignore"):
        np.divide(np.float32(1.0), d, out=idv, where=d != 0)
        r = np.trunc(b * idv[:, None] + np.float32(8.5))
    r = np.where(np.isnan(r), np.float32(0), r)
    nib = np.clip(r, 0, 15).astype(np.uint8)
    packed = nib[:, : QK // 2] | (nib[:, QK // 2 :] << 4)
    return packed.reshape(-1), d.astype(np.float32)


def dequantize_q8_0(q: np.ndarray, d: np.ndarray) -> np.ndarray:
    return (q.reshape(-1, QK).astype(np.float32) * d[:, None]).reshape(-1)


def dequantize_q4_0(q: np.ndarray, d: np.ndarray) -> np.ndarray:
    p = q.reshape(-1, QK // 2)
    lo = (p & 0x0F).astype(np.int32) - 8
    hi = (p >> 4).astype(np.int32) - 8
    v = np.concatenate([lo, hi], axis=1).astype(np.float32)
    return (v * d[:, None]).reshape(-1)


def quantize(x: np.ndarray, wtype: str) -> Tuple[np.ndarray, np.ndarray]:
    return quantize_q8_0(x) if wtype == "q8_0" else quantize_q4_0(x)


def dequantize(q: np.ndarray, d: np.ndarray, wtype: str) -> np.ndarray:
    return dequantize_q8_0(q, d) if wtype == "q8_0" else dequantize_q4_0(q, d)


# ---------------------------------------------------------------------------
# Layout transforms

def permute_rotate_half_to_interleaved(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Reorders the output rows of a HF q_proj/k_proj so that the runtime's
    interleaved RoPE (pairs 2i, 2i+1) computes what HF's rotate-half RoPE
    (pairs i, i + head_dim/2) computes: within each head, new row 2i = old row
    i and new row 2i+1 = old row i + head_dim/2. Both pairs use the frequency
    theta^(-2i/head_dim), and q and k are reordered alike, so every q.k dot
    product is unchanged. `n_heads` is the number of heads *this* matrix
    has: n_heads for wq, n_kv_heads for wk (llama2.c's export uses n_heads
    for wk too, which scrambles GQA models)."""
    rows, cols = w.shape
    if rows % n_heads or (rows // n_heads) % 2:
        raise ConvertError(f"cannot split {rows} rows into {n_heads} heads of even size")
    hd = rows // n_heads
    return np.ascontiguousarray(
        w.reshape(n_heads, 2, hd // 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)
    )


def pad_hidden(model: Model, multiple: int = QK) -> None:
    """Zero-pads the FFN width to a multiple of 32: extra zero rows of w1/w3
    and zero columns of w2. Exact: the padded units compute silu(0)*0 = 0,
    and w2's extra columns multiply zeros."""
    c = model.config
    new = round_up(c.hidden_dim, multiple)
    if new == c.hidden_dim:
        return
    old = c.hidden_dim
    model.notes.append(f"hidden_dim {old} padded with zeros to {new} (--pad-hidden; exact)")
    for l in range(c.n_layers):
        for w in ("w1", "w3"):
            name = f"layers.{l}.{w}"
            f = model.tensors[name]
            model.tensors[name] = (lambda f=f: np.concatenate(
                [f(), np.zeros((new - old, c.dim), np.float32)], axis=0))
        name = f"layers.{l}.w2"
        f = model.tensors[name]
        model.tensors[name] = (lambda f=f: np.concatenate(
            [f(), np.zeros((c.dim, new - old), np.float32)], axis=1))
    c.hidden_dim = new


# ---------------------------------------------------------------------------
# Writing .mlb

def header_bytes(c: Config, wtype: str) -> bytes:
    h = struct.pack(
        "<4s8I2f2I",
        MLB_MAGIC, MLB_VERSION, c.dim, c.n_layers, c.n_heads, c.n_kv_heads,
        c.hidden_dim, c.vocab, c.max_seq, c.rope_theta, c.norm_eps,
        WTYPES[wtype], int(c.shared_classifier),
    )
    return h + b"\0" * (HEADER_BYTES - len(h))


def _file_kind(mode: int) -> str:
    for test, name in [(stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")]:
        if test(mode):
            return name
    return "a special file"


def refuse_special_target(path: Path) -> None:
    """A target that exists and is not a regular file is never replaced (as
    `ml gen` does): renaming over a device node, a FIFO or a socket would
    destroy it, and over a symbolic link would replace the link, not the
    file (links are not followed)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise ConvertError(f"{path} is {_file_kind(mode)}, not a regular file: refusing to replace it")


def atomic_write(path: Path, write: Callable[[object], None]) -> None:
    """Writes to a temporary file beside `path`, syncs, then renames it into
    place: a failed conversion never leaves a half-written file there. A
    target that exists and is not a regular file is refused first."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    refuse_special_target(path)
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        refuse_special_target(path)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        raise


def write_mlb(model: Model, out: Path, wtype: str, quiet: bool = False) -> int:
    """Quantizes and writes every tensor in file order; returns the file size."""
    if wtype not in WTYPES:
        raise ConvertError(f"unknown wtype {wtype!r}: use q8_0 or q4_0")
    c = model.config
    validate_config(c)
    entries, total = layout(c, wtype)
    missing = [e["name"] for e in entries if e["name"] not in model.tensors]
    if missing:
        raise ConvertError(f"the input lacks tensors {missing[:4]}")

    def emit(f) -> None:
        pos = 0

        def put(offset: int, data: bytes) -> None:
            nonlocal pos
            assert offset >= pos and offset - pos < ALIGN
            f.write(b"\0" * (offset - pos))
            f.write(data)
            pos = offset + len(data)

        put(0, header_bytes(c, wtype))
        t0 = time.time()
        for i, e in enumerate(entries):
            name, shape = e["name"], e["shape"]
            x = np.asarray(model.tensors[name](), dtype=np.float32)
            if x.shape != shape:
                raise ConvertError(f"tensor {name} has shape {x.shape}, expected {shape}")
            if not np.all(np.isfinite(x)):
                bad = int(np.flatnonzero(~np.isfinite(x.reshape(-1)))[0])
                raise ConvertError(f"tensor {name} element #{bad} is {x.reshape(-1)[bad]}, not finite")
            if e["quant"]:
                q, d = quantize(x, wtype)
                put(e["q_offset"], q.tobytes())
                put(e["d_offset"], d.astype("<f4").tobytes())
                err = np.max(np.abs(dequantize(q, d, wtype) - x.reshape(-1)))
                scale = float(np.max(np.abs(x))) or 1.0
                detail = f"{wtype}  max|err|/max|w| {err / scale:.2e}"
            else:
                put(e["q_offset"], x.astype("<f4").tobytes())
                detail = "f32"
            if not quiet:
                dims = "x".join(str(s) for s in shape)
                log(f"[{i + 1:>4}/{len(entries)}] {name:<20} {dims:>12}  {detail}")
        assert pos == total, (pos, total)
        if not quiet:
            log(f"{len(entries)} tensors in {time.time() - t0:.1f}s")

    atomic_write(out, emit)
    return total


# ---------------------------------------------------------------------------
# llama2.c checkpoints

LAYER_TENSORS = ("attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3")


def load_llama2c(path: Path) -> Model:
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(HEADER_BYTES)
    if len(head) < 28:
        raise ConvertError(f"{path}: {size} bytes is too short for a llama2.c checkpoint")
    magic = struct.unpack_from("<I", head, 0)[0]
    if magic == AK42_MAGIC:
        (version,) = struct.unpack_from("<i", head, 4)
        if version != 1:
            raise ConvertError(
                f"{path}: llama2.c 'ak42' version {version} is not supported: only version 1 "
                "(float32) is; version 2 holds int8 weights with 64-element groups, so re-export "
                "the float model with llama2.c's export.py --version 1 (or 0)"
            )
        dim, hidden, n_layers, n_heads, n_kv, vocab, seq = struct.unpack_from("<7i", head, 8)
        shared = bool(head[36])
        offset = HEADER_BYTES
        kind = "llama2.c ak42 v1"
    else:
        dim, hidden, n_layers, n_heads, n_kv, vocab, seq = struct.unpack_from("<7i", head, 0)
        shared = vocab > 0
        vocab = abs(vocab)
        offset = 28
        kind = "llama2.c legacy"
    for k, v in (("dim", dim), ("hidden_dim", hidden), ("n_layers", n_layers), ("n_heads", n_heads),
                 ("n_kv_heads", n_kv), ("vocab", vocab), ("seq_len", seq)):
        if v <= 0 or v > 1 << 24:
            raise ConvertError(f"{path}: {kind} header field {k} = {v} is not plausible; not a llama2.c checkpoint?")
    if dim % n_heads or n_heads % n_kv:
        raise ConvertError(f"{path}: dim {dim}, n_heads {n_heads}, n_kv_heads {n_kv} do not fit together")
    hd = dim // n_heads
    kv_dim = hd * n_kv
    L = n_layers
    # (name, per-layer shape or None for global, count)
    if kind.endswith("legacy"):
        order = [
            ("tok_emb", (vocab, dim), 1),
            ("attn_norm", (dim,), L), ("wq", (dim, dim), L), ("wk", (kv_dim, dim), L),
            ("wv", (kv_dim, dim), L), ("wo", (dim, dim), L), ("ffn_norm", (dim,), L),
            ("w1", (hidden, dim), L), ("w2", (dim, hidden), L), ("w3", (hidden, dim), L),
            ("final_norm", (dim,), 1),
            ("freq_cis_real", (seq * hd // 2,), 1), ("freq_cis_imag", (seq * hd // 2,), 1),
        ]
    else:
        order = [
            ("attn_norm", (dim,), L), ("ffn_norm", (dim,), L), ("final_norm", (dim,), 1),
            ("tok_emb", (vocab, dim), 1),
            ("wq", (dim, dim), L), ("wk", (kv_dim, dim), L), ("wv", (kv_dim, dim), L),
            ("wo", (dim, dim), L), ("w1", (hidden, dim), L), ("w2", (dim, hidden), L),
            ("w3", (hidden, dim), L),
        ]
    if not shared:
        order.append(("wcls", (vocab, dim), 1))
    expected = offset + 4 * sum(int(np.prod(s)) * n for _, s, n in order)
    if size != expected:
        raise ConvertError(
            f"{path}: {kind} checkpoint is {size} bytes but its header (dim {dim}, hidden {hidden}, "
            f"layers {L}, heads {n_heads}/{n_kv}, vocab {vocab}, seq {seq}, "
            f"{'shared' if shared else 'unshared'} classifier) implies {expected}"
        )
    mm = np.memmap(path, dtype="<f4", mode="r")
    tensors: Dict[str, Callable[[], np.ndarray]] = {}
    pos = offset // 4
    for name, shape, count in order:
        n = int(np.prod(shape))
        for l in range(count):
            key = f"layers.{l}.{name}" if name in LAYER_TENSORS else name
            start = pos
            tensors[key] = (lambda s=start, n=n, shape=shape: np.array(mm[s:s + n], dtype=np.float32).reshape(shape))
            pos += n
    tensors.pop("freq_cis_real", None)
    tensors.pop("freq_cis_imag", None)
    cfg = Config(dim=dim, hidden_dim=hidden, n_layers=L, n_heads=n_heads, n_kv_heads=n_kv,
                 vocab=vocab, max_seq=seq, rope_theta=10000.0, norm_eps=1e-5,
                 shared_classifier=shared)
    return Model(cfg, tensors, source=kind)


# ---------------------------------------------------------------------------
# Hugging Face Llama (config.json + safetensors)

def _safetensors_index(files: List[Path]) -> Dict[str, Tuple[Path, dict, int]]:
    """name -> (file, header entry, data start) for every tensor."""
    index = {}
    for p in files:
        with open(p, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > 100 << 20:
                raise ConvertError(f"{p}: safetensors header of {n} bytes is not plausible")
            header = json.loads(f.read(n))
        for name, e in header.items():
            if name == "__metadata__":
                continue
            index[name] = (p, e, 8 + n)
    return index


def _read_safetensor(path: Path, entry: dict, start: int, name: str) -> np.ndarray:
    dtype = entry["dtype"]
    shape = tuple(entry["shape"])
    if dtype == "BF16":
        # numpy has no bfloat16, so safetensors' numpy API cannot return it:
        # read the raw little-endian halves and widen them (exactly).
        b, e = entry["data_offsets"]
        raw = np.fromfile(path, dtype="<u2", count=(e - b) // 2, offset=start + b)
        return (raw.astype(np.uint32) << 16).view(np.float32).reshape(shape)
    if dtype not in ("F32", "F16", "F64"):
        raise ConvertError(f"tensor {name}: safetensors dtype {dtype} is not supported (F32, F16, BF16, F64)")
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        return np.asarray(f.get_tensor(name), dtype=np.float32)


def load_hf(path: Path) -> Model:
    d = path if path.is_dir() else path.parent
    cfg_path = d / "config.json"
    if not cfg_path.exists():
        raise ConvertError(f"{d}: no config.json; a Hugging Face model directory needs one")
    cfg = json.loads(cfg_path.read_text())
    arch = cfg.get("architectures") or []
    mt = cfg.get("model_type", "llama")
    if mt not in ("llama", "mistral") and "LlamaForCausalLM" not in arch:
        raise ConvertError(f"{cfg_path}: model_type {mt!r} is not a Llama model")
    if cfg.get("rope_scaling") not in (None, {}):
        raise ConvertError(f"{cfg_path}: rope_scaling {cfg['rope_scaling']} is not supported by the runtime")
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise ConvertError(f"{cfg_path}: attention/MLP biases are not supported by the runtime")
    act = cfg.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise ConvertError(f"{cfg_path}: hidden_act {act!r} is not supported (SwiGLU with silu only)")
    dim = int(cfg["hidden_size"])
    n_heads = int(cfg["num_attention_heads"])
    n_kv = int(cfg.get("num_key_value_heads") or n_heads)
    if cfg.get("head_dim") not in (None, dim // n_heads):
        raise ConvertError(f"{cfg_path}: head_dim {cfg['head_dim']} differs from hidden_size/num_attention_heads")
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise ConvertError(f"{d}: no *.safetensors files")
    index = _safetensors_index(files)
    tied = bool(cfg.get("tie_word_embeddings", False))
    notes = []
    if not tied and "lm_head.weight" not in index:
        notes.append("lm_head.weight is absent: using the embedding as the classifier")
        tied = True
    c = Config(
        dim=dim, hidden_dim=int(cfg["intermediate_size"]), n_layers=int(cfg["num_hidden_layers"]),
        n_heads=n_heads, n_kv_heads=n_kv, vocab=int(cfg["vocab_size"]),
        max_seq=int(cfg.get("max_position_embeddings", 2048)),
        rope_theta=float(cfg.get("rope_theta", 10000.0)),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), shared_classifier=tied,
    )

    def get(name: str) -> Callable[[], np.ndarray]:
        def f() -> np.ndarray:
            if name not in index:
                raise ConvertError(f"{d}: tensor {name} is missing")
            p, e, s = index[name]
            return _read_safetensor(p, e, s, name)
        return f

    t: Dict[str, Callable[[], np.ndarray]] = {"tok_emb": get("model.embed_tokens.weight"),
                                               "final_norm": get("model.norm.weight")}
    for l in range(c.n_layers):
        h = f"model.layers.{l}."
        q, k = get(h + "self_attn.q_proj.weight"), get(h + "self_attn.k_proj.weight")
        t[f"layers.{l}.attn_norm"] = get(h + "input_layernorm.weight")
        t[f"layers.{l}.wq"] = lambda q=q: permute_rotate_half_to_interleaved(q(), c.n_heads)
        t[f"layers.{l}.wk"] = lambda k=k: permute_rotate_half_to_interleaved(k(), c.n_kv_heads)
        t[f"layers.{l}.wv"] = get(h + "self_attn.v_proj.weight")
        t[f"layers.{l}.wo"] = get(h + "self_attn.o_proj.weight")
        t[f"layers.{l}.ffn_norm"] = get(h + "post_attention_layernorm.weight")
        t[f"layers.{l}.w1"] = get(h + "mlp.gate_proj.weight")
        t[f"layers.{l}.w2"] = get(h + "mlp.down_proj.weight")
        t[f"layers.{l}.w3"] = get(h + "mlp.up_proj.weight")
    if not tied:
        t["wcls"] = get("lm_head.weight")
    return Model(c, t, source="Hugging Face safetensors", notes=notes)


# ---------------------------------------------------------------------------
# GGUF

def _gguf_field(reader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def load_gguf(path: Path) -> Model:
    try:
        import gguf
    except ImportError as e:  # pragma: no cover
        raise ConvertError("GGUF input needs the gguf package: pip install -r tools/requirements.txt") from e
    r = gguf.GGUFReader(str(path))
    arch = _gguf_field(r, "general.architecture")
    if arch != "llama":
        raise ConvertError(f"{path}: general.architecture is {arch!r}; only 'llama' GGUF models are supported")

    def req(key: str):
        v = _gguf_field(r, key)
        if v is None:
            raise ConvertError(f"{path}: GGUF metadata {key} is missing")
        return v

    tensors = {t.name: t for t in r.tensors}
    dim = int(req("llama.embedding_length"))
    n_heads = int(req("llama.attention.head_count"))
    n_kv = int(_gguf_field(r, "llama.attention.head_count_kv", n_heads))
    rope_dims = _gguf_field(r, "llama.rope.dimension_count")
    if rope_dims is not None and int(rope_dims) != dim // n_heads:
        raise ConvertError(f"{path}: llama.rope.dimension_count {rope_dims} != head_dim {dim // n_heads}: partial RoPE is not supported")
    scaling = _gguf_field(r, "llama.rope.scaling.type")
    if scaling not in (None, "none"):
        raise ConvertError(f"{path}: llama.rope.scaling.type {scaling!r} is not supported by the runtime")
    emb = tensors.get("token_embd.weight")
    if emb is None:
        raise ConvertError(f"{path}: tensor token_embd.weight is missing")
    vocab = int(_gguf_field(r, "llama.vocab_size", int(emb.shape[1])))
    c = Config(
        dim=dim, hidden_dim=int(req("llama.feed_forward_length")), n_layers=int(req("llama.block_count")),
        n_heads=n_heads, n_kv_heads=n_kv, vocab=vocab,
        max_seq=int(_gguf_field(r, "llama.context_length", 2048)),
        rope_theta=float(_gguf_field(r, "llama.rope.freq_base", 10000.0)),
        norm_eps=float(req("llama.attention.layer_norm_rms_epsilon")),
        shared_classifier="output.weight" not in tensors,
    )

    def get(name: str) -> Callable[[], np.ndarray]:
        def f() -> np.ndarray:
            t = tensors.get(name)
            if t is None:
                raise ConvertError(f"{path}: tensor {name} is missing")
            try:
                x = gguf.quants.dequantize(t.data, t.tensor_type)
            except NotImplementedError as e:
                raise ConvertError(f"tensor {name}: GGUF type {t.tensor_type.name} cannot be dequantized: {e}") from e
            # ggml lists dimensions fastest-first (ne[0] = columns): a matrix
            # with ne = [K, N] is N rows of K, row-major, which is already the
            # runtime's rows x cols once the shape is read in reverse.
            shape = tuple(int(s) for s in reversed(list(t.shape)))
            return np.asarray(x, dtype=np.float32).reshape(shape)
        return f

    # No permutation here: llama.cpp runs LLM_ARCH_LLAMA with its "normal"
    # RoPE, which rotates adjacent pairs (2i, 2i+1) like the runtime. Its
    # convert_hf_to_gguf.py therefore undoes Hugging Face's rotate-half
    # ordering when it writes attn_q/attn_k (LlamaModel.permute: reshape to
    # (heads, 2, head_dim/2, K) and swap axes 1 and 2, with head_count_kv for
    # attn_k), and GGUFs converted from Meta's checkpoints were interleaved to
    # begin with. So GGUF llama q/k are already in interleaved order.
    t: Dict[str, Callable[[], np.ndarray]] = {"tok_emb": get("token_embd.weight"),
                                               "final_norm": get("output_norm.weight")}
    for l in range(c.n_layers):
        b = f"blk.{l}."
        t[f"layers.{l}.attn_norm"] = get(b + "attn_norm.weight")
        t[f"layers.{l}.wq"] = get(b + "attn_q.weight")
        t[f"layers.{l}.wk"] = get(b + "attn_k.weight")
        t[f"layers.{l}.wv"] = get(b + "attn_v.weight")
        t[f"layers.{l}.wo"] = get(b + "attn_output.weight")
        t[f"layers.{l}.ffn_norm"] = get(b + "ffn_norm.weight")
        t[f"layers.{l}.w1"] = get(b + "ffn_gate.weight")
        t[f"layers.{l}.w2"] = get(b + "ffn_down.weight")
        t[f"layers.{l}.w3"] = get(b + "ffn_up.weight")
    if not c.shared_classifier:
        t["wcls"] = get("output.weight")
    types = sorted({tensors[n].tensor_type.name for n in tensors})
    m = Model(c, t, source=f"GGUF llama ({', '.join(types)})")
    m.tokenizer_writer = lambda out: write_gguf_tokenizer(r, out)
    return m


# ---------------------------------------------------------------------------
# Tokenizers

def bytes_to_unicode() -> Dict[int, str]:
    """GPT-2's byte -> printable character map (FORMAT.md, "Tokenizer files")."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def _u32(v: int) -> bytes:
    return struct.pack("<I", v)


def _opt_id(v, n_vocab: int, what: str) -> int:
    if v is None or int(v) < 0:
        return TOK_NONE
    v = int(v)
    if v >= n_vocab:
        raise ConvertError(f"tokenizer {what} id {v} is outside the vocabulary of {n_vocab}")
    return v


def build_tok(tokens: List[str], types: List[int], merges: List[str], pre: str,
              bos=None, eos=None, unk=None, pad=None, add_bos=False, add_eos=False,
              chat_template: str = "") -> bytes:
    """Serializes a byte-level BPE tokenizer as a .tok file (format version 1)."""
    n = len(tokens)
    if not 1 <= n <= TOK_MAX_VOCAB:
        raise ConvertError(f"tokenizer has {n} tokens; the .tok format allows 1..{TOK_MAX_VOCAB}")
    if len(merges) > TOK_MAX_MERGES:
        raise ConvertError(f"tokenizer has {len(merges)} merges; the .tok format allows {TOK_MAX_MERGES}")
    if len(types) != n:
        raise ConvertError(f"tokenizer has {n} tokens but {len(types)} token types")
    pre_b = pre.encode("ascii")
    if len(pre_b) > TOK_MAX_PRE_BYTES:
        raise ConvertError(f"pre-tokenizer name {pre!r} is longer than {TOK_MAX_PRE_BYTES} bytes")
    tmpl = chat_template.encode("utf-8")
    if len(tmpl) > TOK_MAX_TEMPLATE_BYTES:
        raise ConvertError(f"chat template of {len(tmpl)} bytes exceeds {TOK_MAX_TEMPLATE_BYTES}")
    ids: Dict[str, int] = {}
    parts = [b""]  # header placeholder
    parts.append(_u32(len(pre_b)) + pre_b)
    body = bytearray()
    for i, t in enumerate(tokens):
        b = t.encode("utf-8")
        if not 1 <= len(b) <= TOK_MAX_TOKEN_BYTES:
            raise ConvertError(f"token {i} is {len(b)} bytes; the .tok format allows 1..{TOK_MAX_TOKEN_BYTES}")
        ids.setdefault(t, i)
        body += _u32(len(b)) + b
    parts.append(bytes(body))
    for i, ty in enumerate(types):
        if not 0 <= int(ty) <= 6:
            raise ConvertError(f"token {i} has type {ty}; types are 0..6")
    parts.append(bytes(int(ty) for ty in types))
    mb = bytearray()
    for rank, m in enumerate(merges):
        pieces = m.split(" ")
        if len(pieces) != 2 or not pieces[0] or not pieces[1]:
            raise ConvertError(f"merge #{rank} {m!r} is not two pieces separated by one space")
        a, b = pieces
        for piece in (a, b, a + b):
            if piece not in ids:
                raise ConvertError(f"merge #{rank} {m!r}: piece {piece!r} is not in the vocabulary")
        mb += struct.pack("<3I", ids[a], ids[b], ids[a + b])
    parts.append(bytes(mb))
    special = [i for i, ty in enumerate(types) if int(ty) in (TT_CONTROL, TT_USER_DEFINED)]
    parts.append(b"".join(_u32(i) for i in special))
    parts.append(_u32(len(tmpl)) + tmpl)
    flags = (1 if add_bos else 0) | (2 if add_eos else 0)
    parts[0] = TOK_MAGIC + struct.pack(
        "<11I", TOK_VERSION, TOK_KIND_BYTE_BPE, n, len(merges), len(special),
        _opt_id(bos, n, "bos"), _opt_id(eos, n, "eos"), _opt_id(unk, n, "unk"), _opt_id(pad, n, "pad"),
        flags, 0,
    )
    return b"".join(parts)


def build_llama2c_tokenizer(tokens: List[str], scores: List[float], bos: Optional[int], eos: Optional[int]) -> bytes:
    """llama2.c's tokenizer.bin, as its tokenizer.py writes it: u32
    max_token_length, then per token f32 score, i32 length, bytes; '\u2581'
    becomes a space and BOS/EOS become '\\n<s>\\n' / '\\n</s>\\n'."""
    pieces = []
    for i, t in enumerate(tokens):
        if i == bos:
            t = "\n<s>\n"
        elif i == eos:
            t = "\n</s>\n"
        pieces.append(t.replace("\u2581", " ").encode("utf-8"))
    out = bytearray(struct.pack("<I", max(len(p) for p in pieces)))
    for p, s in zip(pieces, scores):
        out += struct.pack("<fI", float(s), len(p)) + p
    return bytes(out)


def write_gguf_tokenizer(r, out: Path) -> str:
    f = lambda k, d=None: _gguf_field(r, k, d)  # noqa: E731
    model = f("tokenizer.ggml.model")
    tokens = f("tokenizer.ggml.tokens")
    if tokens is None:
        raise ConvertError("the GGUF has no tokenizer.ggml.tokens")
    types = f("tokenizer.ggml.token_type") or [TT_NORMAL] * len(tokens)
    if model == "gpt2":
        data = build_tok(
            tokens, types, f("tokenizer.ggml.merges") or [], f("tokenizer.ggml.pre", "default"),
            bos=f("tokenizer.ggml.bos_token_id"), eos=f("tokenizer.ggml.eos_token_id"),
            unk=f("tokenizer.ggml.unknown_token_id"), pad=f("tokenizer.ggml.padding_token_id"),
            add_bos=bool(f("tokenizer.ggml.add_bos_token", False)),
            add_eos=bool(f("tokenizer.ggml.add_eos_token", False)),
            chat_template=f("tokenizer.chat_template", "") or "",
        )
        kind = f".tok byte-level BPE ({len(tokens)} tokens)"
    elif model == "llama":
        scores = f("tokenizer.ggml.scores") or [0.0] * len(tokens)
        bos, eos = f("tokenizer.ggml.bos_token_id", 1), f("tokenizer.ggml.eos_token_id", 2)
        if (bos, eos) != (1, 2):
            log(f"warning: BOS/EOS are {bos}/{eos}; llama2.c's tokenizer.bin assumes 1/2")
        data = build_llama2c_tokenizer(tokens, scores, bos, eos)
        kind = f"llama2.c tokenizer.bin ({len(tokens)} tokens)"
    else:
        raise ConvertError(f"tokenizer.ggml.model {model!r} is not supported (gpt2 or llama)")
    atomic_write(out, lambda fh: fh.write(data))
    return kind


# ---------------------------------------------------------------------------
# Entry points

def detect_format(path: Path) -> str:
    if path.is_dir():
        return "hf"
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        return "gguf"
    if path.name == "config.json" or path.suffix == ".safetensors":
        return "hf"
    return "llama2c"


def load(path: Path, fmt: str = "auto") -> Model:
    path = Path(path)
    if not path.exists():
        raise ConvertError(f"{path}: no such file or directory")
    fmt = detect_format(path) if fmt == "auto" else fmt
    return {"llama2c": load_llama2c, "hf": load_hf, "gguf": load_gguf}[fmt](path)


def convert(inp: Path, out: Path, wtype: str, max_seq: Optional[int] = None,
            tokenizer_out: Optional[Path] = None, fmt: str = "auto", pad_hidden_dim: bool = False,
            quiet: bool = False) -> Model:
    model = load(inp, fmt)
    c = model.config
    if max_seq is not None:
        if max_seq <= 0:
            raise ConvertError(f"--max-seq {max_seq} must be positive")
        if max_seq > c.max_seq:
            model.notes.append(f"max_seq {max_seq} exceeds the model's trained context {c.max_seq}")
        c.max_seq = max_seq
    if pad_hidden_dim:
        pad_hidden(model)
    if not quiet:
        log(f"{inp}: {model.source}")
        log(f"dim {c.dim}, hidden {c.hidden_dim}, layers {c.n_layers}, heads {c.n_heads}/{c.n_kv_heads} "
            f"(head_dim {c.head_dim}), vocab {c.vocab}, max_seq {c.max_seq}, rope_theta {c.rope_theta}, "
            f"norm_eps {c.norm_eps:g}, {'shared' if c.shared_classifier else 'separate'} classifier")
        for n in model.notes:
            log(f"note: {n}")
    validate_config(c)
    if tokenizer_out is not None and model.tokenizer_writer is None:
        raise ConvertError(
            f"{model.source} input carries no tokenizer: use llama2.c's tokenizer.bin as-is "
            "(--tokenizer-out works for GGUF inputs)"
        )
    size = write_mlb(model, Path(out), wtype, quiet=quiet)
    if not quiet:
        log(f"wrote {out} ({size} bytes, {wtype})")
    if tokenizer_out is not None:
        kind = model.tokenizer_writer(Path(tokenizer_out))
        if not quiet:
            log(f"wrote {tokenizer_out} ({kind})")
    return model


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="convert.py",
        description="Convert a Llama-style model (llama2.c checkpoint, Hugging Face safetensors "
                    "directory or GGUF 'llama' file) into a legacy-ml .mlb with Q8_0 or Q4_0 weights.",
        epilog="Examples:\n"
               "  tools/convert.py stories15M.bin --out s15.mlb --wtype q8_0\n"
               "  tools/convert.py ./TinyLlama-dir --out tl.mlb --wtype q4_0 --max-seq 2048\n"
               "  tools/convert.py SmolLM2.gguf --out smol.mlb --wtype q8_0 --max-seq 2048 --tokenizer-out smol.tok\n"
               "Progress goes to stderr; the output is written to a temporary file and renamed into place.\n"
               "Exit status: 0 ok, 1 the model cannot be converted (the message says why), 2 usage.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("input", type=Path, help="llama2.c .bin (legacy or ak42 v1), HF model directory, or .gguf")
    ap.add_argument("--out", "-o", type=Path, required=True, help="the .mlb file to write")
    ap.add_argument("--wtype", choices=sorted(WTYPES), default="q8_0", help="weight quantization (default q8_0)")
    ap.add_argument("--max-seq", type=int, default=None,
                    help="context length stored in the header; it sizes the KV cache (default: the model's own)")
    ap.add_argument("--tokenizer-out", type=Path, default=None,
                    help="also write the tokenizer (GGUF inputs): .tok for GPT-2 BPE, llama2.c tokenizer.bin for SentencePiece")
    ap.add_argument("--input-format", choices=["auto", "llama2c", "hf", "gguf"], default="auto",
                    help="input kind (default: detected)")
    ap.add_argument("--pad-hidden", action="store_true",
                    help="zero-pad hidden_dim (the FFN width) up to a multiple of 32 when it is not one "
                         "(exact: the extra units output silu(0)*0 = 0); without it such a model is refused")
    ap.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    a = ap.parse_args(argv)
    try:
        convert(a.input, a.out, a.wtype, a.max_seq, a.tokenizer_out, a.input_format, a.pad_hidden, a.quiet)
    except ConvertError as e:
        print(f"convert: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"convert: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
