"""Builders of small test models in every input format the converter reads,
and an independent .mlb parser written from FORMAT.md."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Dict, Optional

import numpy as np

from reference import RefConfig

LAYER_KEYS = ("attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3")


def random_weights(cfg: RefConfig, seed: int, shared: bool = True, scale: float = 1.0) -> Dict[str, np.ndarray]:
    """Weights in the runtime's naming and (interleaved) layout. Matrices are
    N(0, 1/in) so activations keep unit scale; norms are near 1."""
    rng = np.random.default_rng(seed)
    hd = cfg.dim // cfg.n_heads
    kv = hd * cfg.n_kv_heads

    def mat(r, c, s=1.0):
        return (rng.standard_normal((r, c)) * s * scale / np.sqrt(c)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"tok_emb": (rng.standard_normal((cfg.vocab, cfg.dim))).astype(np.float32)}
    for l in range(cfg.n_layers):
        p = f"layers.{l}."
        w[p + "attn_norm"] = norm(cfg.dim)
        w[p + "wq"] = mat(cfg.dim, cfg.dim, 2.0)
        w[p + "wk"] = mat(kv, cfg.dim, 2.0)
        w[p + "wv"] = mat(kv, cfg.dim)
        w[p + "wo"] = mat(cfg.dim, cfg.dim)
        w[p + "ffn_norm"] = norm(cfg.dim)
        w[p + "w1"] = mat(cfg.hidden_dim, cfg.dim)
        w[p + "w2"] = mat(cfg.dim, cfg.hidden_dim)
        w[p + "w3"] = mat(cfg.hidden_dim, cfg.dim)
    w["final_norm"] = norm(cfg.dim)
    if not shared:
        w["wcls"] = mat(cfg.vocab, cfg.dim, 4.0)
    return w


def file_order(cfg: RefConfig, shared: bool):
    names = ["tok_emb"]
    for l in range(cfg.n_layers):
        names += [f"layers.{l}.{k}" for k in LAYER_KEYS]
    names.append("final_norm")
    if not shared:
        names.append("wcls")
    return names


def write_llama2c_legacy(path: Path, cfg: RefConfig, w: Dict[str, np.ndarray], seq_len: int) -> None:
    shared = "wcls" not in w
    vocab = cfg.vocab if shared else -cfg.vocab
    hd = cfg.dim // cfg.n_heads
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, vocab, seq_len))
        f.write(w["tok_emb"].astype("<f4").tobytes())
        for k in LAYER_KEYS:
            for l in range(cfg.n_layers):
                f.write(w[f"layers.{l}.{k}"].astype("<f4").tobytes())
        f.write(w["final_norm"].astype("<f4").tobytes())
        # freq_cis_real / imag: filled with a marker the converter must skip.
        f.write(np.full(seq_len * hd, 1234.5, dtype="<f4").tobytes())
        if not shared:
            f.write(w["wcls"].astype("<f4").tobytes())


def write_llama2c_v1(path: Path, cfg: RefConfig, w: Dict[str, np.ndarray], seq_len: int) -> None:
    """llama2.c export.py version1_export: 'ak42' magic, 256-byte header."""
    shared = "wcls" not in w
    head = struct.pack("<Ii7iB", 0x616B3432, 1, cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.n_heads,
                       cfg.n_kv_heads, cfg.vocab, seq_len, int(shared))
    order = [f"layers.{l}.attn_norm" for l in range(cfg.n_layers)]
    order += [f"layers.{l}.ffn_norm" for l in range(cfg.n_layers)]
    order += ["final_norm", "tok_emb"]
    for k in ("wq", "wk", "wv", "wo", "w1", "w2", "w3"):
        order += [f"layers.{l}.{k}" for l in range(cfg.n_layers)]
    if not shared:
        order.append("wcls")
    with open(path, "wb") as f:
        f.write(head + b"\0" * (256 - len(head)))
        for n in order:
            f.write(w[n].astype("<f4").tobytes())


def interleaved_to_rotate_half(w: np.ndarray, n_heads: int) -> np.ndarray:
    """The inverse of the converter's permutation (HF's convert_llama_weights_to_hf
    permute): row i of a head comes from row 2i, row i + hd/2 from row 2i+1."""
    rows, cols = w.shape
    hd = rows // n_heads
    return w.reshape(n_heads, hd // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols).copy()


def hf_weights_from(w: Dict[str, np.ndarray], cfg: RefConfig) -> Dict[str, np.ndarray]:
    """HF state-dict names, q/k in rotate-half order."""
    hf = {"model.embed_tokens.weight": w["tok_emb"], "model.norm.weight": w["final_norm"]}
    for l in range(cfg.n_layers):
        p, h = f"layers.{l}.", f"model.layers.{l}."
        hf[h + "input_layernorm.weight"] = w[p + "attn_norm"]
        hf[h + "self_attn.q_proj.weight"] = interleaved_to_rotate_half(w[p + "wq"], cfg.n_heads)
        hf[h + "self_attn.k_proj.weight"] = interleaved_to_rotate_half(w[p + "wk"], cfg.n_kv_heads)
        hf[h + "self_attn.v_proj.weight"] = w[p + "wv"]
        hf[h + "self_attn.o_proj.weight"] = w[p + "wo"]
        hf[h + "post_attention_layernorm.weight"] = w[p + "ffn_norm"]
        hf[h + "mlp.gate_proj.weight"] = w[p + "w1"]
        hf[h + "mlp.down_proj.weight"] = w[p + "w2"]
        hf[h + "mlp.up_proj.weight"] = w[p + "w3"]
    if "wcls" in w:
        hf["lm_head.weight"] = w["wcls"]
    return hf


def hf_as_runtime_names(hf: Dict[str, np.ndarray], cfg: RefConfig) -> Dict[str, np.ndarray]:
    """HF tensors under the reference's names, *without* any permutation
    (for the rotate-half reference forward)."""
    w = {"tok_emb": hf["model.embed_tokens.weight"], "final_norm": hf["model.norm.weight"]}
    m = {"attn_norm": "input_layernorm", "wq": "self_attn.q_proj", "wk": "self_attn.k_proj",
         "wv": "self_attn.v_proj", "wo": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
         "w1": "mlp.gate_proj", "w2": "mlp.down_proj", "w3": "mlp.up_proj"}
    for l in range(cfg.n_layers):
        for k, v in m.items():
            w[f"layers.{l}.{k}"] = hf[f"model.layers.{l}.{v}.weight"]
    if "lm_head.weight" in hf:
        w["wcls"] = hf["lm_head.weight"]
    return w


def write_hf_dir(d: Path, cfg: RefConfig, hf: Dict[str, np.ndarray], max_pos: int, tie: bool,
                 dtype: str = "float32", shards: int = 1) -> None:
    from safetensors.numpy import save_file

    d.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": cfg.dim, "intermediate_size": cfg.hidden_dim,
        "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads, "vocab_size": cfg.vocab,
        "max_position_embeddings": max_pos, "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.norm_eps, "tie_word_embeddings": tie, "torch_dtype": dtype,
    }
    (d / "config.json").write_text(json.dumps(config, indent=1))
    names = sorted(hf)
    for s in range(shards):
        part = {n: np.ascontiguousarray(hf[n].astype(dtype)) for n in names[s::shards]}
        save_file(part, str(d / f"model-{s + 1:05d}-of-{shards:05d}.safetensors"))


def llamacpp_permute(w: np.ndarray, n_head: int, n_head_kv: Optional[int]) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute (HF rotate-half ->
    interleaved), as llama.cpp writes attn_q (n_head) and attn_k (n_head_kv)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write_gguf(path: Path, cfg: RefConfig, hf: Dict[str, np.ndarray], ctx: int,
               qtype=None, tokenizer: Optional[dict] = None) -> None:
    """A GGUF 'llama' model written the way llama.cpp's converter does it,
    from HF-layout weights. `qtype` (a GGMLQuantizationType) quantizes the
    2-D tensors with gguf.quants; norms stay F32."""
    import gguf

    wr = gguf.GGUFWriter(str(path), "llama")
    wr.add_context_length(ctx)
    wr.add_embedding_length(cfg.dim)
    wr.add_feed_forward_length(cfg.hidden_dim)
    wr.add_block_count(cfg.n_layers)
    wr.add_head_count(cfg.n_heads)
    wr.add_head_count_kv(cfg.n_kv_heads)
    wr.add_rope_freq_base(cfg.rope_theta)
    wr.add_layer_norm_rms_eps(cfg.norm_eps)
    wr.add_rope_dimension_count(cfg.dim // cfg.n_heads)
    wr.add_vocab_size(cfg.vocab)
    if tokenizer:
        wr.add_tokenizer_model(tokenizer["model"])
        if "pre" in tokenizer:
            wr.add_tokenizer_pre(tokenizer["pre"])
        wr.add_token_list(tokenizer["tokens"])
        wr.add_token_types(tokenizer["types"])
        if "scores" in tokenizer:
            wr.add_token_scores(tokenizer["scores"])
        if "merges" in tokenizer:
            wr.add_token_merges(tokenizer["merges"])
        wr.add_bos_token_id(tokenizer["bos"])
        wr.add_eos_token_id(tokenizer["eos"])
        if "unk" in tokenizer:
            wr.add_unk_token_id(tokenizer["unk"])
        wr.add_add_bos_token(tokenizer.get("add_bos", False))
        if "chat_template" in tokenizer:
            wr.add_chat_template(tokenizer["chat_template"])

    def add(name: str, x: np.ndarray) -> None:
        x = np.ascontiguousarray(x, dtype=np.float32)
        if qtype is not None and x.ndim == 2:
            q = gguf.quants.quantize(x, qtype)
            wr.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
        else:
            wr.add_tensor(name, x)

    add("token_embd.weight", hf["model.embed_tokens.weight"])
    for l in range(cfg.n_layers):
        h, b = f"model.layers.{l}.", f"blk.{l}."
        add(b + "attn_norm.weight", hf[h + "input_layernorm.weight"])
        add(b + "attn_q.weight", llamacpp_permute(hf[h + "self_attn.q_proj.weight"], cfg.n_heads, cfg.n_heads))
        add(b + "attn_k.weight", llamacpp_permute(hf[h + "self_attn.k_proj.weight"], cfg.n_heads, cfg.n_kv_heads))
        add(b + "attn_v.weight", hf[h + "self_attn.v_proj.weight"])
        add(b + "attn_output.weight", hf[h + "self_attn.o_proj.weight"])
        add(b + "ffn_norm.weight", hf[h + "post_attention_layernorm.weight"])
        add(b + "ffn_gate.weight", hf[h + "mlp.gate_proj.weight"])
        add(b + "ffn_down.weight", hf[h + "mlp.down_proj.weight"])
        add(b + "ffn_up.weight", hf[h + "mlp.up_proj.weight"])
    add("output_norm.weight", hf["model.norm.weight"])
    if "lm_head.weight" in hf:
        add("output.weight", hf["lm_head.weight"])
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


# ---------------------------------------------------------------------------
# .mlb parsing, from FORMAT.md alone

def parse_mlb(data: bytes) -> dict:
    """Header fields and every array (q/d or f32) of a .mlb image, checking
    alignment, zero gaps and the exact file length on the way."""
    assert data[:4] == b"MLB1"
    (version, dim, n_layers, n_heads, n_kv, hidden, vocab, max_seq) = struct.unpack_from("<8I", data, 4)
    rope_theta, norm_eps = struct.unpack_from("<2f", data, 36)
    wtype, shared = struct.unpack_from("<2I", data, 44)
    assert data[52:256] == b"\0" * 204, "header padding must be zero"
    h = dict(version=version, dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv,
             hidden_dim=hidden, vocab=vocab, max_seq=max_seq, rope_theta=rope_theta,
             norm_eps=norm_eps, wtype=wtype, shared_classifier=shared)
    kv = dim // n_heads * n_kv
    shapes = [("tok_emb", vocab, dim, True)]
    for l in range(n_layers):
        p = f"layers.{l}."
        shapes += [(p + "attn_norm", 1, dim, False), (p + "wq", dim, dim, True), (p + "wk", kv, dim, True),
                   (p + "wv", kv, dim, True), (p + "wo", dim, dim, True), (p + "ffn_norm", 1, dim, False),
                   (p + "w1", hidden, dim, True), (p + "w2", dim, hidden, True), (p + "w3", hidden, dim, True)]
    shapes.append(("final_norm", 1, dim, False))
    if not shared:
        shapes.append(("wcls", vocab, dim, True))
    off = 256
    arrays = {}
    offsets = []

    def take(n: int):
        nonlocal off
        start = (off + 63) // 64 * 64
        assert data[off:start] == b"\0" * (start - off), "gap bytes must be zero"
        offsets.append(start)
        off = start + n
        return start

    for name, r, c, quant in shapes:
        n = r * c
        if quant:
            qn = n if wtype == 8 else n // 2
            qs = take(qn)
            ds = take(n // 32 * 4)
            q = np.frombuffer(data, dtype=np.int8 if wtype == 8 else np.uint8, count=qn, offset=qs)
            d = np.frombuffer(data, dtype="<f4", count=n // 32, offset=ds)
            arrays[name] = (q, d, (r, c))
        else:
            s = take(n * 4)
            arrays[name] = np.frombuffer(data, dtype="<f4", count=n, offset=s)
    h["end"] = off
    h["offsets"] = offsets
    return {"header": h, "arrays": arrays}


def dequant_mlb(parsed: dict, name: str) -> np.ndarray:
    """Dequantizes one tensor of a parsed .mlb (from FORMAT.md's block rules)."""
    a = parsed["arrays"][name]
    if not isinstance(a, tuple):
        return a.astype(np.float32)
    q, d, (r, c) = a
    if parsed["header"]["wtype"] == 8:
        v = q.reshape(-1, 32).astype(np.float32)
    else:
        b = q.reshape(-1, 16)
        v = np.concatenate([(b & 15).astype(np.int32) - 8, (b >> 4).astype(np.int32) - 8], axis=1).astype(np.float32)
    return (v * d[:, None]).reshape(r, c)


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def write_bf16_safetensors(path: Path, tensors: Dict[str, np.ndarray]) -> None:
    """A BF16 safetensors file written by hand from the format's definition
    (u64 header length, JSON header, raw data), since numpy has no bfloat16."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        b = to_bf16_bits(tensors[name]).astype("<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
