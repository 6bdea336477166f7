#!/usr/bin/env python3
"""Our engine on official infini-gram files vs the official engine (issue 15), same run.

    python eval/bench_official.py build  --tokens 100000000   # official index (official indexer) + ours
    python eval/bench_official.py bench  --queries 200 --rounds 5

`build` takes the first Linux-source documents up to --tokens tokens (eval/corpora.py's tokenized
`linux`), builds the official index with the official indexer (eval/official_engine.py, its own
venv) under <cache>/official/<name>, and converts it into our format under <cache>/ours/<name>
(`infinigram-hf convert`). `bench` opens the official files with both engines (ours in place,
and in place with the sidecar of `infinigram-hf prepare`) and our converted index, and times count, infgram_prob and exact infgram_ntd per query, engines
taking turns round by round (bench_queries.interleaved); every answer is compared across the
three. Results: eval/results/official_files.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpora  # noqa: E402
import official_engine  # noqa: E402
from bench_queries import interleaved, load_official, make_workload, summarize  # noqa: E402

from infinigram_hf import InfiniGramIndex  # noqa: E402
from infinigram_hf.build.convert import official_to_ours  # noqa: E402

NAME = "official15_linux100m"
RESULTS = Path(__file__).resolve().parent / "results" / "official_files.json"


def build(args: argparse.Namespace) -> None:
    """The official files of the first Linux documents up to --tokens tokens, their table sorted by
    our SA-IS: our writer over the byte-swapped ids orders suffixes as the official indexer does
    (memcmp of little-endian bytes), and ending the official shard with an empty document makes
    its token suffixes the very strings of ours (each shifted by one position). The separators'
    suffixes follow, ordered by the suffix after them. (The official indexer took over 20 minutes
    for a fifth of its merge of these 100M tokens on this shared 2-core machine.)"""
    from infinigram_hf.build.official_writer import pointer_width
    from infinigram_hf.build.shard_writer import ShardWriter

    tokens, offsets = corpora.load_tokens("linux")
    offsets = np.asarray(offsets, dtype=np.int64)
    k = int(np.searchsorted(offsets, args.tokens, side="left"))
    lens = np.diff(offsets[: k + 1])
    keep = np.flatnonzero(lens > 0)  # (no empty document but the last, which we add)
    ids = np.concatenate([np.asarray(tokens[offsets[d]:offsets[d + 1]]) for d in keep]).astype(np.uint16)
    ours_off = np.concatenate([[0], np.cumsum(lens[keep])]).astype(np.int64)
    n_docs, n_tok = len(keep), int(ours_off[-1])
    print(f"{NAME}: {n_docs} documents, {n_tok:,} tokens", flush=True)
    t0 = time.time()
    tmp = corpora.cache_dir() / "ours" / (NAME + ".keys")
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    w = ShardWriter(tmp, 2, 65535, ntd_cache_min_cost=0)
    w.add(ids.byteswap(), ours_off)
    w.finish()
    raw = np.fromfile(tmp / "sa.bin", dtype=np.uint8)
    width, count = int(raw[12:16].view("<u4")[0]), int(raw[16:24].view("<u8")[0])
    body = raw[64:64 + width * count].reshape(count, width)
    sa = np.zeros((count, 8), dtype=np.uint8)
    sa[:, :width] = body
    sa = sa.view("<u8").reshape(-1).astype(np.int64)
    del raw, body
    total_ours = n_tok + n_docs  # ours: d0 sep d1 sep ... d_{N-1} sep
    inv = np.empty(total_ours, dtype=np.int64)
    inv[sa] = np.arange(count)
    starts = ours_off[:-1] + np.arange(n_docs)  # where each document starts in our layout
    sep_order = starts[np.argsort(inv[starts], kind="stable")]
    print(f"suffix array over keys in {time.time() - t0:.1f}s", flush=True)
    out = official_engine.index_dir(NAME)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    stream = np.empty(total_ours + 1, dtype="<u2")  # sep d0 sep d1 ... sep d_{N-1} sep
    stream[0] = 0xFFFF
    stream[1:] = 0xFFFF
    for d in range(n_docs):
        stream[1 + starts[d]:1 + starts[d] + lens[keep][d]] = ids[ours_off[d]:ours_off[d + 1]]
    stream.tofile(out / "tokenized.0")
    doc_offsets = np.concatenate([starts, [total_ours]]).astype("<u8") * 2  # + the empty last document
    doc_offsets.tofile(out / "offset.0")
    ratio = pointer_width(stream.size * 2)
    ptrs = np.concatenate([(sa + 1) * 2, [total_ours * 2], sep_order * 2]).astype("<u8")
    assert ptrs.size == stream.size
    ptrs.view(np.uint8).reshape(-1, 8)[:, :ratio].tofile(out / "table.0")
    shutil.rmtree(tmp, ignore_errors=True)
    (out.parent / (NAME + ".docs.json")).write_text(json.dumps({"last_linux_doc": k}))
    print(f"official files in {time.time() - t0:.1f}s", flush=True)
    t0 = time.time()
    official_to_ours(out, corpora.cache_dir() / "ours" / NAME, vocab_size=corpora.VOCAB_SIZE,
                     eos_token_id=corpora.EOS_TOKEN_ID, overwrite=True, progress=False)
    print(f"converted to ours in {time.time() - t0:.1f}s", flush=True)


def bench(args: argparse.Namespace) -> None:
    off_dir = official_engine.index_dir(NAME)
    t0 = time.perf_counter()
    inplace = InfiniGramIndex.open(off_dir, vocab_size=corpora.VOCAB_SIZE, eos_token_id=corpora.EOS_TOKEN_ID)
    open_s = time.perf_counter() - t0
    side_dir = corpora.cache_dir() / "official_sidecar" / NAME  # (`infinigram-hf prepare`; built here if missing)
    built = not side_dir.exists()
    t0 = time.perf_counter()
    side = InfiniGramIndex.open(off_dir, vocab_size=corpora.VOCAB_SIZE, eos_token_id=corpora.EOS_TOKEN_ID,
                                cache_dir=side_dir)
    side_s = time.perf_counter() - t0
    ours = InfiniGramIndex.open(corpora.cache_dir() / "ours" / NAME)
    peer = load_official(NAME)
    tokens, offsets = corpora.load_tokens("linux")
    offsets = np.asarray(offsets, dtype=np.int64)
    k = json.loads((off_dir.parent / (NAME + ".docs.json")).read_text())["last_linux_doc"]
    held = np.arange(k, len(offsets) - 1)  # prompts from the documents after the indexed ones
    work = make_workload(tokens, offsets, args.queries, 0, args.seed, docs=held)
    sep, eos = inplace.separator_id, corpora.EOS_TOKEN_ID
    big = inplace.num_tokens + inplace.num_docs + 10
    out = {"name": NAME, "tokens": inplace.num_tokens, "docs": inplace.num_docs, "queries": args.queries,
           "rounds": args.rounds, "open_official_in_place_s": round(open_s, 3),
           ("prepare_and_open_with_sidecar_s" if built else "open_with_sidecar_s"): round(side_s, 3),
           "date": time.strftime("%Y-%m-%d"), "load_avg_start": os.getloadavg()}
    diffs = {}

    def ntd_of(ix):
        return lambda p: {(eos if t == sep else t): c for t, c in ix.infgram_ntd(p).as_dict().items()}

    def peer_ntd(p):
        r = peer.infgram_ntd(prompt_ids=p, max_support=big)
        return {int(t): int(v["cont_cnt"]) for t, v in r["result_by_token_id"].items()}

    kinds = {
        "count": (work["count"], {"in_place": inplace.count, "sidecar": side.count, "ours": ours.count,
                                   "official": lambda q: peer.count(input_ids=q)["count"]}),
        "infgram_prob": (list(zip(work["prompts"], work["conts"])),
                         {"in_place": lambda pc: inplace.infgram_prob(pc[0], pc[1]).count,
                          "sidecar": lambda pc: side.infgram_prob(pc[0], pc[1]).count,
                          "ours": lambda pc: ours.infgram_prob(pc[0], pc[1]).count,
                          "official": lambda pc: peer.infgram_prob(prompt_ids=pc[0], cont_id=pc[1])["cont_cnt"]}),
        "infgram_ntd": (work["prompts"], {"in_place": ntd_of(inplace), "sidecar": ntd_of(side), "ours": ntd_of(ours),
                                          "official": peer_ntd}),
    }
    for kind, (queries, engines) in kinds.items():
        answers = {name: [fn(q) for q in queries] for name, fn in engines.items()}
        diffs[kind] = {"in_place_vs_ours": sum(a != b for a, b in zip(answers["in_place"], answers["ours"])),
                       "sidecar_vs_ours": sum(a != b for a, b in zip(answers["sidecar"], answers["ours"])),
                       "in_place_vs_official": sum(a != b for a, b in zip(answers["in_place"], answers["official"]))}
        t = interleaved(queries, engines, args.rounds, rounds_of={"official": 1 if kind == "infgram_ntd" else args.rounds})
        out[kind] = {name: summarize(t[name]) for name in engines}
        out[kind].update({name + "_cpu": summarize(t[name + "_cpu"]) for name in engines})
        print(kind, json.dumps(out[kind]), diffs[kind], flush=True)
    out["differences"] = diffs
    out["load_avg_end"] = os.getloadavg()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("build")
    p.add_argument("--tokens", type=int, default=100_000_000)
    p = sub.add_parser("bench")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    build(a) if a.cmd == "build" else bench(a)


if __name__ == "__main__":
    main()
