"""Official indexes answered by infini-gram 2.6.0's own engine and by ours, side by side.

The committed fixtures (built by the official indexer) and indexes written here by our official
writer are opened by both engines; every count, n-gram and ∞-gram probability and exact
next-token distribution is compared, with brute force deciding where the two disagree. The
official engine is known to answer some exact next-token distributions wrongly (all mass on
end-of-document when the prompt ends the shard's last document): those cases must be the only
disagreements, and ours must equal brute force there.

Runs where the official engine is importable (the [test] extra installs it on Linux x86-64 with
Python >= 3.11); elsewhere the recorded-fixture tests of test_official_read.py still run.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from infinigram_hf import InfiniGramIndex
from infinigram_hf.build.official_writer import write_official_index

from conftest import Reference
from test_official_read import DATA, parse_index, random_shards

engine = pytest.importorskip("infini_gram.engine", reason="infini_gram (the official engine) is not installed")

DTYPE_NAMES = {1: "u8", 2: "u16", 4: "u32"}
EXACT = 2**40  # max_support above any count here: the official ntd answers exactly


def official_engine(path: Path, width: int, vocab: int, eos: int):
    return engine.InfiniGramEngine(index_dir=str(path), eos_token_id=eos, vocab_size=vocab, version=4,
                                   token_dtype=DTYPE_NAMES[width], load_to_ram=False,
                                   ds_prefetch_depth=0, sa_prefetch_depth=0, od_prefetch_depth=0)


def safe_copy(src: Path, tmp_path: Path) -> Path:
    """The official engine classifies files by substrings of the whole path ('table', 'offset',
    ...): a copy under a plain name keeps the test independent of where the checkout lives."""
    dst = tmp_path / "ix"
    shutil.copytree(src, dst)
    return dst


def queries(shards: list, vocab: int, seed: int) -> list[list[int]]:
    """Every 1-3-gram of the corpus, the tails of each shard's last document, and random n-grams."""
    rng = np.random.default_rng(seed)
    docs = [d for s in shards for d in s]
    out = {tuple(d[i:i + n]) for d in docs for n in (1, 2, 3) for i in range(len(d) - n + 1)}
    out |= {tuple(s[-1][-k:]) for s in shards if s[-1] for k in range(1, min(len(s[-1]), 5) + 1)}
    ids = sorted({t for d in docs for t in d}) or [0]
    out |= {tuple(int(rng.choice(ids)) for _ in range(int(rng.integers(1, 6)))) for _ in range(40)}
    return [list(q) for q in sorted(out) if all(t < vocab for t in q)]


def official_ntd(result: dict, sep: int, eos: int) -> dict[int, int]:
    """The official ntd's {token: count}, end-of-document under our separator id."""
    assert "error" not in result, result
    assert not result.get("approx"), result
    return {(sep if int(t) == eos else int(t)): int(v["cont_cnt"])
            for t, v in result["result_by_token_id"].items()}


def compare(path: Path, width: int, vocab: int, shards: list, seed: int = 0) -> dict[str, int]:
    """Every query type on both engines; returns the number of compared answers per kind, and
    the official engine's wrong answers (which must be ntd cases only)."""
    docs = [d for s in shards for d in s]
    ref = Reference(docs, vocab)
    ours = InfiniGramIndex.open(path, vocab_size=vocab)
    sep = ours.separator_id
    # The official engine reports end-of-document as eos_token_id, which must be a token id below
    # its vocab_size: take one that no document holds, so that its answers can be read back.
    eos = max(set(range(vocab)) - {t for d in docs for t in d})
    theirs = official_engine(path, width, vocab, eos)
    seen = {"count": 0, "prob": 0, "ntd": 0, "infgram_prob": 0, "infgram_ntd": 0, "official_wrong": 0}
    try:
        for q in queries(shards, vocab, seed):
            got = ours.count(q)
            assert got == ref.count(q), q
            assert theirs.count(input_ids=q)["count"] == got, q
            seen["count"] += 1

            prompt, cont = q[:-1], q[-1]
            mine = ours.ngram_prob(prompt, cont)
            off = theirs.prob(prompt_ids=prompt, cont_id=cont)
            if mine.prompt_count:  # the official prob of an unseen prompt is an error dict
                # its empty prompt counts the separators too (one per document): documented
                separators = 0 if prompt else ours.num_docs
                assert (off["prompt_cnt"], off["cont_cnt"]) == (mine.prompt_count + separators, mine.count), (q, off)
                seen["prob"] += 1

            want = ref.ntd(q)
            assert ours.ngram_ntd(q).as_dict() == want, q
            off = official_ntd(theirs.ntd(prompt_ids=q, max_support=EXACT), sep, eos)
            if off != want:  # brute force decides: only the known end-of-shard case may differ
                assert off.get(sep, 0) > want.get(sep, 0), (q, off, want)
                seen["official_wrong"] += 1
            seen["ntd"] += 1

            context = [docs[0][0] if docs[0] else 0, *q]
            mine = ours.infgram_prob(context, cont)
            off = theirs.infgram_prob(prompt_ids=context, cont_id=cont)
            assert "error" not in off, off
            want = ref.infgram_prob(context, cont)
            assert (mine.prompt_count, mine.count, mine.suffix_len) == (want.prompt_count, want.count, want.suffix_len)
            if (off["prompt_cnt"], off["cont_cnt"], off["suffix_len"]) != (want.prompt_count, want.count, want.suffix_len):
                pytest.fail(f"official infgram_prob({context}, {cont}) = {off}, brute force {want}")
            seen["infgram_prob"] += 1

            dist = ours.infgram_ntd(context)
            want, k = ref.infgram_ntd(context)
            assert (dist.as_dict(), dist.suffix_len) == (want, k), context
            res = theirs.infgram_ntd(prompt_ids=context, max_support=EXACT)
            off = official_ntd(res, sep, eos)
            assert res["suffix_len"] == k, (context, res["suffix_len"], k)
            if off != want:
                assert off.get(sep, 0) > want.get(sep, 0), (context, off, want)
                seen["official_wrong"] += 1
            seen["infgram_ntd"] += 1
    finally:
        ours.close()
    return seen


@pytest.mark.parametrize("name,width,vocab", [("u8_one_shard", 1, 255), ("u16_three_shards_meta", 2, 65001)])
def test_official_fixtures_answer_like_the_official_engine(tmp_path: Path, name: str, width: int, vocab: int) -> None:
    path = safe_copy(DATA / name, tmp_path)
    seen = compare(path, width, vocab, parse_index(path, width))
    print(name, seen)
    assert min(seen[k] for k in ("count", "ntd", "infgram_prob", "infgram_ntd")) > 20, seen
    # the fixtures hold the engine's end-of-shard ntd case on purpose (make_fixtures.py)
    assert seen["official_wrong"] <= seen["ntd"] // 4, seen


@pytest.mark.parametrize("width,vocab,ids", [(1, 255, [0, 1, 2, 3, 254]), (2, 65535, [0, 1, 2, 255, 256, 257, 512, 65534])])
@pytest.mark.parametrize("seed", range(3))
def test_written_official_indexes_answer_like_the_official_engine(tmp_path: Path, width: int, vocab: int,
                                                                   ids: list, seed: int) -> None:
    """Our official writer's files (1-3 shards, runs, repeated tails) read by both engines."""
    rng = np.random.default_rng(seed)
    shards = random_shards(rng, int(rng.integers(1, 4)), ids)
    path = write_official_index(tmp_path / "ix", shards, width)
    seen = compare(path, width, vocab, shards, seed)
    assert seen["count"] > 0, seen
