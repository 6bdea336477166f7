"""Atomic publishing: a build that is killed or fails leaves nothing at out_dir, never damages an
index it was to replace, and the next build cleans up after it."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from infinigram_hf import InfiniGramIndex
from infinigram_hf.build import build_index

# A child that builds ~4M random u16 tokens in 4 shards (about a second here) after saying so.
CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    from infinigram_hf.build import build_index

    def docs():
        rng = np.random.default_rng(0)
        for _ in range(8000):
            yield rng.integers(0, 50000, size=500, dtype=np.int64)

    print("started", flush=True)
    build_index(docs(), sys.argv[1], vocab_size=50000, max_shard_tokens=1_000_000, progress=False)
    print("done", flush=True)
""")


def files_of(path: Path) -> dict:
    return {p.relative_to(path): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def failing_docs(n_ok: int, exc: BaseException):
    """Token-id documents that raise `exc` after n_ok of them."""
    for i in range(n_ok):
        yield [i % 7, 1, 2, 3]
    raise exc


def test_killed_build_leaves_nothing_and_rerun_cleans_up(tmp_path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    work = tmp_path / "work"
    work.mkdir()
    out = work / "ix"
    killed_mid_build = 0
    for delay in (0.05, 0.4, 0.9):
        child = subprocess.Popen([sys.executable, str(script), str(out)], stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "started"
            time.sleep(delay)
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.wait(timeout=60)
            child.stdout.close()
        if out.exists():  # it finished first: then it must be complete
            assert InfiniGramIndex.open(out).num_docs == 8000
        else:
            killed_mid_build += 1
            leftovers = [p.name for p in work.iterdir()]
            assert all(name.startswith(".ix.tmp-") for name in leftovers), leftovers
        # A rerun works and removes the dead build's temp dir.
        ix = build_index([[1, 2, 3], [2, 3]], out, vocab_size=10, overwrite=True, progress=False)
        assert ix.count([2, 3]) == 2
        ix.close()
        assert [p.name for p in work.iterdir()] == ["ix"]
        shutil.rmtree(out)
    assert killed_mid_build >= 1


@pytest.mark.parametrize("exc", [RuntimeError("corpus broke"), KeyboardInterrupt()], ids=["error", "interrupt"])
def test_failing_corpus_iterator_leaves_nothing(tmp_path, exc) -> None:
    out = tmp_path / "ix"
    with pytest.raises(type(exc)):
        build_index(failing_docs(2500, exc), out, vocab_size=10, batch_size=100, max_shard_tokens=3000,
                    progress=False)
    assert list(tmp_path.iterdir()) == []


def test_failing_text_iterator_with_tokenizer_leaves_nothing(tmp_path, bpe_tokenizer) -> None:
    def texts():
        yield from ["some text"] * 50
        raise ValueError("bad row")

    with pytest.raises(ValueError, match="bad row"):
        build_index(texts(), tmp_path / "ix", tokenizer=bpe_tokenizer, batch_size=8, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_failed_rebuild_with_overwrite_keeps_the_old_index(tmp_path) -> None:
    out = tmp_path / "ix"
    build_index([[1, 2, 3], [3, 2, 1]], out, vocab_size=10, progress=False).close()
    before = files_of(out)
    # Fails in the corpus, then later in the build (a document too large for a shard).
    with pytest.raises(RuntimeError):
        build_index(failing_docs(100, RuntimeError("x")), out, vocab_size=10, overwrite=True, progress=False)
    with pytest.raises(ValueError, match="does not fit"):
        build_index([[1, 2]] * 50 + [[1] * 100], out, vocab_size=10, max_shard_tokens=20, overwrite=True,
                    progress=False)
    assert files_of(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ix"]
    with InfiniGramIndex.open(out) as ix:
        assert ix.count([2]) == 2 and ix.num_docs == 2


def _read_only_dir(tmp_path: Path) -> Path:
    """A directory this process cannot create entries in (chmod, or /sys when running as root)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if not os.access(ro, os.W_OK):
        return ro
    ro.chmod(0o755)
    if os.path.isdir("/sys") and not os.access("/sys", os.W_OK):
        return Path("/sys")
    try:
        probe = Path("/sys") / ".infinigram-probe"
        probe.mkdir()
        probe.rmdir()
    except OSError:
        return Path("/sys")
    pytest.skip("no read-only directory available (running as root without a read-only /sys)")


def test_read_only_target_directory_gives_a_clear_error(tmp_path) -> None:
    parent = _read_only_dir(tmp_path)
    out = parent / "ix"
    try:
        with pytest.raises(OSError) as err:
            build_index([[1, 2]], out, vocab_size=5, progress=False)
        msg = str(err.value)
        assert str(out) in msg and str(parent) in msg, msg
        assert not out.exists()
    finally:
        if parent.is_relative_to(tmp_path):
            parent.chmod(0o755)
