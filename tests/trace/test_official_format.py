"""attribute(), creativity() and trace() on indexes in the official infini-gram layout, read in
place: against brute force (documents, metadata and windows included), against the official
engine's own answers on the same directories, and through the CLI.

Indexes: tests/official/data (built by the official indexer: u8 one shard; u16 three shards with
metadata), official layouts written by our writer (u8 / u16 / u32, 1-3 shards; the official
indexer cannot build u32 on this machine), a union of an official index with one of ours, and our
HF test index converted to the official layout (a real BPE tokenizer). The official answers are
in fixtures/official_format_trace.json (eval/official_format_trace_fixtures.py runs infini-gram
2.6.0 on the tests/official/data directories). Where they differ from ours, ours equals brute
force and the official one is its rank-0 miss (ATTRIBUTE_OFFICIAL notes: a match whose query sorts
before every suffix of a shard is not found), which only ever loses matches.
"""
from __future__ import annotations

import bisect
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from infinigram_hf import InfiniGramIndex, trace
from infinigram_hf.build import build_index
from infinigram_hf.build.convert import ours_to_official
from infinigram_hf.build.official_writer import SEPARATORS, write_official_index
from infinigram_hf.cli import main as cli_main
from infinigram_hf.tracing import word_start_ids

from attribution_reference import ref_attribute, ref_match_len
from conftest import Reference
from hf_tiny import TEXTS, tiny_index, tiny_tok  # noqa: F401

DATA = Path(__file__).resolve().parents[1] / "official" / "data"
RECORDED = json.loads((Path(__file__).parent / "fixtures" / "official_format_trace.json").read_text())
DTYPES = {1: "<u1", 2: "<u2", 4: "<u4"}


def parse_official(path: Path, width: int) -> list:
    """Documents of every shard, read from the token files alone (a separator before each)."""
    shards = []
    for s in range(len(list(path.glob("tokenized.*")))):
        stream = np.fromfile(path / f"tokenized.{s}", dtype=DTYPES[width]).astype(np.int64)
        cuts = np.flatnonzero(stream == SEPARATORS[width]).tolist() + [len(stream)]
        shards.append([stream[a + 1:b].tolist() for a, b in zip(cuts, cuts[1:])])
    return shards


def check_against_brute(index, shards: list, texts: list, param_sets: list, context: int = 2) -> None:
    """creativity and attribute (spans, counts, unigram sums, every occurrence with its window)
    of every text under every parameter set, from scratch over the documents."""
    docs = [d for sh in shards for d in sh]
    first_doc = np.cumsum([0] + [len(sh) for sh in shards]).tolist()
    ref = Reference(docs, index.vocab_size)
    uni, total = ref.unigram(), ref.num_tokens + ref.num_docs
    for x, c in zip(texts, index.creativity_batch(texts)):
        assert c.match_len.tolist() == ref_match_len(ref, x), x
    for p in param_sets:
        for x, got in zip(texts, index.attribute_batch(texts, max_docs=10**6, context=context, **p)):
            want = ref_attribute(ref, x, p["min_len"], p["max_count"], set(p["delimiters"] or ()),
                                 None if p["word_starts"] is None else set(p["word_starts"]))
            assert [(s.start, s.end, s.count) for s in got.spans] == want, (x, p)
            for s in got.spans:
                span = x[s.start:s.end]
                assert math.isclose(s.unigram_logprob_sum, sum(math.log(uni[t] / total) for t in span), rel_tol=1e-9)
                assert sorted((d.doc_id, d.offset) for d in s.docs) == sorted(ref.occurrences(span))
                assert [d.shard for d in s.docs] == sorted(d.shard for d in s.docs)
                for d in s.docs:
                    assert first_doc[d.shard] <= d.doc_id < first_doc[d.shard + 1]
                    doc = docs[d.doc_id]
                    assert d.window.tolist() == doc[max(d.offset - context, 0):d.offset + len(span) + context]


def _params(rec: dict) -> dict:
    return dict(min_len=rec["min_len"], max_count=rec["max_cnt"], delimiters=rec["delim_ids"] or None)


@pytest.mark.parametrize("name", sorted(RECORDED["indexes"]))
def test_official_indexer_fixtures_equal_brute_force_and_the_official_engine(name: str) -> None:
    rec = RECORDED["indexes"][name]
    width, bow = rec["token_width"], rec["bow_ids"]
    shards = parse_official(DATA / name, width)
    docs = [d for sh in shards for d in sh]
    first_doc = np.cumsum([0] + [len(sh) for sh in shards]).tolist()
    seps = [np.cumsum([0] + [len(d) + 1 for d in sh]).tolist() for sh in shards]  # token position of each separator
    ref = Reference(docs, rec["vocab_size"])
    texts = [c["input_ids"] for c in rec["cases"]]
    param_sets = [dict(_params(r["params"]), word_starts=bow if r["params"]["enforce_bow"] else None)
                  for r in rec["cases"][0]["attribute"]]
    with InfiniGramIndex.open(DATA / name, vocab_size=rec["vocab_size"]) as index:
        assert index.token_width == width and index.num_shards == len(shards)
        check_against_brute(index, shards, texts, param_sets)
        same = differ = 0
        for case in rec["cases"]:
            x = case["input_ids"]
            rs = index.creativity(x).rs.tolist()
            if rs != case["creativity"]:  # only the official miss: it finds less, never more
                differ += 1
                assert all(o <= g for o, g in zip(case["creativity"], rs)), (x, rs, case["creativity"])
            else:
                same += 1
            for run in case["attribute"]:
                p = run["params"]
                got = index.attribute(x, max_docs=10**6, context=None,
                                      word_starts=bow if p["enforce_bow"] else None, **_params(p))
                mine = [(s.start, s.end, s.count) for s in got.spans]
                theirs = [(s["l"], s["r"], s["count"]) for s in run["spans"]]
                if mine != theirs:  # ours is brute force (checked above); the official miss loses matches
                    differ += 1
                    missed = ref_match_len(ref, x)
                    assert any(rs[l] - l == missed[l] and case["creativity"][l] < rs[l]
                               for l, _, _ in set(mine) ^ set(theirs)), (x, p, mine, theirs)
                    continue
                same += 1
                for s, o in zip(got.spans, run["spans"]):
                    assert math.isclose(s.unigram_logprob_sum, o["unigram_logprob_sum"], rel_tol=1e-6)
                    official_docs = []
                    for sh, ptr in o["docs"]:
                        pos = ptr // width
                        i = bisect.bisect_right(seps[sh], pos) - 1
                        official_docs.append((sh, first_doc[sh] + i, pos - seps[sh][i] - 1))
                    assert sorted((d.shard, d.doc_id, d.offset) for d in s.docs) == sorted(official_docs)
                    assert [d.shard for d in s.docs] == [sh for sh, _ in o["docs"]]  # shard order, as officially
                    if name.startswith("u16"):  # the metadata files, read in place
                        for d in s.docs[:3]:
                            assert d.metadata["metadata"]["doc"] == f"s{d.shard}d{d.doc_id - first_doc[d.shard]}"
        assert same >= 0.9 * (same + differ), (same, differ)


def _random_shards(rng: np.random.Generator, n_shards: int, ids: list) -> list:
    shards = []
    for _ in range(n_shards):
        docs = [[int(t) for t in rng.choice(ids, size=int(rng.integers(0, 14)))] for _ in range(int(rng.integers(1, 10)))]
        if rng.random() < 0.5:  # a run
            docs.append([int(rng.choice(ids))] * int(rng.integers(2, 20)))
        shards.append(docs)
    return shards


def _texts(rng: np.random.Generator, shards: list, ids: list, n: int = 12) -> list:
    docs = [d for sh in shards for d in sh if d]
    out = []
    for _ in range(n):
        x: list = []
        for _ in range(int(rng.integers(1, 4))):
            if docs and rng.random() < 0.7:
                d = docs[int(rng.integers(len(docs)))]
                a = int(rng.integers(len(d)))
                x += d[a:int(rng.integers(a + 1, len(d) + 1))]
            else:
                x += [int(t) for t in rng.choice(ids, size=int(rng.integers(1, 4)))]
        out.append(x)
    return out


WIDTH_IDS = {1: (255, [0, 1, 2, 3, 254]), 2: (65535, [0, 1, 2, 255, 256, 257, 512, 65534]),
             4: (70000, [0, 1, 256, 257, 65536, 65537, 69999])}


@pytest.mark.parametrize("width", [1, 2, 4])
@pytest.mark.parametrize("seed", range(3))
def test_written_official_indexes_equal_brute_force(tmp_path: Path, width: int, seed: int) -> None:
    rng = np.random.default_rng(100 * width + seed)
    vocab, ids = WIDTH_IDS[width]
    shards = _random_shards(rng, 1 + seed, ids)
    path = write_official_index(tmp_path / "off", shards, width)
    texts = _texts(rng, shards, ids)
    rules = [ids[1], ids[-1]]
    param_sets = [dict(min_len=1, max_count=None, delimiters=None, word_starts=None),
                  dict(min_len=2, max_count=3, delimiters=[ids[2]], word_starts=None),
                  dict(min_len=1, max_count=None, delimiters=None, word_starts=rules + [ids[0]])]
    with InfiniGramIndex.open(path, vocab_size=vocab, token_width=width) as index:
        check_against_brute(index, shards, texts, param_sets)


def test_union_of_an_official_index_and_ours(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    vocab, ids = WIDTH_IDS[2]
    theirs = _random_shards(rng, 2, ids)
    ours_docs = [[int(t) for t in rng.choice(ids, size=8)] for _ in range(4)] + [theirs[0][0] * 2]
    off = write_official_index(tmp_path / "off", theirs, 2)
    build_index(ours_docs, tmp_path / "ours", vocab_size=vocab, progress=False).close()
    with InfiniGramIndex.open([off, tmp_path / "ours"]) as index:
        shards = theirs + [ours_docs]
        check_against_brute(index, shards, _texts(rng, shards, ids),
                            [dict(min_len=1, max_count=None, delimiters=None, word_starts=None)])


@pytest.fixture(scope="module")
def official_hf(tiny_index, tiny_tok, tmp_path_factory):
    """Our HF test index in the official layout, with the tokenizer saved as a bare tokenizer.json
    (what an official index comes with)."""
    base = tmp_path_factory.mktemp("offhf")
    path = ours_to_official(tiny_index.paths[0], base / "official", token_width=2, progress=False)
    tiny_tok.backend_tokenizer.save(str(base / "tokenizer.json"))
    tiny_tok.save_pretrained(str(base / "tokdir"))
    return path, base / "tokenizer.json"


def test_the_tokenizer_given_at_open_is_the_indexs(official_hf, tiny_index, tiny_tok):
    """open(official, tokenizer=DIR) loads it (the vocabulary was len() of the path string) and
    trace() without a tokenizer then uses it: decoded texts and its word starts."""
    path, tok_json = official_hf
    ids = tiny_tok.encode(" " + TEXTS[3][200:500])
    want = trace(ids, tiny_index, tiny_tok, stop_at_eos=False)
    for given in (str(tok_json.parent / "tokdir"), tiny_tok):
        with InfiniGramIndex.open(path, tokenizer=given) as index:
            assert index.vocab_size == len(tiny_tok) and index.tokenizer is not None
            got = trace(ids, index, stop_at_eos=False)
            assert got.tokenizer is index.tokenizer and got.as_dict()["text"] == want.as_dict()["text"]
            assert [(s.start, s.end) for s in got.spans] == [(s.start, s.end) for s in want.spans]


def test_trace_on_an_official_index_equals_ours(official_hf, tiny_index, tiny_tok, tmp_path):
    path, _ = official_hf
    text = " " + TEXTS[1][300:700] + " zebra quux " + TEXTS[2][100:400]
    ids = tiny_tok.encode(text)
    with InfiniGramIndex.open(path, tokenizer=tiny_tok) as official:
        a = trace(ids, official, tiny_tok, min_len=3, stop_at_eos=False, max_docs=1000)
        b = trace(ids, tiny_index, tiny_tok, min_len=3, stop_at_eos=False, max_docs=1000)
        da, db = a.as_dict(), b.as_dict()
        # the same spans, texts and documents; inside a shard the official layout lists a span's
        # occurrences in byte order (little-endian ids), ours in id order
        key = lambda doc: (doc["doc_id"], doc["offset"])  # noqa: E731
        for sa, sb in zip(da.pop("spans"), db.pop("spans")):
            assert sorted(sa.pop("docs"), key=key) == sorted(sb.pop("docs"), key=key)
            assert sa == sb
        assert a.spans and len(a.spans) == len(b.spans) and da == db
        c1, c2 = official.creativity(ids), tiny_index.creativity(ids)
        assert c1.match_len.tolist() == c2.match_len.tolist() and c1.curve([4, 8]) == c2.curve([4, 8])
        page = a.to_html(tmp_path / "t.html")
        assert page.count('class="span') >= len(a.spans) and "zebra" in page
        assert "verbatim spans" in a.render_terminal(color=False)


def _cli(capsys, *argv):
    rc = cli_main([str(v) for v in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_trace_and_creativity_on_an_official_index(official_hf, tiny_index, tiny_tok, capsys, tmp_path):
    path, tok_json = official_hf
    text = " " + TEXTS[1][300:600] + " zebra quux"
    ids = tiny_tok.encode(text)
    ws = word_start_ids(tiny_tok, tiny_index.vocab_size)
    rc, out, err = _cli(capsys, "trace", path, "--text", text, "--tokenizer", tok_json, "--min-len", "3")
    assert rc == 0, err
    got = json.loads(out)
    want = tiny_index.attribute(ids, min_len=3, word_starts=ws, max_docs=5, context=24)
    assert [(s["start"], s["end"], s["count"]) for s in got["spans"]] == [(s.start, s.end, s.count) for s in want.spans]
    assert got["spans"] and all(s["docs"][0]["match"] == s["text"] for s in got["spans"])
    # the official engine's bow-ids file as the word-start rule; --vocab-size without a tokenizer for creativity
    bow = tmp_path / "bow.txt"
    bow.write_text("\n".join(map(str, np.flatnonzero(ws).tolist())) + "\n")
    rc, out, _ = _cli(capsys, "trace", path, "--text", text, "--tokenizer", tok_json, "--min-len", "3",
                      "--word-starts", bow)
    assert rc == 0 and [(s["start"], s["end"]) for s in json.loads(out)["spans"]] == [(s.start, s.end) for s in want.spans]
    page = tmp_path / "t.html"
    rc, _, err = _cli(capsys, "trace", path, "--file", _write(tmp_path / "in.txt", text), "--tokenizer", tok_json,
                      "--html", page)
    assert rc == 0 and page.read_text(encoding="utf-8").count('class="span') >= 1
    rc, out, _ = _cli(capsys, "creativity", path, "--text", text, "--tokenizer", tok_json, "--per-token", "--n", "4")
    c = tiny_index.creativity(ids)
    assert rc == 0 and json.loads(out)["match_len"] == c.match_len.tolist()
    assert json.loads(out)["creativity_index"] == {"4": c.index(4)}


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_cli_on_an_official_index_says_what_is_missing(capsys, tmp_path):
    d = tmp_path / "u16"
    shutil.copytree(DATA / "u16_three_shards_meta", d)
    rc, _, err = _cli(capsys, "creativity", d, "--text", "ab")
    assert rc == 2 and "--vocab-size" in err and len(err.strip().splitlines()) == 1
    rc, out, err = _cli(capsys, "creativity", d, "--text", "\x01\x02\x05\x01", "--tokenizer", "bytes",
                        "--vocab-size", "65001", "--per-token")
    shards = parse_official(d, 2)
    ref = Reference([x for sh in shards for x in sh], 65001)
    assert rc == 0, err
    assert json.loads(out)["match_len"] == ref_match_len(ref, [1, 2, 5, 1])
    rc, _, err = _cli(capsys, "trace", d, "--text", "x", "--tokenizer", "bytes", "--vocab-size", "65001",
                      "--word-starts", tmp_path / "missing.txt")
    assert rc == 2 and "--word-starts" in err
