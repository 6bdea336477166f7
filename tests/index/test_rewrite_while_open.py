"""Index files rewritten while an index is open (issue 12).

An open index memory-maps its files. The package's own rebuilds never write into a file that a
reader may have mapped: build_index writes a new directory and swaps it in (the old files stay
intact for whoever has them open), and every writer creates its files new (an old file of that
name is unlinked, never truncated). What remains inherent to memory mapping: a file rewritten in
place by something else (``shutil.copyfile``, ``cp`` or an editor over ``tokens.bin``) changes
under the reader, and a shortened one kills it with SIGBUS -- documented in RELIABILITY.md and
docs/FORMAT.md, and shown by the last test here. Readers run in child processes.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from infinigram_hf import InfiniGramIndex
from infinigram_hf._core import format as fmt
from infinigram_hf.build.shard_writer import ShardWriter
from infinigram_hf.build import build_index

CORPUS_A = [[1, 2, 3, 1, 2, 4] * 20, [2, 2, 2, 2] * 5, [4, 3, 2, 1, 0, 1, 2] * 12, [5, 6] * 30]
CORPUS_B = [[7, 8, 9] * 40, [1, 1, 1], [9, 8, 7, 6] * 15]
PROMPTS = [[1], [1, 2], [2, 2], [4, 3, 2], [7, 8], [5, 6, 5], [9]]

# A reader in a child: opens the index, answers, waits for a line on stdin (the parent rewrites
# meanwhile), answers again from the same open index.
READER = textwrap.dedent("""
    import json, sys
    from infinigram_hf import InfiniGramIndex
    prompts = json.loads(sys.argv[2])
    ix = InfiniGramIndex.open(sys.argv[1])
    def answers():
        return {"counts": [ix.count(p) for p in prompts],
                "ntd": [ix.infgram_ntd(p).as_dict() for p in prompts],
                "docs": [[ix.get_doc(d).token_ids.tolist(), ix.get_doc(d).metadata] for d in range(ix.num_docs)]}
    print(json.dumps(answers()), flush=True)
    sys.stdin.readline()
    print(json.dumps(answers()), flush=True)
""")


def _build(docs: list, out: Path, max_shard_tokens: int = 200, **kw) -> None:
    import datasets

    ds = datasets.Dataset.from_dict({"input_ids": docs, "tag": [f"t{i}" for i in range(len(docs))]})
    build_index(ds, out, vocab_size=20, metadata_columns=["tag"], max_shard_tokens=max_shard_tokens, ntd_cache_min_cost=1,
                progress=False, **kw).close()


def test_a_rebuild_over_an_open_index_leaves_the_open_one_answering(tmp_path) -> None:
    ix = tmp_path / "ix"
    _build(CORPUS_A, ix)
    reader = subprocess.Popen([sys.executable, "-c", READER, str(ix), json.dumps(PROMPTS)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        before = json.loads(reader.stdout.readline() or "null")
        assert before is not None, reader.stderr.read()[-3000:]
        for corpus in (CORPUS_B, CORPUS_A, CORPUS_B):  # rebuilt in place three times
            _build(corpus, ix, overwrite=True)
        out, err = reader.communicate("go\n", timeout=120)
    finally:
        if reader.poll() is None:
            reader.kill()
    assert reader.returncode == 0, f"the reader died ({reader.returncode}):\n{err[-3000:]}"
    assert json.loads(out.strip().splitlines()[-1]) == before
    with InfiniGramIndex.open(ix) as now:  # and the new index is the last build
        assert now.num_docs == len(CORPUS_B) and now.count([7, 8, 9]) == 40


def test_writers_create_new_files_and_never_write_into_existing_ones(tmp_path) -> None:
    """Every writer of index files (the C shard writer and its ntd cache, the document metadata,
    meta.json) into a directory whose files are other names of an open index's files (hard
    links): the index's files keep their bytes. Writing into them (O_TRUNC) would change -- or,
    shortened, SIGBUS -- every process that has them mapped."""
    ix = tmp_path / "ix"
    _build(CORPUS_A, ix)
    shard = ix / fmt.shard_dir_name(0)
    names = sorted(p.name for p in shard.iterdir())
    assert {"tokens.bin", "sa.bin", "ntdcache.bin", fmt.DOCMETA_FILE, fmt.DOCMETA_INDEX_FILE} <= set(names)
    saved = {n: (shard / n).read_bytes() for n in names}
    saved_meta = (ix / fmt.META_FILE).read_bytes()
    target = tmp_path / "other"
    (target / "shard").mkdir(parents=True)
    for n in names:
        os.link(shard / n, target / "shard" / n)
    os.link(ix / fmt.META_FILE, target / fmt.META_FILE)

    w = ShardWriter(target / "shard", 1, 20, ntd_cache_min_cost=1)
    ids = np.array([9, 9, 8, 9, 9, 8, 7], dtype=np.uint8)
    w.add(ids, np.array([0, 4, 7]))
    w.finish()
    meta_writer = fmt.DocMetaWriter(target / "shard")
    meta_writer.add({"new": 1})
    meta_writer.add({"new": 2})
    meta_writer.close()
    fmt.write_meta(target, {"format": "something else"})

    for n in names:
        assert (shard / n).read_bytes() == saved[n], f"{n} of the open index was written into"
        assert os.stat(shard / n).st_nlink == 1, f"{n}: the writer wrote through the link"
    assert (ix / fmt.META_FILE).read_bytes() == saved_meta
    with InfiniGramIndex.open(ix) as again:
        assert again.count([1, 2]) > 0


@pytest.mark.skipif(not hasattr(signal, "SIGBUS"), reason="needs SIGBUS")
def test_a_file_shortened_in_place_under_an_open_index_is_sigbus(tmp_path) -> None:
    """The inherent case (documented): something other than this package truncates or rewrites a
    mapped file in place. The kernel then delivers SIGBUS on the next read of a page past the new
    end; no check at open can prevent it. Replace index files atomically (a new file renamed over
    the old one, or a new directory) and readers keep the old files."""
    ix = tmp_path / "ix"
    _build([[1, 2, 3] * 50] * 60, ix, max_shard_tokens=20_000)  # tokens.bin spans 3 pages
    # under ASan the report must reach stderr, not tools/sanitize.sh's log files
    env = {**os.environ, "ASAN_OPTIONS": re.sub(r":?log_path=[^:]*", "", os.environ.get("ASAN_OPTIONS", ""))}
    reader = subprocess.Popen([sys.executable, "-c", READER, str(ix), json.dumps([[1, 2]])], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert reader.stdout.readline(), reader.stderr.read()[-3000:]
        with open(ix / fmt.shard_dir_name(0) / "tokens.bin", "r+b") as f:  # what cp / copyfile do first
            f.truncate(64)
        _, err = reader.communicate("go\n", timeout=120)
    finally:
        if reader.poll() is None:
            reader.kill()
    # (under AddressSanitizer, `make sanitize`, its handler reports the SIGBUS and aborts)
    assert reader.returncode == -signal.SIGBUS or (reader.returncode == -signal.SIGABRT and "BUS" in err), err[-2000:]

    # the same replacement done atomically: the reader keeps its files
    _build([[1, 2, 3] * 50] * 60, tmp_path / "ix2", max_shard_tokens=20_000)
    reader = subprocess.Popen([sys.executable, "-c", READER, str(tmp_path / "ix2"), json.dumps([[1, 2]])],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        before = reader.stdout.readline()
        tokens = tmp_path / "ix2" / fmt.shard_dir_name(0) / "tokens.bin"
        shutil.copyfile(tokens, tokens.with_suffix(".new"))
        os.replace(tokens.with_suffix(".new"), tokens)
        out, _ = reader.communicate("go\n", timeout=120)
    finally:
        if reader.poll() is None:
            reader.kill()
    assert reader.returncode == 0 and out.strip().splitlines()[-1] == before.strip()
