#!/usr/bin/env python3
"""The paper's §4 analyses (Figures 3 and 4) on two corpora, written to eval/plots/:

* ``stdlib`` -- held-out Python standard-library files (the ``heldout`` split of
  eval/corpora.py, first 1024 tokens each, its 32k BPE) against an index over the ``reference``
  split (run ``python eval/corpora.py all`` first).
* ``shakespeare`` -- the validation part of Tiny Shakespeare (last 10%, cut into 1024-character
  documents) against a byte-level index over the first 90%.

The neural model of Figure 4 is a tiny GPT-2 built from a config and trained here for a few
minutes on the index's own corpus (cached; deterministic for a seed and step count), unless
--model points at a better one (e.g. <cache>/gpt2-small-stdlib from eval/train_gpt2.py).

    python eval/lm_analysis.py stdlib [--model DIR] [--train-steps 300]
    python eval/lm_analysis.py shakespeare --text /path/to/tinyshakespeare.txt
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, List, Optional

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from infinigram_hf import build_index  # noqa: E402
from infinigram_hf.analysis import analyze, plot_analysis, save_summary  # noqa: E402
from infinigram_hf import InfiniGramIndex  # noqa: E402


def cache() -> Path:
    d = Path(os.environ.get("INFINIGRAM_EVAL_CACHE", os.path.expanduser("~/.cache/infinigram_hf_eval"))) / "lm-analysis"
    d.mkdir(parents=True, exist_ok=True)
    return d


def train_tiny_gpt2(stream: np.ndarray, vocab: int, out: Path, *, steps: int, seq_len: int = 128, batch: int = 16,
                    n_embd: int = 128, n_layer: int = 2, lr: float = 3e-3, seed: int = 0) -> Any:
    """A small GPT-2 from a config, trained on random crops of `stream` (AdamW, cosine decay);
    saved to `out` and reused when present with the same settings."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    info = {"steps": steps, "seq_len": seq_len, "batch": batch, "n_embd": n_embd, "n_layer": n_layer, "lr": lr,
            "seed": seed, "tokens": int(len(stream)), "vocab": vocab}
    if (out / "train_info.json").is_file():
        old = json.loads((out / "train_info.json").read_text())
        if {k: old.get(k) for k in info} == info:
            return GPT2LMHeadModel.from_pretrained(out).eval()
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    cfg = GPT2Config(vocab_size=vocab, n_positions=seq_len, n_embd=n_embd, n_layer=n_layer, n_head=4,
                     bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    data = torch.as_tensor(np.asarray(stream, dtype=np.int64))
    t0 = time.perf_counter()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 20) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        starts = rng.integers(0, len(data) - seq_len - 1, size=batch)
        x = torch.stack([data[s:s + seq_len] for s in starts])
        loss = model(x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"  train step {step}/{steps} loss {loss.item():.3f} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    info["final_loss"] = float(loss.item())
    info["seconds"] = time.perf_counter() - t0
    model.save_pretrained(out)
    (out / "train_info.json").write_text(json.dumps(info, indent=1) + "\n")
    return model.eval()


def run_stdlib(args: argparse.Namespace) -> dict:
    import corpora

    tokens, offsets = corpora.load_tokens("stdlib.reference")
    ref_docs = [np.asarray(tokens[offsets[i]:offsets[i + 1]]) for i in range(len(offsets) - 1)]
    ix_dir = cache() / "stdlib-reference"
    if ix_dir.exists():
        idx = InfiniGramIndex.open(ix_dir)
    else:
        idx = build_index(ref_docs, ix_dir, vocab_size=corpora.VOCAB_SIZE, progress=False)
    htok, hoff = corpora.load_tokens("stdlib.heldout")
    held = [np.asarray(htok[hoff[i]:hoff[i + 1]]) for i in range(len(hoff) - 1)]
    model = None
    if args.model:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(args.model).eval()
        model_name = args.model
    elif not args.no_model:
        stream = np.concatenate([np.concatenate([[corpora.EOS_TOKEN_ID], d]) for d in ref_docs])
        model = train_tiny_gpt2(stream, corpora.VOCAB_SIZE, cache() / "gpt2-tiny-stdlib", steps=args.train_steps,
                                n_embd=64, batch=8)
        model_name = f"tiny GPT-2 (2x64, {args.train_steps} steps on the reference split)"
    res = analyze(idx, held, n=5, max_tokens=1024, model=model, progress=False)
    title = f"stdlib held-out ({len(held)} files, {len(res.effective_n):,} tokens) vs reference index ({idx.num_tokens:,} tokens)"
    paths = plot_analysis(res, args.out, prefix="stdlib", title=title)
    return save_summary(res, Path(args.out) / "stdlib_summary.json", corpus="stdlib heldout vs reference (32k BPE)",
                        index_tokens=idx.num_tokens, heldout_files=len(held), model=model_name if model else None,
                        plots=[str(p) for p in paths], date=time.strftime("%Y-%m-%d"))


def run_shakespeare(args: argparse.Namespace) -> dict:
    if not args.text:
        raise SystemExit("shakespeare needs --text /path/to/tinyshakespeare.txt")
    text = Path(args.text).read_text(encoding="utf-8")
    n = int(0.9 * len(text))
    train, val = text[:n], text[n:]
    ix_dir = cache() / "shakespeare-train"
    if ix_dir.exists():
        idx = InfiniGramIndex.open(ix_dir)
    else:
        idx = build_index([train], ix_dir, progress=False)
    docs = [val[i:i + 1024] for i in range(0, len(val), 1024)]
    model = None
    if args.model:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(args.model).eval()
        model_name = args.model
    elif not args.no_model:
        model = train_tiny_gpt2(np.frombuffer(train.encode(), dtype=np.uint8), 256, cache() / "gpt2-tiny-shakespeare",
                                steps=args.train_steps)
        model_name = f"tiny char GPT-2 (2x128, {args.train_steps} steps on the training split)"
    res = analyze(idx, docs, n=5, max_tokens=1024, model=model, progress=False)
    title = f"Tiny Shakespeare validation ({len(res.effective_n):,} chars) vs index over the first 90%"
    paths = plot_analysis(res, args.out, prefix="shakespeare", title=title)
    return save_summary(res, Path(args.out) / "shakespeare_summary.json", corpus="tiny shakespeare, char level",
                        index_tokens=idx.num_tokens, model=model_name if model else None,
                        plots=[str(p) for p in paths], date=time.strftime("%Y-%m-%d"))


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", choices=["stdlib", "shakespeare"])
    ap.add_argument("--text", help="tinyshakespeare.txt (for shakespeare)")
    ap.add_argument("--model", help="a trained causal LM directory over the same vocabulary")
    ap.add_argument("--no-model", action="store_true", help="skip Figure 4")
    ap.add_argument("--train-steps", type=int, default=300)
    ap.add_argument("--out", default=str(HERE / "plots"))
    args = ap.parse_args(argv)
    s = run_stdlib(args) if args.corpus == "stdlib" else run_shakespeare(args)
    keep = {k: s[k] for k in ("tokens", "sparse_fraction", "effective_n")}
    keep["infgram_agreement"] = s["infgram"]["agreement"]
    keep["infgram_sparse_agreement"] = s["infgram_sparse"]["agreement"]
    keep["5gram_agreement"] = s["5gram"]["agreement"]
    if "neural" in s:
        keep["neural"] = {k: s["neural"][k] for k in ("tokens", "infgram_agreement", "infgram_sparse_agreement",
                                                      "neural_agreement")}
    print(json.dumps(keep, indent=1))


if __name__ == "__main__":
    main()
