"""Analyses of §4: agreement by effective n (∞-gram, n-gram, sparse only) against a brute-force
reference, neural-probability buckets with a tiny GPT-2 built from a config, plots, JSON summary,
and the `analyze` CLI."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from infinigram_hf import build_index
from infinigram_hf.analysis import analyze, neural_token_probs, plot_analysis, save_summary
from infinigram_hf.cli import main as cli_main
from lm_reference import LMReference

CORPUS = ["the cat sat on the mat. the dog sat on the log.", "a cat and a dog. the cat ran to the mat.",
          "on the mat the cat sat and the dog ran."]
HELDOUT = ["the dog sat on the mat and the cat ran.", "a dog and the cat sat on a log."]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return build_index(CORPUS, tmp_path_factory.mktemp("an") / "ix", progress=False)


def test_agreement_matches_reference(index):
    res = analyze(index, HELDOUT, n=5, progress=False)
    ref = LMReference([list(t.encode()) for t in CORPUS], 255)
    probs, ns, sparse, gprobs, gns = [], [], [], [], []
    for t in HELDOUT:
        ids = list(t.encode())
        for i in range(1, len(ids)):
            p, L, sp = ref.infgram(ids[:i], ids[i], 10 ** 6, eod=True)
            probs.append(p), ns.append(L + 1), sparse.append(sp)
            p, L, _ = ref.infgram(ids[:i], ids[i], 4, eod=True)
            gprobs.append(p), gns.append(L + 1)
    assert np.allclose(res.infgram_prob, probs) and np.array_equal(res.effective_n, ns)
    assert np.array_equal(res.sparse, sparse)
    assert np.allclose(res.ngram_prob, gprobs) and np.array_equal(res.ngram_effective_n, gns)
    assert res.ngram_effective_n.max() <= 5
    a = res.by_n("infgram")
    assert a.count.sum() == len(probs)
    assert a.overall == pytest.approx(np.mean(np.array(probs) > 0.5))
    s = res.by_n("infgram", sparse_only=True)
    assert s.count.sum() == sum(sparse)
    summ = res.summary()
    assert summ["tokens"] == len(probs)
    assert summ["effective_n"]["median"] == np.median(ns)
    assert summ["5gram"]["agreement"] == pytest.approx(np.mean(np.array(gprobs) > 0.5))


def tiny_gpt2(vocab: int = 256, n_positions: int = 16):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=vocab, n_positions=n_positions, n_embd=16, n_layer=1, n_head=2,
                     bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg).eval()


def test_neural_probs_and_sliding_window():
    import torch

    model = tiny_gpt2(n_positions=64)
    ids = np.array(random.Random(0).choices(range(256), k=40))
    full = neural_token_probs(model, ids)
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor(ids)[None]).logits[0], -1)
    want = lp[:-1].gather(1, torch.tensor(ids[1:])[:, None]).squeeze(1).exp().numpy()
    assert np.isnan(full[0]) and np.allclose(full[1:], want, rtol=1e-5)
    win = neural_token_probs(model, ids, window=16, stride=8)  # several windows
    assert np.all((win[1:] > 0) & (win[1:] <= 1))
    assert np.allclose(win[1:16], want[:15], rtol=1e-5)  # the first window is exact


def test_neural_buckets_plots_and_summary(index, tmp_path):
    model = tiny_gpt2()
    res = analyze(index, HELDOUT, model=model, progress=False)
    b = res.by_neural_bucket()
    assert b["count"].sum() == len(res.infgram_prob)
    assert np.all(b["agree"] <= b["count"]) and np.all(b["sparse_agree"] <= b["sparse_count"])
    paths = plot_analysis(res, tmp_path, prefix="t")
    assert [p.name for p in paths] == ["t_agreement.png", "t_effective_n.png", "t_neural.png"]
    assert all(p.stat().st_size > 1000 for p in paths)
    s = save_summary(res, tmp_path / "s.json", corpus="x")
    loaded = json.loads((tmp_path / "s.json").read_text())
    assert loaded["corpus"] == "x" and loaded["neural"]["tokens"] == s["neural"]["tokens"]
    assert sum(loaded["neural"]["tokens"]) == len(res.infgram_prob)


def test_analysis_arguments(index):
    with pytest.raises(ValueError, match="threshold"):
        analyze(index, HELDOUT, threshold=1.5, progress=False)
    res = analyze(index, HELDOUT, progress=False)
    with pytest.raises(ValueError, match="neural"):
        res.by_neural_bucket()


def test_analyze_cli(index, tmp_path, capsys):
    for i, t in enumerate(HELDOUT):
        (tmp_path / f"h{i}.txt").write_text(t)
    model_dir = tmp_path / "model"
    tiny_gpt2().save_pretrained(model_dir)
    rc = cli_main(["analyze", str(index.paths[0]), "--texts", str(tmp_path / "h0.txt"), str(tmp_path / "h1.txt"),
                   "--model", str(model_dir), "--out", str(tmp_path / "plots"), "--prefix", "x", "--no-progress"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["plots"]) == 3 and out["tokens"] == sum(len(t) - 1 for t in HELDOUT)
    assert (tmp_path / "plots" / "x_summary.json").is_file()
