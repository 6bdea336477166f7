"""The `evaluate` metric module: loads offline by path, with a model object or a local model dir."""
from __future__ import annotations

from pathlib import Path

import pytest

from hf_tiny import TEXTS, tiny_index, tiny_model, tiny_tok  # noqa: F401
from infinigram_hf.metrics import PERPLEXITY_METRIC_PATH
from infinigram_hf.hf.perplexity import perplexity

evaluate = pytest.importorskip("evaluate")
DOCS = [TEXTS[1][500:700], "def f(x):\n    return x + 1\n"]


@pytest.fixture(scope="module")
def metric(tmp_path_factory):
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_EVALUATE_OFFLINE", "1")
    return evaluate.load(PERPLEXITY_METRIC_PATH, cache_dir=str(tmp_path_factory.mktemp("evaluate")))


def test_metric_path_follows_evaluate_naming():
    p = Path(PERPLEXITY_METRIC_PATH)
    assert (p / f"{p.name}.py").is_file()


def test_metric_with_model_object_matches_perplexity(metric, tiny_model, tiny_tok, tiny_index):
    out = metric.compute(predictions=DOCS, model=tiny_model, index=tiny_index, tokenizer=tiny_tok, window=32,
                         stride=16, lambda_sparse=0.6, lambda_dense=0.2)
    want = perplexity(tiny_model, tiny_tok, DOCS, tiny_index, window=32, stride=16, lambda_sparse=0.6,
                      lambda_dense=0.2, progress=False)
    assert out["perplexity"] == pytest.approx(want.perplexity)
    assert out["neural_perplexity"] == pytest.approx(want.neural_perplexity)
    assert out["relative_improvement"] == pytest.approx(want.relative_improvement)
    assert out["num_tokens"] == want.num_tokens and len(out["perplexities"]) == len(DOCS)


def test_metric_with_local_model_dir_and_index_path(metric, tiny_model, tiny_tok, tiny_index, tmp_path):
    tiny_model.save_pretrained(tmp_path / "model")
    tiny_tok.save_pretrained(tmp_path / "model")
    out = metric.compute(predictions=DOCS, model=str(tmp_path / "model"), index=str(tiny_index.paths[0]),
                         window=32, stride=16)
    want = perplexity(tiny_model, tiny_tok, DOCS, tiny_index, window=32, stride=16, progress=False)
    assert out["perplexity"] == pytest.approx(want.perplexity, rel=1e-5)
    with pytest.raises(ValueError, match="model="):
        metric.compute(predictions=DOCS, index=tiny_index)


def test_metric_with_learned_mixing_matches_perplexity(metric, tiny_model, tiny_tok, tiny_index, tmp_path):
    """mixing= (a MixingModel's file) gives perplexity(mixing=)'s numbers, per text too."""
    import math

    import numpy as np

    from infinigram_hf import MixingModel

    model = MixingModel("logistic", ("sparse", "log_effective_n", "log_context_count"), np.zeros(3), np.ones(3),
                        [(np.array([[0.3, 0.8, -0.2]]), np.array([-1.0]))])
    model.save(tmp_path / "m.json")
    out = metric.compute(predictions=DOCS, model=tiny_model, index=tiny_index, tokenizer=tiny_tok, window=32,
                         stride=16, mixing=str(tmp_path / "m.json"))
    want = perplexity(tiny_model, tiny_tok, DOCS, tiny_index, window=32, stride=16, mixing=model, progress=False)
    assert out["perplexity"] == pytest.approx(want.perplexity) and out["mixing"] == "logistic"
    two = perplexity(tiny_model, tiny_tok, DOCS, tiny_index, window=32, stride=16, progress=False)
    assert not math.isclose(out["perplexity"], two.perplexity)
    # per-text perplexities average back to the total (token-weighted in log space)
    n = np.bincount(want.scores.doc_index)
    total = math.exp((n * np.log(out["perplexities"])).sum() / n.sum())
    assert total == pytest.approx(want.perplexity)


def test_metric_with_several_orders_matches_perplexity(metric, tiny_model, tiny_tok, tiny_index, tmp_path):
    """A model mixing several orders (levels) through the metric: perplexity(mixing=)'s numbers."""
    import numpy as np

    from infinigram_hf import MixingModel

    rng = np.random.default_rng(0)
    model = MixingModel("logistic", ("sparse", "log_effective_n"), np.zeros(4), np.ones(4),
                        [(rng.normal(size=(4, 4)), rng.normal(size=4))], levels=("L-1", "1"))
    model.save(tmp_path / "orders.json")
    out = metric.compute(predictions=DOCS, model=tiny_model, index=tiny_index, tokenizer=tiny_tok, window=32,
                         stride=16, mixing=str(tmp_path / "orders.json"))
    want = perplexity(tiny_model, tiny_tok, DOCS, tiny_index, window=32, stride=16, mixing=model, progress=False)
    assert out["perplexity"] == pytest.approx(want.perplexity) and out["levels"] == ["L-1", "1"]
