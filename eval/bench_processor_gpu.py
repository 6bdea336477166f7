#!/usr/bin/env python3
"""InfiniGramLogitsProcessor inside generate() on a GPU (issue 19): what the processor adds to a
decoding step at GPU-sized batches when the scores live on the GPU.

    python eval/bench_processor_gpu.py --batch 64 --new-tokens 64        # needs CUDA

Model: a GPT-2 from a config (default 12 layers x 768, 12 heads: GPT-2 small's shape, random
weights: only its time matters) with the eval's 32k BPE vocabulary, fp16 weights on the GPU.
Index: the stdlib reference split (eval/corpora.py), built on first use into
<cache>/ours/stdlib.reference. Prompts: the first --prefix tokens of held-out stdlib files.

Per configuration (plain greedy generate(); with the processor; with the processor and the
memorisation guard) it reports, over --rounds rounds (configurations alternating), the median
wall time per new token for the whole batch, and the processor's own CPU time per row per step
(process CPU time of the calls, which includes the wait for the forward when the call copies
input_ids to the host -- CUDA spins; the GPU is synchronised only around whole generate() calls). A torch.profiler pass counts
the host-to-device copies per step of the processor (one is the design: mixing.py). Output
of a configuration is compared with its first round (greedy; random fp16 weights can flip near-ties). Results: eval/results/processor_gpu.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import corpora  # noqa: E402


class TimedProcessor:
    """Wraps a processor and adds up the process CPU time of its calls (the ∞-gram work is CPU;
    the mixing's kernels are only queued, as in real decoding)."""

    def __init__(self, proc):
        self.proc, self.cpu, self.calls = proc, 0.0, 0

    def __call__(self, input_ids, scores):
        t = time.process_time()
        out = self.proc(input_ids, scores)
        self.cpu += time.process_time() - t
        self.calls += 1
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prefix", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--device", default="cuda", help="cuda (the point), or cpu for a smoke test")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "processor_gpu.json")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("needs a CUDA device (--device cpu for a smoke test)")
    cuda = a.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    from transformers import GPT2Config, GPT2LMHeadModel

    from infinigram_hf import InfiniGramIndex, InfiniGramLogitsProcessor, build_index

    ix_dir = corpora.cache_dir() / "ours" / "stdlib.reference"
    if not (ix_dir / "meta.json").exists():
        toks, offs = corpora.load_tokens("stdlib.reference")
        docs = [np.asarray(toks[offs[i]:offs[i + 1]]) for i in range(len(offs) - 1)]
        build_index(docs, ix_dir, tokenizer=corpora.load_tokenizer(), progress=False, overwrite=True)
    index = InfiniGramIndex.open(ix_dir)
    held, hoffs = corpora.load_tokens("stdlib.heldout")
    files = [held[hoffs[i]:hoffs[i + 1]] for i in range(len(hoffs) - 1) if hoffs[i + 1] - hoffs[i] > a.prefix]
    rows = [files[i % len(files)][:a.prefix] for i in range(a.batch)]
    dev = torch.device(a.device)
    ids = torch.from_numpy(np.stack(rows).astype(np.int64)).to(dev)
    mask = torch.ones_like(ids)
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=corpora.VOCAB_SIZE, n_positions=1024, n_embd=a.embd, n_layer=a.layers,
                     n_head=a.heads, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    model = GPT2LMHeadModel(cfg).to(dev, torch.float16 if cuda else torch.float32).eval()
    n_params = sum(p.numel() for p in model.parameters())

    def run(kind: str):
        procs = []
        if kind != "plain":
            procs = [TimedProcessor(InfiniGramLogitsProcessor(
                index, lambda_sparse=0.5, lambda_dense=0.2, eos_token_id=0,
                max_copy_len=32 if kind == "processor+guard" else None))]
        sync()
        t = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens,
                             do_sample=False, logits_processor=procs or None, pad_token_id=0)
        sync()
        wall = time.perf_counter() - t
        steps = out.shape[1] - ids.shape[1]
        cpu = procs[0].cpu / max(procs[0].calls, 1) / a.batch if procs else 0.0
        return wall / steps, cpu, out[:, ids.shape[1]:].cpu()

    kinds = ["plain", "processor", "processor+guard"]
    for k in kinds:  # warm-up: CUDA context, kernels, the index's pages
        run(k)
    per = {k: {"step_ms": [], "proc_cpu_us_per_row": []} for k in kinds}
    outs, agree = {}, {}
    for r in range(a.rounds):
        for k in (kinds if r % 2 == 0 else kinds[::-1]):
            step, cpu, out = run(k)
            per[k]["step_ms"].append(step * 1e3)
            per[k]["proc_cpu_us_per_row"].append(cpu * 1e6)
            if k in outs:  # random fp16 weights: near-tied logits may flip between runs on a GPU
                agree.setdefault(k, []).append(float((outs[k] == out).float().mean()))
            outs[k] = out
    # host-to-device copies issued by one processor call
    proc = InfiniGramLogitsProcessor(index, lambda_sparse=0.5, lambda_dense=0.2, eos_token_id=0)
    scores = torch.randn(a.batch, corpora.VOCAB_SIZE, device=dev, dtype=model.dtype)
    seq = ids.clone()
    proc(seq, scores)
    seq = torch.cat([seq, seq[:, -1:]], dim=1)
    sync()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        proc(seq, scores)
        sync()
    h2d = sum(1 for e in prof.events() if "Memcpy HtoD" in e.name)
    d2h = sum(1 for e in prof.events() if "Memcpy DtoH" in e.name)
    res = {"date": time.strftime("%Y-%m-%d %H:%M"), "device": torch.cuda.get_device_name() if cuda else "cpu",
           "torch": torch.__version__, "model_params": n_params, "layers": a.layers, "embd": a.embd,
           "batch": a.batch, "prefix": a.prefix, "new_tokens": a.new_tokens, "rounds": a.rounds,
           "index_tokens": index.num_tokens, "h2d_copies_per_call": h2d, "d2h_copies_per_call": d2h}
    print(f"{res['device']}, GPT-2 {a.layers}x{a.embd} ({n_params / 1e6:.0f}M params, fp16), batch {a.batch}, "
          f"prompt {a.prefix} tokens, {a.new_tokens} new tokens, {a.rounds} rounds, index {index.num_tokens:,} tokens")
    base = statistics.median(per["plain"]["step_ms"])
    for k in kinds:
        step = statistics.median(per[k]["step_ms"])
        # rounds drift more than the effect: the added time is the median of same-round differences
        added = statistics.median(x - y for x, y in zip(per[k]["step_ms"], per["plain"]["step_ms"]))
        cpu = statistics.median(per[k]["proc_cpu_us_per_row"])
        res[k] = {"step_ms_median": step, "step_ms_runs": per[k]["step_ms"], "proc_cpu_us_per_row_median": cpu,
                  "vs_plain": step / base, "added_ms_paired_median": added,
                  "same_tokens_as_first_round": agree.get(k)}
        print(f"  {k:16s} {step:7.2f} ms/step  ({step / base:4.2f}x plain, {added:+.2f} ms paired)   "
              f"processor CPU {cpu:6.1f} us/row/step")
    print(f"  one processor call: {h2d} host-to-device and {d2h} device-to-host copies")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
