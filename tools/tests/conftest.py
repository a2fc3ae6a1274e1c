"""Shared fixtures: the `ml` binary (built once per session with cargo, or
taken from $ML_BIN), a reference .mlb writer built from the runtime's own
Rust writer, and helpers to run `ml`.

Environment:
  ML_BIN=path           reuse a built `ml` instead of running cargo
  CARGO_TARGET_DIR=dir  where cargo builds (default: <repo>/target)
  ML_NETWORK_TESTS=1    run the tests marked `network` (SmolLM2 download)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent
TOOLS = TESTS.parent
REPO = TOOLS.parent
# The llama2.c files the tests need, in the repository (testdata/README.md).
TESTDATA = REPO / "testdata"
for p in (str(TOOLS), str(TESTS)):
    if p not in sys.path:
        sys.path.insert(0, p)


def pytest_configure(config):
    config.addinivalue_line("markers", "network: needs the SmolLM2 download (set ML_NETWORK_TESTS=1)")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("ML_NETWORK_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="needs the network and the SmolLM2 download; set ML_NETWORK_TESTS=1")
    for item in items:
        if "network" in item.keywords:
            item.add_marker(skip)


def _target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")


@pytest.fixture(scope="session")
def ml_bin() -> Path:
    if os.environ.get("ML_BIN"):
        p = Path(os.environ["ML_BIN"])
        assert p.exists(), f"ML_BIN={p} does not exist"
        return p
    subprocess.run(["cargo", "build", "-p", "runtime", "--release", "--quiet"], cwd=REPO, check=True,
                   env={**os.environ, "CARGO_TARGET_DIR": str(_target_dir())})
    p = _target_dir() / "release" / "ml"
    assert p.exists()
    return p


REF_WRITER_MAIN = r"""
//! Writes a .mlb with legacy-ml's own writer from raw little-endian f32
//! values given in file order: the oracle for the converter's bytes.
use legacy_ml::core::tensor::WType;
use legacy_ml::model::format::Header;
use legacy_ml::model::writer::write_model;
use std::io::Write;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let raw = std::fs::read(&a[1]).expect("read values");
    let vals: Vec<f32> = raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let u = |i: usize| a[i].parse::<u32>().expect("u32 argument");
    let header = Header {
        dim: u(3),
        n_layers: u(4),
        n_heads: u(5),
        n_kv_heads: u(6),
        hidden_dim: u(7),
        vocab: u(8),
        max_seq: u(9),
        rope_theta: f32::from_bits(u(10)),
        norm_eps: f32::from_bits(u(11)),
        wtype: if a[12] == "q8_0" { WType::Q8_0 } else { WType::Q4_0 },
        shared_classifier: a[13] == "1",
    };
    let mut pos = 0usize;
    let mut out = std::io::BufWriter::new(std::fs::File::create(&a[2]).expect("create"));
    write_model(&mut out, &header, |t, buf| {
        buf.copy_from_slice(&vals[pos..pos + t.elements()]);
        pos += t.elements();
        Ok(())
    })
    .expect("write_model");
    out.flush().expect("flush");
    assert_eq!(pos, vals.len(), "values left over");
}
"""


@pytest.fixture(scope="session")
def ref_writer(tmp_path_factory) -> Path:
    """A tiny binary around runtime::model::writer::write_model (the runtime
    library without default features has no dependencies, so this builds
    offline)."""
    d = tmp_path_factory.mktemp("ref_writer")
    (d / "src").mkdir()
    (d / "src" / "main.rs").write_text(REF_WRITER_MAIN)
    (d / "Cargo.toml").write_text(
        '[package]\nname = "mlb-ref-writer"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n\n'
        f'[dependencies]\nruntime = {{ path = "{REPO / "runtime"}", default-features = false }}\n\n[workspace]\n'
    )
    target = _target_dir() / "tools-ref-writer"
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=d, check=True,
                   env={**os.environ, "CARGO_TARGET_DIR": str(target)})
    return target / "release" / "mlb-ref-writer"


def run_ref_writer(ref_writer: Path, out: Path, values: np.ndarray, h: dict, wtype: str) -> bytes:
    raw = out.with_suffix(".f32")
    np.ascontiguousarray(values, dtype="<f4").tofile(raw)
    bits = lambda f: str(int(np.array(f, dtype=np.float32).view(np.uint32)))  # noqa: E731
    subprocess.run([str(ref_writer), str(raw), str(out), str(h["dim"]), str(h["n_layers"]), str(h["n_heads"]),
                    str(h["n_kv_heads"]), str(h["hidden_dim"]), str(h["vocab"]), str(h["max_seq"]),
                    bits(h["rope_theta"]), bits(h["norm_eps"]), wtype, "1" if h["shared"] else "0"], check=True)
    return out.read_bytes()


def ml(ml_bin: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([str(ml_bin), *map(str, args)], capture_output=True, text=True, check=check)


def ml_logits(ml_bin: Path, model: Path, tokens, steps: int) -> dict:
    """`ml logits` as {'tokens': [...], 'greedy': [...], 'logits': (steps, vocab)}.
    Step k holds the logits at position len(tokens)-1+k; the input sequence
    the runtime saw is tokens + greedy[:-1]."""
    out = json.loads(ml(ml_bin, "logits", model, "--tokens", ",".join(map(str, tokens)), "-n", str(steps)).stdout)
    greedy = [s["token"] for s in out["steps"]]
    logits = np.array([s["logits"] for s in out["steps"]], dtype=np.float64)
    return {"tokens": out["tokens"], "greedy": greedy, "logits": logits, "seq": list(tokens) + greedy[:-1]}


def convert_main(*args) -> int:
    import convert

    return convert.main([str(a) for a in args])
