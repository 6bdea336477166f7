"""Opening an index someone else made (issue 12): crafted counts, FIFOs, hash flooding, links
swapped under an open, memory that follows what the files hold, descriptors of failed opens, and
meta.json numbers too large to use.

Every case that crashed or hung before runs in a child process (a crash fails the test instead
of killing pytest; a hang hits the child's timeout). Timeouts only catch hangs: nothing here
asserts on wall time.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from infinigram_hf import IndexFormatError, InfiniGramError, InfiniGramIndex
from infinigram_hf._core import format as fmt
from infinigram_hf.index import infinigram_index as index_module
from infinigram_hf.build import build_index

DOCS = [[1, 2, 3, 1, 2, 4] * 5, [2, 2, 2, 2], [], [4, 3, 2, 1, 0, 1, 2] * 4, [1, 2], [3] * 9,
        [0, 1, 2, 3, 4] * 6, [299, 1, 2, 3], [5, 6, 5, 6, 5, 6, 5]]
VOCAB = 300
SHARD0, SHARD1 = fmt.shard_dir_name(0), fmt.shard_dir_name(1)
META_OF = [{"id": f"doc-{i}"} for i in range(len(DOCS))]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """Two shards, per-document metadata, an ntdcache.bin in every shard."""
    import datasets

    base = tmp_path_factory.mktemp("open-hardening")
    ds = datasets.Dataset.from_dict({"input_ids": DOCS, "id": [m["id"] for m in META_OF]})
    build_index(ds, base / "ix", vocab_size=VOCAB, metadata_columns=["id"], max_shard_tokens=70,
                ntd_cache_min_cost=1, progress=False).close()
    for shard in (SHARD0, SHARD1):
        for name in fmt.SHARD_FILES + ("ntdcache.bin", fmt.DOCMETA_FILE, fmt.DOCMETA_INDEX_FILE):
            assert (base / "ix" / shard / name).is_file()
    return base / "ix"


@pytest.fixture
def ix_copy(pristine, tmp_path) -> Path:
    dst = tmp_path / "ix"
    shutil.copytree(pristine, dst)
    return dst


def run_child(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter; a hang fails the test (naming the timeout)."""
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child hung for {timeout} s")


# A child that opens an index and runs the queries that go through the first-token ranks and the
# ntd cache; prints the outcome as one JSON line.
OPEN_AND_QUERY = """
    import json, sys
    from infinigram_hf import InfiniGramIndex, InfiniGramError
    try:
        ix = InfiniGramIndex.open(sys.argv[1])
    except InfiniGramError as exc:
        print(json.dumps({"refused": type(exc).__name__, "message": str(exc)}))
        sys.exit(0)
    out = {}
    for t in range(8):
        out[f"count{t}"] = [ix.count([t, x]) for x in range(8)]
        out[f"ntd{t}"] = ix.infgram_ntd([t]).as_dict()
        out[f"prob{t}"] = float(ix.infgram_prob([t, 1], 2).prob)
    print(json.dumps({"answered": out}))
"""


def open_in_child(path: Path, timeout: float = 120) -> dict:
    proc = run_child(OPEN_AND_QUERY, str(path), timeout=timeout)
    assert proc.returncode == 0, f"the child died ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- unigram.bin counts


def _write_unigram(path: Path, pairs: list[tuple[int, int]], num_tokens: int) -> None:
    header = fmt._HEADER.pack(b"IGHF-UNI", fmt.FORMAT_VERSION, 16, len(pairs), num_tokens, 0)
    path.write_bytes(header + b"".join(struct.pack("<QQ", t, c) for t, c in pairs))


def _unigram(path: Path) -> tuple[list[tuple[int, int]], int]:
    data = path.read_bytes()
    _, _, _, count, num_tokens, _ = fmt._HEADER.unpack_from(data)
    return [struct.unpack_from("<QQ", data, 64 + 16 * i) for i in range(count)], num_tokens


@pytest.mark.parametrize("case", ["wraps-2^64", "count-above-num-tokens", "zero-then-wrap"])
def test_unigram_counts_whose_sum_wraps_are_refused(ix_copy, case) -> None:
    """Counts whose uint64 sum wraps around to num_tokens passed the sum check, and the first-token
    ranks built from them sent count([t, x]) outside the mapping (SIGSEGV)."""
    path = ix_copy / SHARD0 / "unigram.bin"
    pairs, n = _unigram(path)
    assert len(pairs) >= 3
    (t0, _), (t1, _), (t2, _) = pairs[:3]
    if case == "wraps-2^64":  # huge + (n + small): the sum is n again modulo 2^64
        forged = [(t0, 2**64 - 5), (t1, n + 5 - 1), (t2, 1)]
    elif case == "count-above-num-tokens":
        forged = [(t0, 2**63), (t1, 2**63 + n - 1), (t2, 1)]
    else:
        forged = [(t0, 1), (t1, 2**64 - 1), (t2, n)]
    _write_unigram(path, forged, n)
    outcome = open_in_child(ix_copy)
    assert outcome.get("refused") == "IndexFormatError", outcome
    assert "unigram.bin" in outcome["message"] and "count" in outcome["message"], outcome


def test_valid_unigram_still_opens(ix_copy) -> None:
    outcome = open_in_child(ix_copy)
    assert "answered" in outcome, outcome
    with InfiniGramIndex.open(ix_copy) as ix:
        assert outcome["answered"]["count1"] == [ix.count([1, x]) for x in range(8)]


# ---------------------------------------------------------------------------- FIFOs


FIFO_FILES = [fmt.META_FILE] + [f"{SHARD1}/{n}" for n in ("tokens.bin", "sa.bin", "docs.bin", "unigram.bin",
                                                          "ntdcache.bin", fmt.DOCMETA_INDEX_FILE,
                                                          fmt.DOCMETA_FILE)]


@pytest.mark.parametrize("name", FIFO_FILES)
def test_a_fifo_in_place_of_a_file_is_refused_not_waited_on(ix_copy, name) -> None:
    """Opening a FIFO for reading blocks until a writer comes; open() hung forever."""
    (ix_copy / name).unlink()
    os.mkfifo(ix_copy / name)
    outcome = open_in_child(ix_copy, timeout=60)
    assert outcome.get("refused") == "IndexFormatError", outcome
    assert Path(name).name in outcome["message"] and "not a regular file" in outcome["message"], outcome


def test_a_fifo_in_place_of_a_shard_directory_is_refused(ix_copy) -> None:
    shutil.rmtree(ix_copy / SHARD1)
    os.mkfifo(ix_copy / SHARD1)
    outcome = open_in_child(ix_copy, timeout=60)
    assert outcome.get("refused") == "IndexFormatError" and SHARD1 in outcome["message"], outcome


# ---------------------------------------------------------------------------- ntdcache.bin flooding


# The hash that placed ntdcache.bin records in an open-addressing table at open (before this
# fix): slot = ((4 lo + depth) * GOLDEN >> 20) & (slots - 1), slots = 2^k >= 2 records.
GOLDEN = 0x9E3779B97F4A7C15


def _colliding_ranks(n: int, max_lo: int) -> np.ndarray:
    """n distinct ranks below max_lo whose depth-1 keys all land in one narrow band of slots of
    the old table (linear probing then walks one cluster of n records per insertion: n^2 / 2).
    Inverting the hash: slot bits are bits 20.. of z = (4 lo + 1) * GOLDEN mod 2^(20+k), and every
    z' = (z - GOLDEN) / 4 in [0, L) gives lo = z' * GOLDEN^-1 mod 2^(18+k) -- the z of consecutive
    z' are 4 apart, so [0, L) covers L / 2^18 adjacent slots."""
    k = max(4, (2 * n - 1).bit_length())
    mod = 1 << (18 + k)
    inv = np.uint64(pow(GOLDEN, -1, mod))
    found, start, step = [], 0, 1 << 22
    while sum(len(f) for f in found) < n:
        zp = np.arange(start, start + step, dtype=np.uint64)
        lo = (zp * inv) & np.uint64(mod - 1)
        found.append(lo[lo < max_lo])
        start += step
    ranks = np.sort(np.concatenate(found)[:n])
    slots = (((ranks * np.uint64(4) + np.uint64(1)) * np.uint64(GOLDEN)) >> np.uint64(20)) & np.uint64((1 << k) - 1)
    first = (GOLDEN % (1 << (20 + k))) >> 20  # the slot of z' = 0
    band = (slots.astype(np.int64) - first) % (1 << k)
    assert band.max() <= start >> 18, "the forged keys should share a narrow band of slots"
    return ranks


def _forge_big_sparse_index(ix: Path, total_len: int) -> None:
    """One shard of total_len tokens (all id 0, then the separator) made of sparse files: opening
    reads headers only, so the size costs nothing but address space."""
    ix.mkdir()
    shard = ix / SHARD0
    shard.mkdir()
    n_tok = total_len - 1
    files = {"tokens.bin": (fmt._HEADER.pack(b"IGHF-TOK", 1, 1, total_len, 10, 1), 64 + total_len, b"\xff"),
             "sa.bin": (fmt._HEADER.pack(b"IGHF-SA\0", 1, 4, n_tok, total_len, 0), 64 + 4 * n_tok + 8, b""),
             "docs.bin": (fmt._HEADER.pack(b"IGHF-DOC", 1, 8, 2, total_len, 0) + struct.pack("<QQ", 0, total_len),
                          80, b""),
             "unigram.bin": (fmt._HEADER.pack(b"IGHF-UNI", 1, 16, 1, n_tok, 0) + struct.pack("<QQ", 0, n_tok), 80, b"")}
    for name, (head, size, last) in files.items():
        with open(shard / name, "wb") as f:
            f.write(head)
            f.truncate(size - len(last))
            f.seek(size - len(last))
            f.write(last)
    if os.stat(shard / "sa.bin").st_blocks * 512 > 1 << 26:
        pytest.skip("this filesystem has no sparse files")
    meta = {"format": fmt.FORMAT_NAME, "format_version": 1, "tokenizer_name": None, "vocab_fingerprint": None,
            "eos_token_id": None, "vocab_size": 10, "token_width": 1, "separator_id": 255, "num_tokens": n_tok,
            "num_docs": 1, "shards": [{"dir": SHARD0, "num_tokens": n_tok, "num_docs": 1, "total_len": total_len,
                                       "sa_width": 4}]}
    (ix / fmt.META_FILE).write_text(json.dumps(meta))


@pytest.mark.skipif(sys.maxsize < 2**40, reason="maps 10 GB of sparse files")
def test_ntdcache_keys_crafted_to_collide_open_in_linear_time(tmp_path) -> None:
    """2^19 ntdcache.bin records whose keys collide in the old hash table: open took minutes
    (400k: 38 s; this many about a minute), probing one cluster per record. Records are now found
    by binary search over their sorted keys, so open reads each record once whatever the keys.
    (The timeout only catches a quadratic open, as a hang; the open itself takes milliseconds.)"""
    total_len = (1 << 31) - 2  # the most a shard holds, so that enough colliding ranks exist
    ix = tmp_path / "ix"
    _forge_big_sparse_index(ix, total_len)
    n = 1 << 19
    ranks = _colliding_ranks(n, total_len - 2)
    recs = np.zeros((n, 4), dtype="<i8")
    recs[:, 0], recs[:, 1], recs[:, 2], recs[:, 3] = 1, ranks, ranks + 1, np.arange(n)
    header = fmt._HEADER.pack(b"IGHF-NTC", fmt.FORMAT_VERSION, 32, n, n, 4096)
    (ix / SHARD0 / "ntdcache.bin").write_bytes(header + recs.tobytes() + bytes(8 * n))
    code = """
        import sys
        from infinigram_hf import InfiniGramIndex
        with InfiniGramIndex.open(sys.argv[1]) as ix:
            print(ix.count([0]), ix.num_tokens)
    """
    proc = run_child(code, str(ix), timeout=30)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [str(total_len - 1)] * 2


# ---------------------------------------------------------------------------- links


def test_links_inside_the_index_are_not_followed(ix_copy, tmp_path) -> None:
    """Every file is opened relative to its directory without following links, so a link that
    stays inside the index is refused too (a check of where links lead, then an open that follows
    them, was a race: the link could be swapped in between)."""
    (ix_copy / "store").mkdir()
    shutil.move(str(ix_copy / SHARD1 / "sa.bin"), str(ix_copy / "store" / "sa.bin"))
    os.symlink(Path("..") / "store" / "sa.bin", ix_copy / SHARD1 / "sa.bin")
    with pytest.raises(IndexFormatError, match="sa.bin.*symbolic link"):
        InfiniGramIndex.open(ix_copy)


def test_the_index_directory_itself_may_be_a_link(pristine, tmp_path) -> None:
    link = tmp_path / "link-to-index"
    os.symlink(pristine, link)
    with InfiniGramIndex.open(link) as opened, InfiniGramIndex.open(pristine) as ref:
        assert opened.count([1, 2]) == ref.count([1, 2]) > 0
        assert opened.get_doc(4).metadata == ref.get_doc(4).metadata == META_OF[4]


def _swap_after_check(monkeypatch, action) -> None:
    """Run `action` right after the containment walk of open(), as a racing process could."""
    real = index_module.check_contained

    def check_then_swap(path):
        real(path)
        action()

    monkeypatch.setattr(index_module, "check_contained", check_then_swap)


@pytest.mark.parametrize("victim", [fmt.DOCMETA_FILE, fmt.DOCMETA_INDEX_FILE, "tokens.bin"])
def test_a_link_swapped_in_after_the_check_is_not_followed(ix_copy, tmp_path, monkeypatch, victim) -> None:
    """The reviewer swapped docmeta.jsonl between a file and a link to an outside file while
    opening: the outside file was served as metadata 246 times in 20 s. Here the swap lands
    deterministically between the walk and the opens."""
    outside = tmp_path / "outside"
    outside.mkdir()
    shard = ix_copy / SHARD1
    secret = outside / victim
    shutil.copy(shard / victim, secret)  # same size and shape: only the link gives it away
    if victim == fmt.DOCMETA_FILE:
        secret.write_bytes(secret.read_bytes().replace(b"doc-", b"SEC-"))

    def swap():
        (shard / victim).unlink()
        os.symlink(secret, shard / victim)

    _swap_after_check(monkeypatch, swap)
    try:
        ix = InfiniGramIndex.open(ix_copy)
    except IndexFormatError as exc:
        assert victim in str(exc) and "symbolic link" in str(exc)
        return
    with ix:
        metas = [ix.get_doc(d).metadata for d in range(ix.num_docs)]
    pytest.fail(f"opened through a link to {secret}; metadata served: {metas}")


@pytest.mark.parametrize("what", [fmt.DOCMETA_INDEX_FILE, "tokens.bin", SHARD1, "loop"])
def test_a_file_that_vanishes_or_a_link_that_loops_is_a_format_error(ix_copy, monkeypatch, what) -> None:
    """A file, link or shard directory that disappears between the walk and the opens is an
    IndexFormatError naming it, as is a link that points at itself -- never a bare
    FileNotFoundError, RuntimeError or an I/O error ("cannot open")."""
    shard = ix_copy / SHARD1
    if what == "loop":
        os.symlink("loop", shard / "loop")
    elif what == SHARD1:
        _swap_after_check(monkeypatch, lambda: shutil.rmtree(shard))
    else:
        _swap_after_check(monkeypatch, lambda: (shard / what).unlink())
    with pytest.raises(IndexFormatError, match=what):
        InfiniGramIndex.open(ix_copy)


def test_hard_linked_index_files_are_refused(ix_copy, tmp_path) -> None:
    """A file with another name somewhere else (a hard link) may be someone else's file: an index
    served to other users must not serve it. Copies are fine."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.jsonl"
    shutil.copy(ix_copy / SHARD1 / fmt.DOCMETA_FILE, secret)
    (ix_copy / SHARD1 / fmt.DOCMETA_FILE).unlink()
    os.link(secret, ix_copy / SHARD1 / fmt.DOCMETA_FILE)
    with pytest.raises(IndexFormatError, match="docmeta.jsonl.*hard link"):
        InfiniGramIndex.open(ix_copy)
    for name in ("tokens.bin", fmt.META_FILE):
        dst = ix_copy.parent / f"ix-{name}"
        shutil.copytree(ix_copy, dst)
        shutil.copy(secret, dst / SHARD1 / fmt.DOCMETA_FILE)
        os.link(dst / (f"{SHARD0}/{name}" if name != fmt.META_FILE else name), outside / f"link-{name}")
        with pytest.raises(IndexFormatError, match=f"{name}.*hard link"):
            InfiniGramIndex.open(dst)


# ---------------------------------------------------------------------------- memory at open

# Peak RSS from /proc/self/status (VmHWM: this process's own peak; ru_maxrss would start at the
# parent's, which survives fork + exec).
RSS_CHILD = """
    import json, sys
    from infinigram_hf import InfiniGramIndex, InfiniGramError
    import numpy  # (imports done: the baseline excludes them)

    def peak_kib():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])

    before = peak_kib()
    try:
        ix = InfiniGramIndex.open(sys.argv[1])
        out = {"opened": True, "count": ix.count([1, 2])}
    except InfiniGramError as exc:
        out = {"refused": type(exc).__name__, "message": str(exc)}
    out["grew_kib"] = peak_kib() - before
    print(json.dumps(out))
"""


def rss_of_open(path: Path) -> dict:
    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs /proc/self/status")
    proc = run_child(RSS_CHILD, str(path), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_sparse_docmeta_idx_is_refused_before_it_is_read(ix_copy) -> None:
    """docmeta.idx was read whole before its size was checked: a sparse 8 GiB file took 8.2 GB of
    memory and then said "holds 2 offsets, expected 2"."""
    idx = ix_copy / SHARD1 / fmt.DOCMETA_INDEX_FILE
    with open(idx, "r+b") as f:
        f.truncate(8 << 30)
    out = rss_of_open(ix_copy)
    assert out.get("refused") == "IndexFormatError", out
    assert "docmeta.idx" in out["message"] and str((8 << 30)) in out["message"], out
    assert out["grew_kib"] < 256 << 10, out  # (was 8 GiB)


def test_a_large_vocabulary_costs_memory_only_for_what_the_shards_hold(tmp_path) -> None:
    """Dense first-token ranks cost 8 bytes per vocabulary id per shard: a vocabulary of 2^24
    made an 8-shard 200 KB index take 1 GB at open."""
    docs = [[(i * 7919 + j * 104729) % (1 << 24) for j in range(50)] for i in range(200)]
    ix = build_index(docs, tmp_path / "ix", vocab_size=1 << 24, max_shard_tokens=1300, progress=False,
                     ntd_cache_min_cost=0)
    assert ix.num_shards >= 8
    want = ix.count([docs[3][0], docs[3][1]])
    ix.close()
    out = rss_of_open(tmp_path / "ix")
    assert out.get("opened"), out
    assert out["grew_kib"] < 64 << 10, out  # (was 8 x 128 MiB)
    with InfiniGramIndex.open(tmp_path / "ix") as again:  # and the ranks still answer exactly
        assert again.count([docs[3][0], docs[3][1]]) == want >= 1
        assert again.count([docs[3][0]]) == sum(d.count(docs[3][0]) for d in docs)


# ---------------------------------------------------------------------------- descriptors


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("damage", ["docmeta", "tokens"])
def test_failed_opens_leak_no_descriptors(ix_copy, damage) -> None:
    """Shard 1 fails to open after shard 0 opened its files: 1,000 failed opens leaked 1,000 fds."""
    if damage == "docmeta":
        (ix_copy / SHARD1 / fmt.DOCMETA_INDEX_FILE).write_bytes(b"garbage")
    else:
        (ix_copy / SHARD1 / "tokens.bin").write_bytes(b"garbage")
    before = _open_fds()
    for _ in range(200):
        with pytest.raises(IndexFormatError):
            InfiniGramIndex.open(ix_copy)
    assert _open_fds() - before < 5


# ---------------------------------------------------------------------------- meta.json numbers


def _edit_meta(ix: Path, **changes) -> None:
    meta = json.loads((ix / fmt.META_FILE).read_text())
    meta.update(changes)
    (ix / fmt.META_FILE).write_text(json.dumps(meta))


@pytest.mark.parametrize("value", [2**80, -1, 2**32 - 1, 1.5, "2", True])
def test_eos_token_id_must_be_a_token_id(ix_copy, value) -> None:
    """eos_token_id = 2**80 opened, and later became an OverflowError far from meta.json."""
    _edit_meta(ix_copy, eos_token_id=value)
    with pytest.raises(IndexFormatError, match="meta.json.*eos_token_id"):
        InfiniGramIndex.open(ix_copy)


@pytest.mark.parametrize("key", ["format_version", "vocab_size", "num_tokens", "num_docs", "eos_token_id",
                                 "token_width", "separator_id"])
def test_errors_never_echo_a_huge_number_from_meta_json(ix_copy, key) -> None:
    """Python parses integers of up to 4,300 digits; the error printed all of them."""
    _edit_meta(ix_copy, **{key: int("7" * 4000)})
    with pytest.raises(IndexFormatError, match="meta.json") as err:
        InfiniGramIndex.open(ix_copy)
    assert len(str(err.value)) < 600 and "7" * 100 not in str(err.value), str(err.value)[:300]


def test_errors_never_echo_long_or_control_text_from_meta_json(ix_copy) -> None:
    _edit_meta(ix_copy, format="\x1b]0;pwned\x07\x1b[2J" + "x" * 100_000)
    with pytest.raises(IndexFormatError, match="meta.json") as err:
        InfiniGramIndex.open(ix_copy)
    msg = str(err.value)
    assert len(msg) < 600 and "\x1b" not in msg and "\x07" not in msg, msg[:300]


def test_valid_meta_numbers_still_open(ix_copy) -> None:
    _edit_meta(ix_copy, eos_token_id=VOCAB - 1)
    with InfiniGramIndex.open(ix_copy) as ix:
        assert ix.eos_token_id == VOCAB - 1
    _edit_meta(ix_copy, eos_token_id=None)
    with InfiniGramIndex.open(ix_copy) as ix:
        assert ix.eos_token_id is None
