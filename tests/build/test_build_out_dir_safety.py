"""build_index(..., overwrite=True) and `infinigram-hf build --overwrite` only ever replace an
index: a directory of other files, the current directory or one above it, the corpus itself, a
symbolic link or a plain file at out_dir is refused with an error saying why, and nothing is
touched (no hidden temp directory left either). An empty directory is a fine out_dir."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from infinigram_hf import InfiniGramIndex
from infinigram_hf.build import atomic as _atomic
from infinigram_hf.build import build_index
from infinigram_hf.cli import main

DOCS = [[1, 2, 3], [2, 3]]


def snapshot(root: Path) -> dict:
    """Every entry under root (links not followed): relative path -> bytes, link target or 'dir'."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = p.read_bytes()
    return out


def user_dir(path: Path) -> Path:
    path.mkdir()
    (path / "thesis.tex").write_text("\\documentclass{article} years of work")
    (path / "sub").mkdir()
    (path / "sub" / "data.csv").write_text("a,b\n1,2\n")
    return path


def build(out, **kw):
    kw.setdefault("progress", False)
    return build_index(DOCS, out, vocab_size=10, **kw)


def test_overwrite_refuses_a_directory_that_is_not_an_index(tmp_path) -> None:
    target = user_dir(tmp_path / "work")
    before = snapshot(tmp_path)
    with pytest.raises(FileExistsError, match="has no meta.json of an infinigram_hf index.*nothing was changed"):
        build(target, overwrite=True)
    assert snapshot(tmp_path) == before
    with pytest.raises(FileExistsError, match="is not|has no meta.json"):
        build(target)
    assert snapshot(tmp_path) == before


def test_overwrite_refuses_an_index_holding_other_files(tmp_path) -> None:
    ix = tmp_path / "ix"
    build(ix).close()
    (ix / "notes.txt").write_text("mine")
    before = snapshot(tmp_path)
    with pytest.raises(FileExistsError, match="'notes.txt', which is not part of an index"):
        build(ix, overwrite=True)
    (ix / "notes.txt").unlink()
    (ix / "shard_00000" / "keep.me").write_text("mine")
    with pytest.raises(FileExistsError, match="keep.me"):
        build(ix, overwrite=True)
    (ix / "notes.txt").write_text("mine")
    (ix / "shard_00000" / "keep.me").unlink()
    assert snapshot(tmp_path) == before


def test_overwrite_refuses_a_meta_json_without_the_format_marker(tmp_path) -> None:
    target = tmp_path / "looks"
    target.mkdir()
    (target / "meta.json").write_text('{"format": "something-else", "shards": []}')
    before = snapshot(tmp_path)
    with pytest.raises(FileExistsError, match="has no meta.json of an infinigram_hf index"):
        build(target, overwrite=True)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("out_dir", [".", "", "./", "sub/.."])
def test_the_current_directory_is_never_out_dir(tmp_path, monkeypatch, out_dir) -> None:
    cwd = user_dir(tmp_path / "cwd")
    monkeypatch.chdir(cwd)
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match="current directory|is empty"):
        build(out_dir, overwrite=True)
    assert snapshot(tmp_path) == before


def test_a_directory_above_the_current_one_is_never_out_dir(tmp_path, monkeypatch) -> None:
    top = user_dir(tmp_path / "top")
    (top / "sub" / "deeper").mkdir()
    monkeypatch.chdir(top / "sub" / "deeper")
    before = snapshot(tmp_path)
    for out_dir in (top, "..", "../..", top / "sub"):
        with pytest.raises(ValueError, match="above the current one"):
            build(out_dir, overwrite=True)
    assert snapshot(tmp_path) == before


def test_the_corpus_is_never_out_dir(tmp_path, monkeypatch) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("the cat sat on the mat")
    (corpus / "b.txt").write_text("the dog")
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match="holds the source"):
        build_index("corpus", "corpus", overwrite=True, progress=False)
    with pytest.raises(ValueError, match="holds the source"):
        build_index([corpus / "a.txt"], corpus, overwrite=True, progress=False)
    with pytest.raises(ValueError, match="inside the source directory"):
        build_index("corpus", "corpus/ix", overwrite=True, progress=False)
    with pytest.raises(ValueError, match="holds the source"):
        build_index(corpus / "a.txt", corpus, progress=False)
    assert snapshot(tmp_path) == before


def test_the_corpus_is_never_out_dir_even_when_it_is_an_index(tmp_path) -> None:
    """A corpus directory that happens to be an index (its docmeta.jsonl read as JSON lines)."""
    ix = tmp_path / "ix"
    build_index(["x"], ix, progress=False).close()
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match="holds the source"):
        build_index(ix, ix, overwrite=True, progress=False)
    assert snapshot(tmp_path) == before


def test_a_symbolic_link_at_out_dir_is_refused_without_leftovers(tmp_path) -> None:
    real = tmp_path / "real_ix"
    build(real).close()
    for target in (real, user_dir(tmp_path / "mine"), tmp_path / "missing"):
        link = tmp_path / "link"
        link.symlink_to(target)
        before = snapshot(tmp_path)
        for overwrite in (True, False):
            with pytest.raises(FileExistsError, match="symbolic link"):
                build(link, overwrite=overwrite)
            assert snapshot(tmp_path) == before  # no ".link.tmp-..." left behind
        link.unlink()


def test_a_plain_file_at_out_dir_is_refused_without_leftovers(tmp_path) -> None:
    f = tmp_path / "ix"
    f.write_text("precious")
    before = snapshot(tmp_path)
    for overwrite in (True, False):
        with pytest.raises(FileExistsError, match="is a file, not an index directory"):
            build(f, overwrite=overwrite)
        assert snapshot(tmp_path) == before


def test_an_empty_directory_is_a_fine_out_dir(tmp_path) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    with build(out) as ix:
        assert ix.count([2, 3]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


def test_overwrite_still_replaces_an_index(tmp_path) -> None:
    ix = tmp_path / "ix"
    build(ix).close()
    with build_index([[4, 4]], ix, vocab_size=10, overwrite=True, progress=False) as new:
        assert new.count([4]) == 2 and new.count([2]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ix"]


@pytest.mark.parametrize("swap", [True, False], ids=["exchange", "two-renames"])
def test_what_appears_at_out_dir_during_the_build_is_not_replaced(tmp_path, monkeypatch, swap) -> None:
    """The check is made again on what is really swapped out at publish time."""
    ix = tmp_path / "ix"
    build(ix).close()
    if not swap:
        monkeypatch.setattr(_atomic, "_function", lambda: None)
        monkeypatch.setattr("infinigram_hf.build.publish.exchange", lambda a, b: False)

    def docs():
        yield [1, 2]
        os.rename(ix, tmp_path / "moved")
        user_dir(ix)

    with pytest.raises(FileExistsError, match="has no meta.json"):
        build_index(docs(), ix, vocab_size=10, overwrite=True, progress=False)
    assert (ix / "thesis.tex").read_text().endswith("years of work")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ix", "moved"]


def test_the_swapped_out_entry_is_checked_and_put_back(tmp_path, monkeypatch) -> None:
    """Between the last check and the swap, out_dir is replaced by a user's directory: the swap
    is undone and the user's directory is where it was."""
    from infinigram_hf.build import publish as _publish

    ix = tmp_path / "ix"
    build(ix).close()
    real_exchange = _publish.exchange
    calls = []

    def racing_exchange(a, b):
        if not calls:
            os.rename(ix, tmp_path / "moved")
            user_dir(ix)
        calls.append((a, b))
        return real_exchange(a, b)

    monkeypatch.setattr(_publish, "exchange", racing_exchange)
    with pytest.raises(FileExistsError, match="changed while building"):
        build(ix, overwrite=True)
    assert len(calls) == 2 and (ix / "thesis.tex").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ix", "moved"]


# ---------------------------------------------------------------------------- the CLI


def test_cli_overwrite_refuses_a_directory_of_other_files(tmp_path, capsys) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat")
    target = user_dir(tmp_path / "work")
    before = snapshot(tmp_path)
    assert main(["build", str(corpus), "--out", str(target), "--overwrite", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "has no meta.json of an infinigram_hf index" in err and "--overwrite only replaces an index" in err
    assert snapshot(tmp_path) == before
    assert main(["build", str(tmp_path), "--out", str(tmp_path / "work2"), "--quiet"]) == 2
    assert "inside the source directory" in capsys.readouterr().err
    assert snapshot(tmp_path) == before


def test_cli_overwrite_replaces_an_index(tmp_path, capsys) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat")
    out = tmp_path / "ix"
    assert main(["build", str(corpus), "--out", str(out), "--quiet"]) == 0
    assert main(["build", str(corpus), "--out", str(out), "--quiet"]) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert main(["build", str(corpus), "--out", str(out), "--overwrite", "--quiet"]) == 0
    with InfiniGramIndex.open(out) as ix:
        assert ix.count(list(b"cat")) == 1
