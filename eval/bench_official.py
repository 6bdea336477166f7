#!/usr/bin/env python3
"""Our engine on official infini-gram files vs the official engine (issue 15), same run.

    python eval/bench_official.py build  --tokens 100000000   # official index (official indexer) + ours
    python eval/bench_official.py bench  --queries 200 --rounds 5

`build` takes the first Linux-source documents up to --tokens tokens (eval/corpora.py's tokenized
`linux`), builds the official index with the official indexer (eval/official_engine.py, its own
venv) under <cache>/official/<name>, and converts it into our format under <cache>/ours/<name>
(`infinigram-hf convert`). `bench` opens the official files with both engines (ours in place)
and our converted index, and times count, infgram_prob and exact infgram_ntd per query, engines
taking turns round by round (bench_queries.interleaved); every answer is compared across the
three. Results: eval/results/official_files.json.
"""
from __future__ import annotations

import argparse
import json
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
    tokens, offsets = corpora.load_tokens("linux")
    offsets = np.asarray(offsets, dtype=np.int64)
    k = int(np.searchsorted(offsets, args.tokens, side="left"))
    if not corpora.tokens_path(NAME).exists():
        np.save(corpora.tokens_path(NAME), np.asarray(tokens[: offsets[k]]))
        np.save(corpora.offsets_path(NAME), offsets[: k + 1])
    print(f"{NAME}: {k} documents, {int(offsets[k]):,} tokens", flush=True)
    if not (official_engine.index_dir(NAME) / "table.0").exists():  # (measured there, in its own venv)
        import subprocess
        subprocess.run([sys.executable, str(Path(__file__).resolve().parent / "official_engine.py"), "build", NAME,
                        "--force", "--no-smoke", "--cpus", "2", "--mem", "8"], check=True)
    t0 = time.time()
    official_to_ours(official_engine.index_dir(NAME), corpora.cache_dir() / "ours" / NAME,
                     vocab_size=corpora.VOCAB_SIZE, eos_token_id=corpora.EOS_TOKEN_ID, overwrite=True, progress=False)
    print(f"converted to ours in {time.time() - t0:.1f}s", flush=True)


def bench(args: argparse.Namespace) -> None:
    off_dir = official_engine.index_dir(NAME)
    t0 = time.perf_counter()
    inplace = InfiniGramIndex.open(off_dir, vocab_size=corpora.VOCAB_SIZE, eos_token_id=corpora.EOS_TOKEN_ID)
    open_s = time.perf_counter() - t0
    ours = InfiniGramIndex.open(corpora.cache_dir() / "ours" / NAME)
    peer = load_official(NAME)
    tokens, offsets = corpora.load_tokens("linux")
    offsets = np.asarray(offsets, dtype=np.int64)
    k = int(np.searchsorted(offsets, inplace.num_tokens + inplace.num_docs, side="left"))
    held = np.arange(k, len(offsets) - 1)  # prompts from the documents after the indexed ones
    work = make_workload(tokens, offsets, args.queries, 0, args.seed, docs=held)
    sep, eos = inplace.separator_id, corpora.EOS_TOKEN_ID
    big = inplace.num_tokens + inplace.num_docs + 10
    out = {"name": NAME, "tokens": inplace.num_tokens, "docs": inplace.num_docs, "queries": args.queries,
           "rounds": args.rounds, "open_official_in_place_s": round(open_s, 3), "date": time.strftime("%Y-%m-%d")}
    diffs = {}

    def ntd_of(ix):
        return lambda p: {(eos if t == sep else t): c for t, c in ix.infgram_ntd(p).as_dict().items()}

    def peer_ntd(p):
        r = peer.infgram_ntd(prompt_ids=p, max_support=big)
        return {int(t): int(v["cont_cnt"]) for t, v in r["result_by_token_id"].items()}

    kinds = {
        "count": (work["count"], {"in_place": inplace.count, "ours": ours.count,
                                   "official": lambda q: peer.count(input_ids=q)["count"]}),
        "infgram_prob": (list(zip(work["prompts"], work["conts"])),
                         {"in_place": lambda pc: inplace.infgram_prob(pc[0], pc[1]).count,
                          "ours": lambda pc: ours.infgram_prob(pc[0], pc[1]).count,
                          "official": lambda pc: peer.infgram_prob(prompt_ids=pc[0], cont_id=pc[1])["cont_cnt"]}),
        "infgram_ntd": (work["prompts"], {"in_place": ntd_of(inplace), "ours": ntd_of(ours), "official": peer_ntd}),
    }
    for kind, (queries, engines) in kinds.items():
        answers = {name: [fn(q) for q in queries] for name, fn in engines.items()}
        diffs[kind] = {"in_place_vs_ours": sum(a != b for a, b in zip(answers["in_place"], answers["ours"])),
                       "in_place_vs_official": sum(a != b for a, b in zip(answers["in_place"], answers["official"]))}
        t = interleaved(queries, engines, args.rounds, rounds_of={"official": 1 if kind == "infgram_ntd" else args.rounds})
        out[kind] = {name: summarize(t[name]) for name in engines}
        out[kind].update({name + "_cpu": summarize(t[name + "_cpu"]) for name in engines})
        print(kind, json.dumps(out[kind]), diffs[kind], flush=True)
    out["differences"] = diffs
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
