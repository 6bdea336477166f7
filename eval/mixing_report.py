"""The tables of eval/mixing_table.py from cached token scores: fits (two λs, learned two-way
mixing, and learned mixing over several orders on validation), held-out perplexities per
datastore size, as is and decontaminated, and where the gain comes from (effective n,
sparse/dense). Kept apart from the caching so refits are quick."""
from __future__ import annotations

import datetime
import json
from pathlib import Path

import numpy as np

from infinigram_hf import fit_mixing, interpolate, tune_lambdas
from infinigram_hf.decontaminate import IndexDecontaminator
from infinigram_hf.lm.orders import DEFAULT_LEVELS, level_scores

HERE = Path(__file__).resolve().parent
FAMILIES = {"logistic": dict(family="logistic"), "mlp": dict(family="mlp", hidden=16)}
DEV_SHARE = 0.25  # validation documents held back to choose the family


def ppl(logp: np.ndarray) -> float:
    return float(np.exp(-logp.mean())) if len(logp) else float("nan")


def rel(p: float, p0: float) -> float:
    return (1 - (p - 1) / (p0 - 1)) * 100


def add_levels(scores, docs, index, levels=DEFAULT_LEVELS):
    """The scores with the levels' columns (mixing several orders) computed against `index`: the
    longest match of every scored token is already in the scores (effective n − 1), so only the
    shorter suffixes are queried. Each document's scored tokens are its last ones."""
    per_doc = np.bincount(scores.doc_index, minlength=len(docs))
    probs, counts = [], []
    start = 0
    for d, k in zip(docs, per_doc.tolist()):
        suffix_len = np.zeros(len(d), np.int64)
        suffix_len[len(d) - k:] = np.maximum(scores.effective_n[start:start + k] - 1, 0)
        p, c = level_scores(index, np.asarray(d, np.int64), suffix_len, levels)
        probs.append(p[len(d) - k:])
        counts.append(c[len(d) - k:])
        start += k
    return scores.with_features(level_names=levels, level_prob=np.concatenate(probs),
                                level_count=np.concatenate(counts))


def contaminated_docs(test_docs, index) -> tuple[list, list]:
    """(indexes of the held-out documents with >= 80% of their token 13-grams in `index`, the
    full datastore; every document's overlap)."""
    deco = IndexDecontaminator(index, n=13, threshold=0.8)
    overlaps = [deco.overlap(d) for d in test_docs]
    return [i for i, o in enumerate(overlaps) if o >= deco.threshold], overlaps


def choose_family(val) -> tuple[str, dict]:
    """Fit each family on 75% of the validation documents, score the other 25%: the family with
    the lower dev perplexity wins (then it is refitted on all of validation)."""
    docs = np.unique(val.doc_index)
    dev_docs = np.random.default_rng(0).permutation(docs)[: max(1, int(len(docs) * DEV_SHARE))]
    dev = np.isin(val.doc_index, dev_docs)
    out = {}
    for name, kw in FAMILIES.items():
        fit = fit_mixing(val.select(~dev), **kw)
        out[name] = interpolate(val.select(dev), mixing=fit.model).perplexity
    two = tune_lambdas(val.select(~dev))
    out["two_lambda"] = interpolate(val.select(dev), two.lambda_sparse, two.lambda_dense).perplexity
    best = min(FAMILIES, key=lambda k: out[k])
    return best, out


def buckets(test, lp_two, lp_learn, lam_two, lam_learn, lp_orders) -> list:
    """Per effective-n bucket and sparse/dense: tokens, perplexities and mean λ."""
    rows = []
    n = test.effective_n
    edges = [(0, 0), (1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 32), (33, 128), (129, 10**9)]
    for lo, hi in edges:
        for sp_name, sp in (("sparse", True), ("dense", False)):
            sel = (n >= lo) & (n <= hi) & (test.sparse == sp)
            if not sel.any():
                continue
            nn, two, learn = ppl(test.neural_logprob[sel]), ppl(lp_two[sel]), ppl(lp_learn[sel])
            rows.append(dict(n=f"{lo}" if lo == hi else f"{lo}-{hi if hi < 10**9 else '∞'}", kind=sp_name,
                             tokens=int(sel.sum()), share=float(sel.mean()), neural_ppl=nn, two_lambda_ppl=two,
                             learned_ppl=learn, orders_ppl=ppl(lp_orders[sel]), mean_lambda_two=float(lam_two[sel].mean()),
                             mean_lambda_learned=float(lam_learn[sel].mean()),
                             # the share of the total log-likelihood gain of learned over two-λ
                             gain_nats=float((lp_learn[sel] - lp_two[sel]).sum())))
    total_gain = sum(r["gain_nats"] for r in rows)
    for r in rows:
        r["gain_share"] = r["gain_nats"] / total_gain if total_gain else float("nan")
    return rows


def report(args, spec, val_docs, test_docs, scores) -> None:
    dropped, overlaps = contaminated_docs(test_docs, spec["index"]("all"))
    val_all, test_all = scores["all"]
    keep_mask = ~np.isin(test_all.doc_index, dropped)

    family, dev = choose_family(val_all)
    levels = tuple(getattr(args, "levels", None) or DEFAULT_LEVELS)
    rows, fits, orders = [], {}, {}
    for frac, (val, test) in scores.items():
        two = tune_lambdas(val)
        fit = fit_mixing(val, **FAMILIES[family], info=dict(domain=args.domain, datastore=frac))
        other = {k: fit_mixing(val, **kw).model for k, kw in FAMILIES.items() if k != family}
        fits[frac] = fit
        index = spec["index"](frac)
        val, test = add_levels(val, val_docs, index, levels), add_levels(test, test_docs, index, levels)
        scores[frac] = (val, test)
        orders[frac] = fit_mixing(val, family="mlp", hidden=16, levels=levels,
                                  info=dict(domain=args.domain, datastore=frac))
        for setting, mask in (("as is", np.ones(len(test), bool)), ("decontaminated", keep_mask)):
            t = test.select(mask)
            r_two = interpolate(t, two.lambda_sparse, two.lambda_dense)
            r_learn = interpolate(t, mixing=fit.model)
            r_orders = interpolate(t, mixing=orders[frac].model)
            row = dict(datastore=frac, setting=setting, datastore_tokens=spec["index"](frac).num_tokens,
                       tokens=len(t), docs=int(len(np.unique(t.doc_index))), neural_ppl=r_two.neural_perplexity,
                       lambda_sparse=two.lambda_sparse, lambda_dense=two.lambda_dense,
                       two_lambda_ppl=r_two.perplexity, two_lambda_improvement=r_two.relative_improvement,
                       learned_ppl=r_learn.perplexity, learned_improvement=r_learn.relative_improvement,
                       orders_ppl=r_orders.perplexity, orders_improvement=r_orders.relative_improvement,
                       sparse_fraction=r_two.sparse_fraction)
            for k, m in other.items():
                row[f"{k}_ppl"] = interpolate(t, mixing=m).perplexity
            rows.append(row)
    val, test = scores["all"]
    two = tune_lambdas(val)
    model = fits["all"].model
    lam_two = np.where(test.sparse, two.lambda_sparse, two.lambda_dense)
    from infinigram_hf.lm.learned_mixing import learned_logprob
    from infinigram_hf.lm.mixture import mixture_logprob
    lp_two = mixture_logprob(test, two.lambda_sparse, two.lambda_dense)
    lp_learn = learned_logprob(test, model)
    lp_orders = learned_logprob(test, orders["all"].model)
    by_bucket = buckets(test, lp_two, lp_learn, lam_two, model.lambdas(test), lp_orders)
    d = test.select(keep_mask)
    by_bucket_deco = buckets(d, lp_two[keep_mask], lp_learn[keep_mask], lam_two[keep_mask], model.lambdas(d),
                             lp_orders[keep_mask])
    mean_weights = dict(zip(["neural", "infgram"] + [f"level {n}" for n in levels],
                            orders["all"].model.weights(test).mean(axis=0).tolist()))

    info = json.loads((spec["model_dir"] / "train_info.json").read_text())
    out = dict(date=datetime.date.today().isoformat(), domain=args.domain, model=info, window=args.window,
               stride=args.stride, val_docs=len(val_docs), val_tokens=len(val_all), test_docs=len(test_docs),
               test_tokens=len(test_all), features=list(fits["all"].model.features), family=family, family_dev_ppl=dev,
               decontamination=dict(n=13, threshold=0.8, dropped_docs=len(dropped),
                                    dropped_tokens=int((~keep_mask).sum()), overlaps=overlaps),
               levels=list(levels), orders_mean_weights=mean_weights,
               rows=rows, by_bucket=by_bucket, by_bucket_decontaminated=by_bucket_deco)
    if not args.no_write:
        (HERE / "results").mkdir(exist_ok=True)
        # the whole splits (--val-tokens 0 --test-tokens 0) under their own names
        tag = args.domain + ("_full" if not args.val_tokens and not args.test_tokens else "")
        if levels != DEFAULT_LEVELS:  # other levels: their own files ("L/2" written "Lhalf")
            tag += "_levels_" + "_".join(n.replace("/2", "half").replace("-", "minus") for n in levels)
        (HERE / "results" / f"mixing_{tag}.json").write_text(json.dumps(out, indent=1) + "\n")
        model.save(HERE / "results" / f"mixing_model_{tag}.json")
        orders["all"].model.save(HERE / "results" / f"mixing_orders_model_{tag}.json")
    print_tables(out)


def print_tables(out: dict) -> None:
    dc = out["decontamination"]
    print(f"\n{out['domain']}: held-out {out['test_docs']} docs / {out['test_tokens']:,} tokens; fit on "
          f"{out['val_docs']} validation docs / {out['val_tokens']:,} tokens; window {out['window']}, stride "
          f"{out['stride']}; family {out['family']} (dev PPL: "
          + ", ".join(f"{k} {v:.3f}" for k, v in out["family_dev_ppl"].items())
          + f"); decontaminated: {dc['dropped_docs']} docs / {dc['dropped_tokens']:,} tokens dropped "
          f"(>= {dc['threshold']:.0%} of token 13-grams in the full datastore); several orders = levels "
          f"{', '.join(out.get('levels', DEFAULT_LEVELS))}\n")
    print("| datastore | held-out | tokens | neural PPL | two-λ PPL (λs, λd) | two-λ impr. | learned PPL | "
          "learned impr. | other family PPL | several orders PPL | several orders impr. |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in out["rows"]:
        other = [f"{k[:-4]} {v:.2f}" for k, v in r.items() if k.endswith("_ppl") and k[:-4] in FAMILIES]
        print(f"| {r['datastore']} ({r['datastore_tokens'] / 1e6:.1f}M) | {r['setting']} | {r['tokens']:,} | "
              f"{r['neural_ppl']:.2f} | {r['two_lambda_ppl']:.2f} ({r['lambda_sparse']:.2f}, {r['lambda_dense']:.2f}) | "
              f"{r['two_lambda_improvement']:.1f}% | **{r['learned_ppl']:.2f}** | **{r['learned_improvement']:.1f}%** | "
              f"{', '.join(other)} | **{r['orders_ppl']:.2f}** | **{r['orders_improvement']:.1f}%** |")
    for key, title in (("by_bucket", "as is"), ("by_bucket_decontaminated", "decontaminated")):
        print(f"\nwhere the gain comes from (full datastore, {title}):")
        print("| eff. n | kind | tokens | share | neural | two-λ | learned | several orders | "
              "mean λ two / learned | share of gain (learned) |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for b in out[key]:
            print(f"| {b['n']} | {b['kind']} | {b['tokens']:,} | {100 * b['share']:.1f}% | {b['neural_ppl']:.1f} | "
                  f"{b['two_lambda_ppl']:.1f} | {b['learned_ppl']:.1f} | {b['orders_ppl']:.1f} | "
                  f"{b['mean_lambda_two']:.2f} / "
                  f"{b['mean_lambda_learned']:.2f} | {100 * b['gain_share']:.0f}% |")
    print("\nmean weight per component of the several-orders model (held-out, full datastore):",
          {k: round(v, 3) for k, v in out["orders_mean_weights"].items()})
