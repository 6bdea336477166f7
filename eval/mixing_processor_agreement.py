"""Issue 20: the processor's mixture is perplexity()'s, token by token, on real data.

A level model (default: `levels=("3",)`, an MLP 16 over the default features; `--levels none`:
the two-way model) is fitted on validation documents of the stdlib split. Then every token of
some held-out documents is scored twice, for that model and for the two λs:
- by `token_scores` + `learned_logprob`, the path behind `perplexity()`;
- by `InfiniGramLogitsProcessor` under teacher forcing: the eval GPT-2's logits at each position
  of [BOS] + document are the scores, and the processor's log-probability of the next token is
  read off.

The processor is run with its one C step (`mix_step`) and with the numpy path. The
script reports the largest and mean absolute differences per token and both perplexities.
Documents are cut to fit one model window, so the neural side sees the same context in both.

    nice -n 10 .venv-test/bin/python eval/mixing_processor_agreement.py
    nice -n 10 .venv-test/bin/python eval/mixing_processor_agreement.py --levels L-1 L/2 1 --docs 10
    nice -n 10 .venv-test/bin/python eval/mixing_processor_agreement.py --levels none
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ppl_setup  # noqa: E402

from infinigram_hf import InfiniGramLogitsProcessor, fit_mixing, token_scores  # noqa: E402
from infinigram_hf.lm.learned_mixing import learned_logprob  # noqa: E402
from infinigram_hf.lm.mixture import mixture_logprob  # noqa: E402
from infinigram_hf.lm.orders import check_levels  # noqa: E402


def processor_logprobs(model, index, mixing, docs, bos: int, fused: bool, lambdas) -> np.ndarray:
    """log P(next token) from the processor at every position of [BOS] + doc, doc by doc."""
    out = []
    proc = InfiniGramLogitsProcessor(index, *lambdas, mixing=mixing, eos_token_id=bos)
    proc._fused = fused
    with torch.inference_mode():
        for d in docs:
            seq = torch.from_numpy(np.concatenate([[bos], d])).long()[None]
            logits = model(input_ids=seq, attention_mask=torch.ones_like(seq)).logits[0].float()
            for j in range(len(d)):
                logp = proc(seq[:, : j + 1], logits[j][None].clone())
                out.append(float(logp[0, seq[0, j + 1]]))
    return np.array(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--levels", nargs="+", default=["3"], help="the learned model's levels ('none': two-way)")
    ap.add_argument("--lambdas", type=float, nargs=2, default=(0.6, 0.3), help="the two λs also checked")
    ap.add_argument("--fit-docs", type=int, default=20, help="validation documents to fit the model on")
    ap.add_argument("--docs", type=int, default=20, help="held-out documents to compare on")
    ap.add_argument("--max-len", type=int, default=500, help="tokens per document (one model window)")
    args = ap.parse_args(argv)
    levels = () if args.levels == ["none"] else check_levels(args.levels)
    torch.set_num_threads(2)
    model, _ = ppl_setup.load_model(train_if_missing=False)
    bos = int(model.config.eos_token_id)
    index = ppl_setup.reference_index("all", progress=False)
    cut = lambda docs, n: [d[: args.max_len] for d in docs if len(d) >= 2][:n]  # noqa: E731
    t0 = time.time()
    val = token_scores(model, None, cut(ppl_setup.split_docs("validation"), args.fit_docs), index,
                       levels=levels or None, window=512, stride=448, progress=False)
    mixing = fit_mixing(val, levels=levels or None).model
    docs = cut(ppl_setup.split_docs("heldout"), args.docs)
    scores = token_scores(model, None, docs, index, levels=levels or None, window=512, stride=448, progress=False)
    print(f"levels {list(levels) or 'none (two-way)'}: fitted on {len(val):,} validation tokens; {len(scores):,} "
          f"held-out tokens in {len(docs)} documents ({time.time() - t0:.0f} s)", flush=True)
    for label, mix, want in (("learned", mixing, learned_logprob(scores, mixing)),
                             (f"two λs {args.lambdas}", None, mixture_logprob(scores, *args.lambdas))):
        for fused in (True, False):
            t0 = time.time()
            got = processor_logprobs(model, index, mix, docs, bos, fused, args.lambdas)
            diff = np.abs(got - want)
            print(f"{label}, processor {'one C step' if fused else 'numpy path'}: max |Δ log p| {diff.max():.2e}, "
                  f"mean {diff.mean():.2e} over {len(got):,} tokens; perplexity {math.exp(-got.mean()):.4f} vs "
                  f"perplexity() {math.exp(-want.mean()):.4f} ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
