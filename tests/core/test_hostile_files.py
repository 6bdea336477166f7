"""Hostile index directories: every file of an index (meta.json, the binary shard files,
ntdcache.bin, the document metadata) truncated at many sizes and bit-flipped at many offsets.

Each damaged copy is opened and queried in a child process (so a crash fails a test instead of
killing pytest, and a hang hits the timeout). The contract: a truncated file is refused with a
package error naming it; a flipped bit gives a package error naming the damaged file, or -- when
only content changed -- answers that may be wrong, but never a crash, a hang or a read outside the
mapped files (the sanitizer run, `make sanitize`, checks the last part). Also: the paths an index
may make us follow (shard directories, symbolic links) stay inside the index, and meta.json /
docmeta.jsonl are parsed as plain data however deep or large their values.

tests/core/test_index_files.py holds the targeted cases (each header field, each meta.json field);
this module sweeps offsets.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from infinigram_hf import IndexFormatError, InfiniGramError, InfiniGramIndex
from infinigram_hf._core import format as fmt
from infinigram_hf.build import build_index

DOCS = [[1, 2, 3, 1, 2, 4] * 5, [2, 2, 2, 2], [], [4, 3, 2, 1, 0, 1, 2] * 4, [1, 2], [3] * 9, [0, 1, 2, 3, 4] * 6,
        [299, 1, 2, 3], [5, 6, 5, 6, 5, 6, 5]]
VOCAB = 300
SHARD = fmt.shard_dir_name(1)
FILES = [fmt.META_FILE] + [f"{SHARD}/{n}" for n in fmt.SHARD_FILES + ("ntdcache.bin", fmt.DOCMETA_FILE,
                                                                     fmt.DOCMETA_INDEX_FILE)]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """Two shards, per-document metadata, an ntdcache.bin in every shard."""
    import datasets

    base = tmp_path_factory.mktemp("hostile")
    ds = datasets.Dataset.from_dict({"input_ids": DOCS, "id": [f"doc-{i}" for i in range(len(DOCS))]})
    build_index(ds, base / "ix", vocab_size=VOCAB, metadata_columns=["id"], max_shard_tokens=70,
                ntd_cache_min_cost=1, progress=False).close()
    for name in FILES:
        assert (base / "ix" / name).is_file(), name
    return base / "ix"


# A child that opens each index it is given and runs every kind of query on it; one JSON line per
# index: how it was refused, or how many calls answered / were refused.
CHILD = textwrap.dedent("""
    import json, sys
    from infinigram_hf import InfiniGramIndex, InfiniGramError, InfiniGramLM

    PROMPTS = [[], [1], [1, 2], [2, 2, 2], [4, 3, 2, 1], [0, 1, 2, 3, 4, 0], [3] * 12, [299], [5, 6, 5]]

    def calls(ix):
        for p in PROMPTS:
            yield lambda: ix.count(p)
            yield lambda: ix.find(p)
            yield lambda: ix.ngram_ntd(p)
            yield lambda: ix.infgram_ntd(p)
            yield lambda: ix.infgram_ntd(p, max_support=2)
            yield lambda: ix.infgram_prob(p, 2)
            yield lambda: ix.score(p + p)
            yield lambda: ix.positions(p, limit=20)
        yield lambda: ix.count_batch(PROMPTS, n_threads=2)
        yield lambda: ix.infgram_ntd_batch(PROMPTS, n_threads=2, max_support=3)
        yield lambda: ix.score_batch(PROMPTS, n_threads=2)
        yield lambda: ix.infgram_prob_batch(PROMPTS, [1] * len(PROMPTS))
        cache = ix.suffix_cache()
        yield lambda: [cache.ntd(p) for p in PROMPTS]
        yield lambda: ix.search_docs([[[1, 2], [5]], [[3]]], maxnum=5)
        yield lambda: ix.search_docs([[[2]], [[1]]], maxnum=5, max_diff_tokens=3)
        for d in range(min(ix.num_docs, 12)):
            yield lambda d=d: ix.get_doc(d)
        for s in range(ix.num_shards):
            for pos in range(0, 80, 7):
                yield lambda s=s, pos=pos: ix.locate(s, pos)
        lm = InfiniGramLM(ix, max_context=8, cache_entries=1024)
        for method in ("infgram", "backoff", "kn"):
            yield lambda m=method: lm.score([1, 2, 3, 1, 2], m)
            yield lambda m=method: lm.distribution([1, 2], m)
            yield lambda m=method: lm.generate([1, 2], 6, method=m, seed=1)

    for path in sys.argv[1:]:
        try:
            ix = InfiniGramIndex.open(path)
        except (InfiniGramError, ValueError) as exc:
            print(json.dumps({"path": path, "refused": type(exc).__name__, "message": str(exc)}), flush=True)
            continue
        answered = refused = 0
        it = calls(ix)
        while True:
            try:
                call = next(it)
            except StopIteration:
                break
            except (InfiniGramError, ValueError):  # building a call (e.g. the LM) refused
                refused += 1
                break
            try:
                call()
                answered += 1
            except (InfiniGramError, ValueError):
                refused += 1
        ix.close()
        print(json.dumps({"path": path, "answered": answered, "refused_calls": refused}), flush=True)
""")


def run_child(dirs: list, timeout: float = 300) -> list:
    """Outcomes of CHILD on dirs; fails the test on a crash (any exit but 0) or a hang."""
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, *map(str, dirs)], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        done = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        pytest.fail(f"queries on damaged indexes hung for {timeout} s after {len(done.splitlines())} of {len(dirs)}")
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, f"child died ({proc.returncode}) after {len(lines)} indexes:\n{proc.stderr[-3000:]}"
    assert len(lines) == len(dirs)
    return lines


def _truncations(size: int) -> list:
    return sorted({0, 1, 7, 8, 12, 16, 24, 32, 40, 63, 64, 65, 72, size // 3, size // 2, size - 9, size - 8,
                   size - 1} & set(range(size)))


def _flip_offsets(size: int, rng: random.Random) -> list:
    header = list(range(0, min(size, 64), 3))
    return sorted(set(header + [rng.randrange(size) for _ in range(14)]))


def _same_json(a: Path, b: Path) -> bool:
    try:
        return json.loads(a.read_bytes()) == json.loads(b.read_bytes())
    except ValueError:
        return False


def _variants(pristine: Path, work: Path, name: str) -> tuple:
    """Damaged copies of the index for one file: (truncated dirs, flipped dirs)."""
    data = (pristine / name).read_bytes()
    rng = random.Random(name)
    truncated, flipped = [], []
    for kind, cases in (("trunc", _truncations(len(data))), ("flip", _flip_offsets(len(data), rng))):
        for k, arg in enumerate(cases):
            dst = work / f"{name.replace('/', '_')}-{kind}{k}"
            shutil.copytree(pristine, dst)
            if kind == "trunc":
                (dst / name).write_bytes(data[:arg])
                truncated.append(dst)
            else:
                damaged = bytearray(data)
                damaged[arg] ^= 1 << rng.randrange(8)
                (dst / name).write_bytes(bytes(damaged))
                flipped.append(dst)
    return truncated, flipped


@pytest.mark.parametrize("name", FILES)
def test_truncations_and_bit_flips(pristine, tmp_path, name) -> None:
    truncated, flipped = _variants(pristine, tmp_path, name)
    base = Path(name).name
    outcomes = run_child(truncated + flipped)
    by_path = {o["path"]: o for o in outcomes}
    for d in truncated:  # a shorter file is always noticed, when opening
        o = by_path[str(d)]
        if base == fmt.META_FILE and _same_json(d / name, pristine / name):
            continue  # only the final newline went
        assert "refused" in o, f"{d.name}: truncated {base} was not refused: {o}"
        assert o["refused"] == "IndexFormatError" and base in o["message"], o
    opened = 0
    for d in flipped:
        o = by_path[str(d)]
        if "refused" in o:
            assert o["refused"] == "IndexFormatError", o
            assert base in o["message"], f"{d.name}: the error does not name {base}: {o['message']}"
        else:
            opened += 1
    # (content-only flips open and answer, possibly wrongly; the child ran every query on them)
    print(f"{name}: {len(truncated)} truncations refused, {len(flipped)} bit flips ({opened} opened)")


# ---------------------------------------------------------------------------- paths and links


def _copy(pristine: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "ix"
    shutil.copytree(pristine, dst)
    return dst


@pytest.mark.parametrize("shard_dir", ["../outside", "/tmp", "shard_00000/../../x", "shard_00001/..", "", 7, None],
                         ids=["parent", "absolute", "dotdot-inside", "shard-parent", "empty", "int", "null"])
def test_shard_directories_outside_the_index_are_refused(pristine, tmp_path, shard_dir) -> None:
    ix = _copy(pristine, tmp_path)
    meta = json.loads((ix / fmt.META_FILE).read_text())
    meta["shards"][1]["dir"] = shard_dir
    (ix / fmt.META_FILE).write_text(json.dumps(meta))
    with pytest.raises(IndexFormatError, match="meta.json"):
        InfiniGramIndex.open(ix)


def test_links_leading_outside_the_index_are_refused(pristine, tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.json"
    secret.write_text('{"token": "do not serve me"}\n')
    ix = _copy(pristine, tmp_path)
    shard = ix / SHARD
    # docmeta.jsonl -> a JSON file elsewhere, with an index of offsets made to match it: without
    # the check, get_doc would serve the file's content as document metadata
    with InfiniGramIndex.open(pristine) as ref:
        n_docs = ref._shard_info(1)[2]
    (shard / fmt.DOCMETA_FILE).unlink()
    os.symlink(secret, shard / fmt.DOCMETA_FILE)
    idx = fmt._HEADER.pack(b"IGHF-DMI", fmt.FORMAT_VERSION, 8, n_docs + 1, n_docs, 0)
    offsets = [0] * n_docs + [secret.stat().st_size]
    (shard / fmt.DOCMETA_INDEX_FILE).write_bytes(idx + b"".join(o.to_bytes(8, "little") for o in offsets))
    with pytest.raises(IndexFormatError, match="docmeta.jsonl.*outside the index"):
        InfiniGramIndex.open(ix)

    for victim in (fmt.META_FILE, f"{SHARD}/tokens.bin", SHARD):  # a file, a binary file, a whole shard
        ix = tmp_path / f"ix-{victim.replace('/', '_')}"
        shutil.copytree(pristine, ix)
        target = outside / victim.replace("/", "_")
        shutil.move(str(ix / victim), str(target))
        os.symlink(target, ix / victim)
        with pytest.raises(IndexFormatError, match="outside the index"):
            InfiniGramIndex.open(ix)


# Links that stay inside the index are no longer followed either (every file is opened without
# following links; a swapped link was a race): tests/core/test_open_hardening.py.


# ---------------------------------------------------------------------------- JSON as plain data


@pytest.mark.parametrize("content", [
    "[" * 200_000 + "]" * 200_000,                       # deeper than the parser's recursion
    '{"format": ' + "1" * 10_000 + "}",                  # an int beyond Python's digit limit
    '{"a": 1e999999}', "\ufeff{}", "{" + '"k": 1,' * 100_000 + '"k": 2}',
], ids=["deep", "huge-int", "huge-float", "bom", "many-keys"])
def test_meta_json_is_plain_data_however_hostile(pristine, tmp_path, content) -> None:
    ix = _copy(pristine, tmp_path)
    (ix / fmt.META_FILE).write_text(content, encoding="utf-8")
    with pytest.raises(IndexFormatError, match="meta.json"):
        InfiniGramIndex.open(ix)


def test_docmeta_lines_are_plain_data_however_hostile(pristine, tmp_path) -> None:
    ix = _copy(pristine, tmp_path)
    shard = ix / SHARD
    with InfiniGramIndex.open(pristine) as ref:
        n_docs = ref._shard_info(1)[2]
    lines = [b"[" * 100_000 + b"]" * 100_000 + b"\n", b'{"n": ' + b"9" * 9000 + b"}\n", b"\xff\xfe\n"]
    lines += [b"{}\n"] * (n_docs - len(lines))
    (shard / fmt.DOCMETA_FILE).write_bytes(b"".join(lines))
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    idx = fmt._HEADER.pack(b"IGHF-DMI", fmt.FORMAT_VERSION, 8, n_docs + 1, n_docs, 0)
    (shard / fmt.DOCMETA_INDEX_FILE).write_bytes(idx + b"".join(o.to_bytes(8, "little") for o in offsets))
    with InfiniGramIndex.open(ix) as opened:
        first = int(opened._shard_docs[1])
        for k in range(3):
            with pytest.raises(IndexFormatError, match="docmeta.jsonl"):
                opened.get_doc(first + k)
        assert opened.get_doc(first + 3).metadata == {}
        with pytest.raises(InfiniGramError):
            opened.get_doc(first)
