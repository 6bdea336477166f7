"""Issue 20, the next step: mix the model with the ∞-gram estimate at several suffix lengths, not
with the longest suffix alone. An experiment on the caches of eval/mixing_table.py (run it first);
it is not wired into the package yet (eval/RESULTS.md, "Several orders").

P(y | x) = Σ_k w_k(x) · P_k(y | x), with components k: the model, the ∞-gram (longest matched
suffix, length L), and the n-gram estimates of the suffixes of length L − 1, ⌊L/2⌋ and 1 (each
count(suffix + y) / count(suffix); each at most a distribution over y, end-of-document takes the
rest). w(x) = softmax(MLP(features)): the five default features of learned mixing and ln(1 +
count) of each shorter suffix -- all of the context only, so the mixture is a proper
(sub-)distribution. A component that does not exist for a context (a suffix length < 0 or ≥ L,
an unseen suffix) gets weight 0. Fitted on validation by maximising the log-likelihood (full-batch
L-BFGS), reported on held-out, as is and decontaminated, against the two λs and the two-way
learned mixing fitted on the same tokens.

    nice .venv-test/bin/python eval/mixing_orders.py --domain stdlib            # the samples
    nice .venv-test/bin/python eval/mixing_orders.py --domain stdlib --full     # the whole splits
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mixing_report  # noqa: E402
import mixing_table  # noqa: E402

from infinigram_hf import TokenScores, fit_mixing, interpolate, tune_lambdas  # noqa: E402
from infinigram_hf.lm.learned_mixing import DEFAULT_FEATURES, feature_matrix  # noqa: E402

HERE = Path(__file__).resolve().parent
LEVELS = ("L-1", "L/2", "1")  # the shorter suffixes mixed in besides the longest one


def suffix_lengths(longest: int) -> list:
    """The suffix length of each of LEVELS for a context whose longest match has `longest` tokens
    (-1: the level does not exist, being no shorter than the longest match)."""
    out = []
    for name, m in zip(LEVELS, (longest - 1, longest // 2, 1)):
        out.append(m if 0 <= m < longest else -1)
    return out


def level_columns(index, docs: list, scores: TokenScores) -> np.ndarray:
    """(tokens, 2·len(LEVELS)): P_m(actual token) and ln(1 + count of the suffix) per level."""
    out = np.zeros((len(scores), 2 * len(LEVELS)))
    k = 0
    total = index.num_tokens
    for d in docs:
        d = d.tolist()
        for t in range(len(d)):  # (token_scores with BOS: position t of the document is scored)
            for j, m in enumerate(suffix_lengths(int(scores.effective_n[k]) - 1)):
                if m < 0:
                    continue
                suffix = d[t - m:t]
                c = index.count(suffix) if m else total
                out[k, 2 * j] = index.count(suffix + [d[t]]) / c if c else 0.0
                out[k, 2 * j + 1] = np.log1p(c)
            k += 1
    if k != len(scores):
        raise SystemExit(f"the cache holds {len(scores)} tokens, the documents {k}: run eval/mixing_table.py again")
    return out


class OrderMixture(torch.nn.Module):
    """w(x) = softmax(MLP(standardised features)) over the components."""

    def __init__(self, k_in: int, k_out: int, hidden: int, mean, std) -> None:
        super().__init__()
        self.mean, self.std = mean, std
        self.net = torch.nn.Sequential(torch.nn.Linear(k_in, hidden), torch.nn.Tanh(),
                                       torch.nn.Linear(hidden, k_out)).double()

    def nll_per_token(self, x, comp, avail):
        z = self.net((x - self.mean) / self.std).masked_fill(~avail, -1e30)
        return -torch.log((torch.softmax(z, -1) * comp).sum(-1).clamp_min(1e-300))


def tensors(s: TokenScores, lev: np.ndarray):
    x = np.concatenate([feature_matrix(s, DEFAULT_FEATURES), lev[:, 1::2]], axis=1)
    comp = np.concatenate([np.exp(s.neural_logprob)[:, None], s.infgram_prob[:, None], lev[:, 0::2]], axis=1)
    avail = np.concatenate([np.ones((len(s), 1), bool), (s.effective_n > 0)[:, None], lev[:, 1::2] > 0], axis=1)
    return torch.tensor(x), torch.tensor(comp), torch.tensor(avail)


def fit(val, hidden: int, seed: int = 0, max_iter: int = 300) -> OrderMixture:
    x, comp, avail = val
    torch.manual_seed(seed)
    m = OrderMixture(x.shape[1], comp.shape[1], hidden, x.mean(0), x.std(0) + 1e-9)
    opt = torch.optim.LBFGS(m.parameters(), max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = m.nll_per_token(x, comp, avail).mean() + 1e-4 * sum((p ** 2).sum() for n, p in m.named_parameters()
                                                                    if n.endswith("weight"))
        loss.backward()
        return loss

    opt.step(closure)
    return m


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--domain", choices=["stdlib", "linux"], required=True)
    ap.add_argument("--full", action="store_true", help="the whole splits' caches (else the samples')")
    ap.add_argument("--hidden", type=int, default=16)
    args = ap.parse_args(argv)
    t0 = time.time()
    spec = mixing_table.domain_spec(args.domain)
    cap = (None, None) if args.full else (15_000, 30_000)
    index = spec["index"]("all")
    data = {}
    for split, c in zip(("validation", "heldout"), cap):
        docs = mixing_table.sample_docs(spec["docs"](split), c, 1024)
        s = mixing_table.load_cached(spec, split, args.full)
        data[split] = (docs, s, level_columns(index, docs, s))
    (_, val, val_lev), (test_docs, test, test_lev) = data["validation"], data["heldout"]
    print(f"{args.domain}: validation {len(val):,} tokens, held-out {len(test):,}; levels in {time.time() - t0:.0f} s",
          flush=True)

    model = fit(tensors(val, val_lev), args.hidden)
    two = tune_lambdas(val)
    learned = fit_mixing(val).model
    dropped, _ = mixing_report.contaminated_docs(test_docs, index)  # (as the tables decontaminate)
    rows = []
    subsets = [("as is", np.ones(len(test), bool)), ("decontaminated", ~np.isin(test.doc_index, dropped))]
    for name, keep in subsets:
        t = test.select(keep)
        with torch.no_grad():
            orders = float(torch.exp(model.nll_per_token(*tensors(t, test_lev[keep])).mean()))
        neural = interpolate(t, 0, 0).perplexity
        two_ppl = interpolate(t, two.lambda_sparse, two.lambda_dense).perplexity
        learned_ppl = interpolate(t, mixing=learned).perplexity
        rows.append(dict(held_out=name, tokens=int(keep.sum()), neural=neural, two_lambda=two_ppl,
                         learned=learned_ppl, orders=orders,
                         improvement={k: mixing_report.rel(v, neural) for k, v in
                                      (("two_lambda", two_ppl), ("learned", learned_ppl), ("orders", orders))}))
    with torch.no_grad():
        x, comp, avail = tensors(test, test_lev)
        w = torch.softmax(model.net((x - model.mean) / model.std).masked_fill(~avail, -1e30), -1).numpy()
    mean_w = {c: float(v) for c, v in zip(("neural", "∞-gram (L)") + LEVELS, w.mean(0))}
    print("| held-out | tokens | neural | two-λ | learned (2-way) | several orders |\n|---|---:|---:|---:|---:|---:|")
    for r in rows:
        i = r["improvement"]
        print(f"| {r['held_out']} | {r['tokens']:,} | {r['neural']:.2f} | {r['two_lambda']:.2f} ({i['two_lambda']:.1f}%) "
              f"| {r['learned']:.2f} ({i['learned']:.1f}%) | **{r['orders']:.2f} ({i['orders']:.1f}%)** |")
    print("mean weight per component on held-out:", {k: round(v, 3) for k, v in mean_w.items()})
    out = dict(domain=args.domain, full=args.full, hidden=args.hidden, levels=list(LEVELS), rows=rows,
               mean_weights=mean_w, validation_tokens=len(val), seconds=round(time.time() - t0, 1),
               command=" ".join(["eval/mixing_orders.py"] + (argv if argv is not None else sys.argv[1:])))
    path = HERE / "results" / f"mixing_orders_{args.domain}{'_full' if args.full else ''}.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
