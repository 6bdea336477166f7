"""Overhead of InfiniGramLogitsProcessor per generated token vs the model's own decode step.

The model is the eval GPT-2 (~11.5M parameters, 32k vocab; eval/train_gpt2.py), the index the
full stdlib reference split (7.2M tokens). Prompts are the first --prompt-len tokens of held-out
files. For batch 1 and batch 8 it runs greedy generate() of --new-tokens tokens without and with
the processor (a fresh processor, i.e. a cold cache, every run) and reports medians over --runs:

  * step: the model's decode step (generate() without the processor / new tokens);
  * processor: time inside the processor's __call__ per step (timed around each call), which
    includes building the P_∞ rows over the 32k vocabulary and the mixture;
  * end-to-end overhead: (with − without) / new tokens, noisier on a shared machine;
  * held-out prefixes: the processor alone on real prefixes of held-out files growing one token
    per call (median wall and CPU time per call), independent of what the model generates.

    nice -n 10 .venv/bin/python eval/bench_processor.py
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import LogitsProcessorList

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ppl_setup  # noqa: E402

from infinigram_hf import InfiniGramLogitsProcessor  # noqa: E402

HERE = Path(__file__).resolve().parent


class Timed:
    """Wraps a processor, timing every call."""

    def __init__(self, proc):
        self.proc, self.times = proc, []

    def __call__(self, input_ids, scores):
        t = time.perf_counter()
        out = self.proc(input_ids, scores)
        self.times.append(time.perf_counter() - t)
        return out


def prompts(batch: int, length: int) -> torch.Tensor:
    docs = [d for d in ppl_setup.split_docs("heldout") if len(d) >= length]
    return torch.tensor([d[:length].tolist() for d in docs[:batch]])


def teacher_forced(index, tok, batch: int, args) -> tuple:
    """(wall, cpu) seconds per processor call on held-out files' real prefixes, growing one token
    per call from --prompt-len (as in decoding, but independent of what the model generates)."""
    docs = [d for d in ppl_setup.split_docs("heldout") if len(d) >= args.prompt_len + args.new_tokens][:batch]
    proc = InfiniGramLogitsProcessor(index, args.lambda_sparse, args.lambda_dense, tokenizer=tok)
    scores = torch.randn(batch, len(tok))
    wall, cpu = [], []
    for n in range(args.prompt_len, args.prompt_len + args.new_tokens):
        ids = torch.tensor([d[:n].tolist() for d in docs])
        t, c = time.perf_counter(), time.process_time()
        proc(ids, scores)
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu)


def run(model, index, tok, ids, new_tokens: int, with_proc: bool, args):
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
              do_sample=False, pad_token_id=tok.eos_token_id)
    timed = None
    if with_proc:
        timed = Timed(InfiniGramLogitsProcessor(index, args.lambda_sparse, args.lambda_dense, tokenizer=tok))
        kw["logits_processor"] = LogitsProcessorList([timed])
    t = time.perf_counter()
    with torch.inference_mode():
        model.generate(ids, **kw)
    total = time.perf_counter() - t
    return total, (statistics.median(timed.times) if timed else 0.0), (sum(timed.times) if timed else 0.0)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--lambda-sparse", type=float, default=0.5)
    ap.add_argument("--lambda-dense", type=float, default=0.3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--random-model", action="store_true", help="an untrained model of the same shape")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.random_model:
        shape = argparse.Namespace(seq_len=512, embd=256, layers=4, heads=4, dropout=0.0)
        model = ppl_setup.train_gpt2.build_model(shape).eval()
        tok = ppl_setup.corpora.load_tokenizer()
    else:
        model, tok = ppl_setup.load_model(train_if_missing=False)
    index = ppl_setup.reference_index("all")
    n_params = sum(p.numel() for p in model.parameters())
    results = []
    for batch in args.batches:
        ids = prompts(batch, args.prompt_len)
        run(model, index, tok, ids, 4, True, args)  # warm-up (page cache, allocator)
        plain, with_p, call_med, call_sum, tf_wall, tf_cpu = [], [], [], [], [], []
        for _ in range(args.runs):
            plain.append(run(model, index, tok, ids, args.new_tokens, False, args)[0])
            total, med, tot_calls = run(model, index, tok, ids, args.new_tokens, True, args)
            with_p.append(total); call_med.append(med); call_sum.append(tot_calls)
            w, c = teacher_forced(index, tok, batch, args)
            tf_wall.append(w); tf_cpu.append(c)
        step = statistics.median(plain) / args.new_tokens
        proc = statistics.median(call_sum) / args.new_tokens
        e2e = (statistics.median(with_p) - statistics.median(plain)) / args.new_tokens
        r = dict(batch=batch, step_ms=step * 1e3, processor_ms_per_step=proc * 1e3,
                 processor_median_call_ms=statistics.median(call_med) * 1e3,
                 processor_ms_per_token=proc * 1e3 / batch, end_to_end_overhead_ms_per_step=e2e * 1e3,
                 overhead_vs_step=proc / step, heldout_prefix_call_ms=statistics.median(tf_wall) * 1e3,
                 heldout_prefix_call_cpu_ms=statistics.median(tf_cpu) * 1e3)
        results.append(r)
        print(f"batch {batch}: model step {r['step_ms']:.2f} ms; processor {r['processor_ms_per_step']:.3f} ms/step "
              f"({r['processor_ms_per_token']:.3f} ms/token, median call {r['processor_median_call_ms']:.3f} ms) "
              f"= {100 * r['overhead_vs_step']:.1f}% of the step; end-to-end +{r['end_to_end_overhead_ms_per_step']:.2f} ms/step; "
              f"on held-out prefixes {r['heldout_prefix_call_ms']:.3f} ms/call (CPU {r['heldout_prefix_call_cpu_ms']:.3f} ms)",
              flush=True)
    out = dict(params=n_params, random_model=args.random_model, runs=args.runs, new_tokens=args.new_tokens,
               prompt_len=args.prompt_len, threads=args.threads, index_tokens=index.num_tokens, results=results)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "bench_processor.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
