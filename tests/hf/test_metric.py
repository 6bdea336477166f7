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
