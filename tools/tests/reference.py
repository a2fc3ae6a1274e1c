"""A numpy reference forward pass of a Llama-style decoder, written from the
math (not from the Rust code): RMSNorm, RoPE (interleaved pairs or HF's
rotate-half), grouped-query causal attention, SwiGLU feed-forward.

Weights are a dict with the runtime's tensor names ("tok_emb",
"layers.{l}.wq", ..., "final_norm", optional "wcls"), matrices as
(out, in) arrays. The whole sequence is processed at once with a causal mask
(no KV cache), so this shares no structure with the runtime's incremental
decoder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence

import numpy as np


@dataclass
class RefConfig:
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(ms + x.dtype.type(eps)) * w


def rope_angles(T: int, hd: int, theta: float, dtype) -> tuple:
    inv = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)  # (hd/2,)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]  # (T, hd/2)
    return np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, style: str) -> np.ndarray:
    """x: (T, heads, hd). 'interleaved' rotates (2i, 2i+1); 'rotate_half'
    rotates (i, i + hd/2); pair i turns by pos * theta^(-2i/hd) in both."""
    c, s = cos[:, None, :], sin[:, None, :]
    if style == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * c - b * s
        out[..., 1::2] = a * s + b * c
        return out
    if style == "rotate_half":
        h = x.shape[-1] // 2
        a, b = x[..., :h], x[..., h:]
        return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)
    raise ValueError(style)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


def forward(w: Dict[str, np.ndarray], cfg: RefConfig, tokens: Sequence[int],
            rope: str = "interleaved", dtype=np.float32, act=None) -> np.ndarray:
    """Logits (T, vocab) for every position of `tokens`, teacher-forced.
    `act`, if given, is applied to the input of every weight matrix product
    (to simulate activation quantization)."""
    T = len(tokens)
    hd, H, KV = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    group = H // KV
    W = lambda k: np.asarray(w[k], dtype=dtype)  # noqa: E731
    A = act or (lambda v: v)
    x = W("tok_emb")[np.asarray(tokens)]
    cos, sin = rope_angles(T, hd, cfg.rope_theta, dtype)
    mask = np.triu(np.full((T, T), -np.inf, dtype=dtype), k=1)
    scale = dtype(1.0 / np.sqrt(hd))
    for l in range(cfg.n_layers):
        p = f"layers.{l}."
        h = A(rmsnorm(x, W(p + "attn_norm"), cfg.norm_eps))
        q = (h @ W(p + "wq").T).reshape(T, H, hd)
        k = (h @ W(p + "wk").T).reshape(T, KV, hd)
        v = (h @ W(p + "wv").T).reshape(T, KV, hd)
        q, k = apply_rope(q, cos, sin, rope), apply_rope(k, cos, sin, rope)
        out = np.empty((T, H, hd), dtype=dtype)
        for head in range(H):
            kh, vh = k[:, head // group, :], v[:, head // group, :]
            s = q[:, head, :] @ kh.T * scale + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            out[:, head, :] = s @ vh
        x = x + A(out.reshape(T, H * hd)) @ W(p + "wo").T
        h = A(rmsnorm(x, W(p + "ffn_norm"), cfg.norm_eps))
        x = x + A(silu(h @ W(p + "w1").T) * (h @ W(p + "w3").T)) @ W(p + "w2").T
    x = A(rmsnorm(x, W("final_norm"), cfg.norm_eps))
    cls = W("wcls") if "wcls" in w else W("tok_emb")
    return x @ cls.T


def q8_round_trip(x: np.ndarray) -> np.ndarray:
    """Q8_0-quantize then dequantize each row in blocks of 32 (FORMAT.md's
    rule, restated here): amax, d = amax/127, q = round half away(x*127/amax)."""
    x = np.asarray(x, dtype=np.float32)
    b = x.reshape(-1, 32)
    amax = np.max(np.abs(b), axis=1, keepdims=True)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore", invalid="ignore"):
        idv = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.clip(np.trunc(b * idv + np.copysign(np.float32(0.5), b)), -127, 127)
    return (q * d).astype(np.float32).reshape(x.shape)


def greedy(w: Dict[str, np.ndarray], cfg: RefConfig, prompt: Sequence[int], steps: int,
           rope: str = "interleaved", dtype=np.float32) -> List[int]:
    """Greedy continuation: `steps` tokens, the first chosen after the prompt.
    Recomputes the whole prefix per step (fine for small models)."""
    seq = list(prompt)
    out = []
    for _ in range(steps):
        t = int(np.argmax(forward(w, cfg, seq, rope, dtype)[-1]))
        out.append(t)
        seq.append(t)
    return out


def compare(ref: np.ndarray, got: np.ndarray) -> dict:
    """Per-step cosine, max|d|/max|ref|, top-1 agreement of two (T, vocab) arrays."""
    ref = np.asarray(ref, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    cos = np.sum(ref * got, axis=1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
    rel = np.max(np.abs(ref - got), axis=1) / np.max(np.abs(ref), axis=1)
    top1 = np.argmax(ref, axis=1) == np.argmax(got, axis=1)
    # softmax ignores a common shift of the logits: the cosine of the
    # centred logits measures only what changes the distribution
    rc = ref - ref.mean(axis=1, keepdims=True)
    gc = got - got.mean(axis=1, keepdims=True)
    ccos = np.sum(rc * gc, axis=1) / (np.linalg.norm(rc, axis=1) * np.linalg.norm(gc, axis=1))
    return {"cos": cos, "ccos": ccos, "rel": rel, "top1": top1, "min_cos": float(cos.min()),
            "min_ccos": float(ccos.min()), "max_rel": float(rel.max()), "agree": float(top1.mean())}
