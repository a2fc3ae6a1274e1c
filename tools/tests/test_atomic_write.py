"""A conversion that fails while writing (a full disk, an error half-way, an
interrupt) leaves no file at the output path and keeps a file already there:
convert.py writes a temporary file beside it and renames it into place."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys

import pytest

import convert
from conftest import TOOLS, convert_main
from helpers import random_weights, write_llama2c_legacy
from reference import RefConfig

CFG = RefConfig(dim=64, hidden_dim=128, n_layers=2, n_heads=4, n_kv_heads=2, vocab=96)


@pytest.fixture
def ckpt(tmp_path):
    """A llama2.c checkpoint in its own directory, so that the output
    directory holds only what the converter leaves behind."""
    src = tmp_path / "src"
    src.mkdir()
    path = src / "m.bin"
    write_llama2c_legacy(path, CFG, random_weights(CFG, seed=3), seq_len=16)
    out = tmp_path / "out"
    out.mkdir()
    return path, out


def convert_with_file_size_limit(args, limit_bytes: int) -> subprocess.CompletedProcess:
    """Runs convert.py with RLIMIT_FSIZE: writing past it fails with EFBIG
    (Python ignores SIGXFSZ), the way a full disk fails with ENOSPC."""

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, str(TOOLS / "convert.py"), *map(str, args), "-q"],
                          capture_output=True, text=True, preexec_fn=limit)


def test_a_full_disk_leaves_no_output_file(ckpt):
    path, out = ckpt
    r = convert_with_file_size_limit([path, "--out", out / "m.mlb"], 4096)
    assert r.returncode == 1, r.stderr
    assert "convert: error:" in r.stderr and "File too large" in r.stderr, r.stderr
    assert sorted(os.listdir(out)) == []


def test_a_full_disk_keeps_the_previous_output(ckpt):
    path, out = ckpt
    assert convert_main(path, "--out", out / "m.mlb", "-q") == 0
    before = (out / "m.mlb").read_bytes()
    assert len(before) > 4096
    r = convert_with_file_size_limit([path, "--out", out / "m.mlb", "--wtype", "q4_0"], 4096)
    assert r.returncode == 1, r.stderr
    assert (out / "m.mlb").read_bytes() == before
    assert sorted(os.listdir(out)) == ["m.mlb"]


def test_enospc_at_fsync_leaves_no_output_file(ckpt, monkeypatch, capsys):
    # Delayed allocation: a file system may report a full disk only at fsync.
    path, out = ckpt

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(convert.os, "fsync", full)
    assert convert_main(path, "--out", out / "m.mlb", "-q") == 1
    assert "No space left on device" in capsys.readouterr().err
    assert sorted(os.listdir(out)) == []


@pytest.mark.parametrize("exc", [OSError(errno.EIO, "I/O error"), KeyboardInterrupt()])
def test_atomic_write_cleans_up_after_any_exception(tmp_path, exc):
    target = tmp_path / "t.tok"
    target.write_bytes(b"old")

    def write(f):
        f.write(b"x" * 10000)
        raise exc

    with pytest.raises(type(exc)):
        convert.atomic_write(target, write)
    assert target.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["t.tok"]
    convert.atomic_write(target, lambda f: f.write(b"new"))
    assert target.read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path)) == ["t.tok"]


def _kinds(tmp_path):
    """Targets that are not regular files, made inside tmp_path only."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "real").write_bytes(b"old")
    os.symlink(tmp_path / "real", tmp_path / "link")
    os.symlink(tmp_path / "missing", tmp_path / "dangling")
    return [("fifo", "a FIFO"), ("dir", "a directory"), ("link", "a symbolic link"),
            ("dangling", "a symbolic link")]


def test_atomic_write_refuses_targets_that_are_not_regular_files(tmp_path):
    import stat
    for name, what in _kinds(tmp_path):
        with pytest.raises(convert.ConvertError, match=f"is {what}, not a regular file"):
            convert.atomic_write(tmp_path / name, lambda f: f.write(b"new"))
        assert not stat.S_ISREG(os.lstat(tmp_path / name).st_mode), name
    assert (tmp_path / "real").read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["dangling", "dir", "fifo", "link", "real"]


def test_convert_refuses_an_output_that_is_a_fifo(ckpt, capsys):
    path, out = ckpt
    os.mkfifo(out / "m.mlb")
    assert convert_main(path, "--out", out / "m.mlb", "-q") == 1
    assert "is a FIFO, not a regular file" in capsys.readouterr().err
    assert sorted(os.listdir(out)) == ["m.mlb"]
