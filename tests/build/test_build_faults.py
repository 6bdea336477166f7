"""Atomic publishing: a build that is killed, fails, or runs out of disk space leaves nothing at
out_dir, never damages an index it was to replace, and the next build cleans up after it."""
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


# ---------------------------------------------------------------------------- out of disk space

# Runs in a child: a small index first, then a corpus too big for the room the filesystem (a
# small tmpfs it mounts: ENOSPC) or the file-size limit (RLIMIT_FSIZE: EFBIG) leaves, as a
# rebuild over the small index and as a new index; then the room is made and the build reruns.
DISK_FULL = textwrap.dedent("""
    import os, resource, signal, subprocess, sys
    from pathlib import Path
    import numpy as np
    from infinigram_hf import InfiniGramIndex, InfiniGramError
    from infinigram_hf.build import build_index

    mode, root = sys.argv[1], Path(sys.argv[2])
    big = [np.random.default_rng(d).integers(0, 50000, size=3000) for d in range(500)]  # 1.5M tokens, ~8 MB
    small = [[1, 2, 3], [3, 2, 1]]
    if mode == "tmpfs":
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(root)], capture_output=True, text=True)
        if r.returncode:
            print("cannot mount a tmpfs:", r.stderr.strip() or r.returncode, flush=True)
            sys.exit(77)
        expected = "No space left on device"
    else:
        expected = "File too large"

    def files(path):
        return {p.relative_to(path): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}

    try:
        build_index(small, root / "ix", vocab_size=50000, progress=False).close()
        before = files(root / "ix")
        if mode == "fsize":
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
            hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
            resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, hard))
        for target, overwrite in ((root / "ix", True), (root / "new", False)):
            try:
                build_index(big, target, vocab_size=50000, overwrite=overwrite, progress=False)
            except (InfiniGramError, OSError) as exc:
                msg = str(exc)
                assert expected in msg, f"unclear error: {type(exc).__name__}: {msg}"
                print("error:", type(exc).__name__, msg, flush=True)
            else:
                raise AssertionError(f"building {target} did not run out of room")
            assert sorted(p.name for p in root.iterdir()) == ["ix"], sorted(p.name for p in root.iterdir())
            assert files(root / "ix") == before, "the existing index was changed"
            with InfiniGramIndex.open(root / "ix") as ix:
                assert ix.count([2]) == 2
        # with room again, the same build succeeds over the old index
        if mode == "tmpfs":
            subprocess.run(["mount", "-o", "remount,size=64m", str(root)], check=True)
        else:
            resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        with build_index(big, root / "ix", vocab_size=50000, overwrite=True, progress=False) as ix:
            assert ix.num_tokens == 1_500_000 and ix.count(big[7][:5].tolist()) >= 1
        assert sorted(p.name for p in root.iterdir()) == ["ix"]
        print("rerun: ok", flush=True)
    finally:
        if mode == "tmpfs":
            subprocess.run(["umount", "-l", str(root)])
""")


def _run_disk_full(tmp_path: Path, mode: str, prefix: list) -> subprocess.CompletedProcess:
    (tmp_path / "disk_full.py").write_text(DISK_FULL)
    root = tmp_path / "fs"
    root.mkdir()
    return subprocess.run(prefix + [sys.executable, str(tmp_path / "disk_full.py"), mode, str(root)],
                          capture_output=True, text=True, timeout=300)


def _mount_prefix() -> tuple[list, str]:
    """How to run a child that may mount a tmpfs: in a mount namespace of its own (unshare -m as
    root, unshare -rm with a user namespace otherwise: the mount goes away with the child even
    if it is killed), as root directly, or not at all (None and why)."""
    unshare = shutil.which("unshare")
    for prefix in (["-m"], ["-rm"]) if unshare else ():
        if (os.geteuid() == 0) == (prefix == ["-m"]) and \
                subprocess.run([unshare, *prefix, "true"], capture_output=True).returncode == 0:
            return [unshare, *prefix], ""
    if os.geteuid() == 0:
        return [], ""
    return None, "not root, and unshare -rm (user namespaces) is not available"


def test_out_of_disk_space_on_a_small_tmpfs(tmp_path) -> None:
    """ENOSPC from a 2 MiB tmpfs the test mounts: a clear error, nothing at the target, the old
    index untouched, no temp files; after a remount with room the rerun succeeds."""
    prefix, why = _mount_prefix()
    if prefix is None:
        pytest.skip(f"cannot mount a tmpfs here ({why}); test_out_of_disk_space_file_size_limit covers the path")
    r = _run_disk_full(tmp_path, "tmpfs", prefix)
    if r.returncode == 77:
        pytest.skip(f"{r.stdout.strip()} (no mount permission here); the file-size-limit test covers the path")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("No space left on device") == 2 and "rerun: ok" in r.stdout, r.stdout


def test_out_of_disk_space_file_size_limit(tmp_path) -> None:
    """The same with writes failing EFBIG past RLIMIT_FSIZE (1 MiB): works without privileges."""
    r = _run_disk_full(tmp_path, "fsize", [])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("File too large") == 2 and "rerun: ok" in r.stdout, r.stdout
