"""Issue 20: can one learned mixing model serve as a default? Cross-domain and pooled fits, from
the caches eval/mixing_table.py left (no model pass; run both of its domains first).

    nice -n 10 .venv-test/bin/python eval/mixing_transfer.py

Full datastore only. For each domain's held-out sample (the same tokens as mixing_<domain>.json,
as is and decontaminated with the same dropped documents) it scores: the package's default two
λs, the two λs tuned in-domain, the in-domain learned model, the other domain's learned model,
and a model (and two λs) fitted on both domains' validation tokens pooled. The learned family
is the one mixing_table.py chose (mlp on both). Writes eval/results/mixing_transfer.json and the
pooled model, eval/results/mixing_model_pooled.json.
"""
from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import numpy as np

from infinigram_hf import TokenScores, fit_mixing, interpolate, tune_lambdas
from infinigram_hf.lm.mixture import DEFAULT_LAMBDA_DENSE, DEFAULT_LAMBDA_SPARSE

HERE = Path(__file__).resolve().parent
CACHE = Path.home() / ".cache" / "infinigram_hf_eval"
DOMAINS = ("stdlib", "linux")
FAMILY = dict(family="mlp", hidden=16)


def load_domain(domain: str) -> dict:
    """Validation/held-out scores (full datastore) and the decontamination mask of mixing_table.py's run."""
    table = json.loads((HERE / "results" / f"mixing_{domain}.json").read_text())
    cache = CACHE / f"gpt2-small-{domain}" / "mixing-cache"
    name = "{}-{}docs-{}tok-w{}-s{}-all.npz"
    val = TokenScores.load(cache / name.format("validation", table["val_docs"], table["val_tokens"],
                                               table["window"], table["stride"]))
    test = TokenScores.load(cache / name.format("heldout", table["test_docs"], table["test_tokens"],
                                                table["window"], table["stride"]))
    dc = table["decontamination"]
    dropped = [i for i, o in enumerate(dc["overlaps"]) if o >= dc["threshold"]]
    keep = ~np.isin(test.doc_index, dropped)
    assert int((~keep).sum()) == dc["dropped_tokens"], "decontamination does not match mixing_table.py's run"
    return dict(val=val, test=test, keep=keep, family=table["family"])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    data = {d: load_domain(d) for d in DOMAINS}
    assert all(v["family"] == FAMILY["family"] for v in data.values()), "mixing_table.py chose another family"
    learned = {d: fit_mixing(data[d]["val"], **FAMILY).model for d in DOMAINS}
    two = {d: tune_lambdas(data[d]["val"]) for d in DOMAINS}
    pooled_val = data["stdlib"]["val"].concat(data["linux"]["val"])
    learned["pooled"] = fit_mixing(pooled_val, **FAMILY).model
    two["pooled"] = tune_lambdas(pooled_val)

    rows = []
    for d in DOMAINS:
        other = next(o for o in DOMAINS if o != d)
        for setting, mask in (("as is", np.ones(len(data[d]["test"]), bool)), ("decontaminated", data[d]["keep"])):
            t = data[d]["test"].select(mask)
            r_def = interpolate(t, DEFAULT_LAMBDA_SPARSE, DEFAULT_LAMBDA_DENSE)
            ppls = {"default_two_lambda": r_def.perplexity,
                    "tuned_two_lambda": interpolate(t, two[d].lambda_sparse, two[d].lambda_dense).perplexity,
                    "pooled_two_lambda": interpolate(t, two["pooled"].lambda_sparse,
                                                     two["pooled"].lambda_dense).perplexity,
                    "learned_in_domain": interpolate(t, mixing=learned[d]).perplexity,
                    f"learned_from_{other}": interpolate(t, mixing=learned[other]).perplexity,
                    "learned_pooled": interpolate(t, mixing=learned["pooled"]).perplexity}
            rows.append(dict(domain=d, setting=setting, tokens=len(t), neural_ppl=r_def.neural_perplexity,
                             ppl=ppls, vs_default_pct={k: (v / r_def.perplexity - 1) * 100 for k, v in ppls.items()}))
    out = dict(date=datetime.date.today().isoformat(), datastore="all", family=FAMILY,
               default_lambdas=[DEFAULT_LAMBDA_SPARSE, DEFAULT_LAMBDA_DENSE],
               tuned_lambdas={k: [v.lambda_sparse, v.lambda_dense] for k, v in two.items()},
               val_tokens={d: len(data[d]["val"]) for d in DOMAINS}, rows=rows)
    if not args.no_write:
        (HERE / "results" / "mixing_transfer.json").write_text(json.dumps(out, indent=1) + "\n")
        learned["pooled"].save(HERE / "results" / "mixing_model_pooled.json")
    print("tuned λs (sparse, dense): " + ", ".join(f"{k} ({a:.2f}, {b:.2f})" for k, (a, b) in out["tuned_lambdas"].items())
          + f"; default ({DEFAULT_LAMBDA_SPARSE}, {DEFAULT_LAMBDA_DENSE})\n")
    print("| domain | held-out | tokens | neural | default 2λ | tuned 2λ | pooled 2λ | learned in-domain | "
          "learned other domain | learned pooled |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        cells = [f"{v:.2f} ({r['vs_default_pct'][k]:+.1f}%)" if k != "default_two_lambda" else f"{v:.2f}"
                 for k, v in r["ppl"].items()]
        print(f"| {r['domain']} | {r['setting']} | {r['tokens']:,} | {r['neural_ppl']:.2f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
