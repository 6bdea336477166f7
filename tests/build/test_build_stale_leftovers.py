"""What a build does with the hidden `.<name>.tmp-/.old-/.journal-<pid>-<hex>` entries next to
out_dir: it cleans up after its own killed builds (and puts back an index a killed two-rename
publish had moved aside, as its journal says), and leaves everything else alone -- a name that
only looks like a build's never breaks a build and is never adopted as the index."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from infinigram_hf import InfiniGramIndex
from infinigram_hf.build import build_index


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def build(out, docs=([1, 2, 3], [2, 3]), **kw):
    kw.setdefault("progress", False)
    return build_index(list(docs), out, vocab_size=10, **kw)


def test_a_stale_name_with_an_impossible_pid_does_not_break_builds(tmp_path) -> None:
    odd = tmp_path / ".ix.tmp-99999999999999999999-abcdef01"
    odd.mkdir()
    (odd / "file").write_text("not ours")
    big = tmp_path / ".ix.tmp-9999999999-abcdef01"  # fits the name pattern, above any pid_max
    big.mkdir()
    with build(tmp_path / "ix") as ix:
        assert ix.count([2, 3]) == 2
    with build(tmp_path / "ix", overwrite=True) as ix:
        assert ix.count([2, 3]) == 2
    assert (odd / "file").read_text() == "not ours" and big.is_dir()


def test_a_planted_old_directory_is_never_adopted_as_the_index(tmp_path) -> None:
    # A whole, valid index under a dead process's ".old" name, without a journal naming it.
    planted_src = tmp_path / "elsewhere"
    build(planted_src, docs=[[7, 7, 7]]).close()
    planted = tmp_path / f".ix.old-{dead_pid()}-abcdef01"
    os.rename(planted_src, planted)
    before = tree(planted)
    with build(tmp_path / "ix") as ix:  # no FileExistsError: nothing was moved to ix
        assert ix.count([7]) == 0 and ix.count([2, 3]) == 2
    assert tree(planted) == before


def test_a_dead_processes_temp_dir_that_is_not_a_build_is_left_alone(tmp_path) -> None:
    pid = dead_pid()
    foreign = tmp_path / f".ix.tmp-{pid}-abcdef01"
    foreign.mkdir()
    (foreign / "photos.zip").write_bytes(b"PK")
    link = tmp_path / f".ix.tmp-{pid}-abcdef02"
    link.symlink_to(foreign)
    empty = tmp_path / f".ix.tmp-{pid}-abcdef03"  # a build killed right after mkdir: removed
    empty.mkdir()
    build(tmp_path / "ix").close()
    assert (foreign / "photos.zip").read_bytes() == b"PK" and link.is_symlink()
    assert not empty.exists()


# A child that builds with the two-rename publish (as on filesystems without RENAME_EXCHANGE)
# and is killed right after moving the old index aside, before the new one is in place.
KILLED_BETWEEN_RENAMES = textwrap.dedent("""
    import os, signal, sys
    from infinigram_hf.build import publish as _publish
    from infinigram_hf.build import build_index

    _publish.exchange = lambda a, b: False
    real_rename = os.rename

    def rename(a, b):
        real_rename(a, b)
        if ".old-" in os.fspath(b):
            os.kill(os.getpid(), signal.SIGKILL)

    _publish.os.rename = rename
    build_index([[4, 4, 4]], sys.argv[1], vocab_size=10, overwrite=True, progress=False)
""")


def test_an_index_moved_aside_by_a_killed_publish_is_put_back(tmp_path) -> None:
    out = tmp_path / "ix"
    build(out).close()
    before = tree(out)
    script = tmp_path.parent / f"{tmp_path.name}-child.py"
    script.write_text(KILLED_BETWEEN_RENAMES)
    try:
        rc = subprocess.run([sys.executable, str(script), str(out)], timeout=120).returncode
    finally:
        script.unlink()
    assert rc == -signal.SIGKILL
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "ix" not in names and any(".ix.old-" in n for n in names) and any(".ix.journal-" in n for n in names)
    journal = next(p for p in tmp_path.iterdir() if ".journal-" in p.name)
    assert json.loads(journal.read_text())["old"].startswith(".ix.old-")
    # The next build (of anything into ix) puts the old index back first, then refuses to replace it.
    with pytest.raises(FileExistsError, match="already exists"):
        build(out, docs=[[5]])
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ix"]  # journal and the dead build's tmp gone
    with InfiniGramIndex.open(out) as ix:
        assert ix.count([2, 3]) == 2


def test_a_journal_after_the_new_index_landed_removes_the_old_one(tmp_path) -> None:
    out = tmp_path / "ix"
    build(out, docs=[[6, 6]]).close()
    pid = dead_pid()
    old = tmp_path / f".ix.old-{pid}-abcdef01"
    build(tmp_path / "prev").close()
    os.rename(tmp_path / "prev", old)
    (tmp_path / f".ix.journal-{pid}-abcdef01").write_text(json.dumps({"old": old.name}))
    with build(out, docs=[[8]], overwrite=True) as ix:
        assert ix.count([8]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ix"]


def test_a_journal_naming_another_target_is_dropped_without_touching_it(tmp_path) -> None:
    pid = dead_pid()
    other = tmp_path / f".other.old-{pid}-abcdef01"
    other.mkdir()
    (other / "x").write_text("keep")
    (tmp_path / f".ix.journal-{pid}-abcdef01").write_text(json.dumps({"old": other.name}))
    build(tmp_path / "ix").close()
    assert (other / "x").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, "ix"]
