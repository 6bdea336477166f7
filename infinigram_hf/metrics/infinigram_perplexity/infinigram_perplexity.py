"""`evaluate` metric: perplexity of a causal LM interpolated with an ∞-gram index.

Load it offline from the installed package (evaluate wants the script named like its folder):

    >>> import evaluate
    >>> from infinigram_hf.metrics import PERPLEXITY_METRIC_PATH
    >>> metric = evaluate.load(PERPLEXITY_METRIC_PATH)                       # doctest: +SKIP
    >>> metric.compute(predictions=texts, model="path/to/model", index="path/to/index")  # doctest: +SKIP

Unlike the stock `perplexity` metric it takes a model object or a local model directory (no hub
id needed) and slides a window with a stride instead of truncating.
"""
from __future__ import annotations

import os
from typing import Any, Optional

import datasets
import evaluate

from infinigram_hf import InfiniGramIndex
from infinigram_hf.hf.perplexity import perplexity
from infinigram_hf.lm.mixture import DEFAULT_LAMBDA_DENSE, DEFAULT_LAMBDA_SPARSE

_CITATION = """\
@article{Liu2024InfiniGram,
  title={Infini-gram: Scaling Unbounded n-gram Language Models to a Trillion Tokens},
  author={Liu, Jiacheng and Min, Sewon and Zettlemoyer, Luke and Choi, Yejin and Hajishirzi, Hannaneh},
  journal={arXiv preprint arXiv:2401.17377},
  year={2024}
}
"""

_DESCRIPTION = """\
Perplexity of a causal language model alone and interpolated with the ∞-gram LM of an
infinigram_hf index: P(y|x) = λ·P_∞(y|x) + (1−λ)·P_neural(y|x), with λ_sparse for sparse ∞-gram
estimates and λ_dense for the rest. The model scores each text with a sliding window (overlap is
context only); the ∞-gram conditions on the full text prefix. Also reports the relative
improvement (1 − (PPL−1)/(PPL₀−1))·100%.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): the texts to score, one document each.
    model: a transformers causal LM object, or the path of a local model directory.
    index: an open `infinigram_hf.InfiniGramIndex`, or the path of an index directory.
    tokenizer (optional): the tokenizer object or directory; defaults to the model directory's,
        then to the one saved inside the index.
    window (int, default min(1024, the model's context)), stride (int, default window // 2): the
        sliding window.
    lambda_sparse (float), lambda_dense (float): mixture weights.
    mixing (optional): a learned mixing model (`MixingModel`, or the path of its JSON file, from
        `infinigram_hf.fit_mixing`) choosing λ per token, or mixing several orders (a model fit
        with `levels`); the two λs are then unused.
    batch_size (int, default 8): windows per forward pass.
    add_bos (bool, default True): condition each text's first token on BOS/EOS.
    device (str, optional): where to put a model loaded from a path (e.g. "cuda").
Returns:
    perplexity, neural_perplexity, relative_improvement (percent), num_tokens, sparse_fraction,
    lambda_sparse, lambda_dense, and per-text `perplexities` / `neural_perplexities`.
Examples:
    >>> metric = evaluate.load(PERPLEXITY_METRIC_PATH)                             # doctest: +SKIP
    >>> metric.compute(predictions=["def f():\\n    pass\\n"], model=model, index=index,
    ...                tokenizer=tok)["perplexity"]                                 # doctest: +SKIP
"""


def _load_tokenizer(tokenizer: Any, model: Any, index: InfiniGramIndex) -> Any:
    from transformers import AutoTokenizer

    if tokenizer is not None and not isinstance(tokenizer, str):
        return tokenizer
    candidates = [tokenizer] if tokenizer is not None else []
    if isinstance(model, str):
        candidates.append(model)
    candidates += [str(p / "tokenizer") for p in index.paths]
    for path in candidates:
        try:
            return AutoTokenizer.from_pretrained(path, trust_remote_code=False)  # (no code from an index)
        except (OSError, ValueError):
            continue
    raise ValueError("no tokenizer given and none found in the model directory or the index; pass tokenizer=")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class InfinigramPerplexity(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("string")}),
            reference_urls=["https://arxiv.org/abs/2401.17377"],
        )

    def _compute(self, predictions, model: Any = None, index: Any = None, tokenizer: Any = None,
                 window: Optional[int] = None, stride: Optional[int] = None, lambda_sparse: float = DEFAULT_LAMBDA_SPARSE,
                 lambda_dense: float = DEFAULT_LAMBDA_DENSE, batch_size: int = 8, add_bos: bool = True,
                 device: Optional[str] = None, progress: bool = False, mixing: Any = None):
        import numpy as np

        if model is None or index is None:
            raise ValueError("pass model= (a model object or a local directory) and index= (an index or its path)")
        own_index = isinstance(index, (str, os.PathLike))
        ix = InfiniGramIndex.open(index) if own_index else index
        try:
            tok = _load_tokenizer(tokenizer, model, ix)
            if isinstance(model, str):
                from transformers import AutoModelForCausalLM

                model = AutoModelForCausalLM.from_pretrained(model)
                if device is not None:
                    model = model.to(device)
            res = perplexity(model, tok, list(predictions), ix, window=window, stride=stride,
                             lambda_sparse=lambda_sparse, lambda_dense=lambda_dense, batch_size=batch_size,
                             add_bos=add_bos, progress=progress, mixing=mixing)
        finally:
            if own_index:
                ix.close()
        from infinigram_hf.lm.learned_mixing import learned_logprob
        from infinigram_hf.lm.mixture import mixture_logprob

        s = res.scores
        mixed = learned_logprob(s, res.mixing) if res.mixing is not None else \
            mixture_logprob(s, res.lambda_sparse, res.lambda_dense)
        per_doc, per_doc_nn = [], []
        for d in range(len(predictions)):
            sel = s.doc_index == d
            per_doc.append(float(np.exp(-mixed[sel].mean())) if sel.any() else float("nan"))
            per_doc_nn.append(float(np.exp(-s.neural_logprob[sel].mean())) if sel.any() else float("nan"))
        return {
            "perplexity": res.perplexity,
            "neural_perplexity": res.neural_perplexity,
            "relative_improvement": res.relative_improvement,
            "num_tokens": res.num_tokens,
            "sparse_fraction": res.sparse_fraction,
            "lambda_sparse": res.lambda_sparse,
            "lambda_dense": res.lambda_dense,
            "mixing": res.mixing.family if res.mixing is not None else "two_lambda",
            **({"levels": list(res.mixing.levels)} if res.mixing is not None and res.mixing.levels else {}),
            "perplexities": per_doc,
            "neural_perplexities": per_doc_nn,
        }
