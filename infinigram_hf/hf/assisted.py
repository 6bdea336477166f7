"""The ∞-gram drafter as a `transformers.generation.CandidateGenerator` (transformers' assisted loop).

transformers' assisted decoding asks a candidate generator for draft tokens
(``get_candidates(input_ids) -> (input_ids + draft, draft logits or None)``), verifies them with
one forward pass, and reports the number of matches (``update_candidate_strategy``). Its loop
only takes batch size 1 and has no public argument for a custom generator, so
`hf_assisted_generate` is a `custom_generate` callable that runs transformers' own
``_assisted_decoding`` with this generator. `infinigram_hf.speculative.generate` (our loop) is
the faster, batched path; this one exists to use transformers' loop as is (and checks ours).

Drafts come without logits, so sampling is verified by "sample and match" (lossless).

Example:
    >>> from infinigram_hf.candidate import hf_assisted_generate                        # doctest: +SKIP
    >>> model.generate(ids, max_new_tokens=64, custom_generate=hf_assisted_generate,
    ...                index=index)                                                    # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from ..lm.drafter import InfiniGramDrafter
from ..index import InfiniGramIndex

try:
    from transformers.generation.candidate_generator import CandidateGenerator as _Base
except ImportError:  # pragma: no cover
    _Base = object


class InfiniGramCandidateGenerator(_Base):
    """Candidate generator drafting from an `InfiniGramDrafter` (no draft logits).

    Args:
        drafter: the drafter (∞-gram and/or prompt lookup).
        max_length: total length generation stops at; drafts never pass it.
        pad_token_id: leading padding stripped before drafting.

    Example:
        >>> gen = InfiniGramCandidateGenerator(InfiniGramDrafter(index), max_length=128)   # doctest: +SKIP
        >>> cand, logits = gen.get_candidates(ids)                                         # doctest: +SKIP
    """

    requires_model_outputs = False

    def __init__(self, drafter: InfiniGramDrafter, *, max_length: Optional[int] = None,
                 pad_token_id: Optional[int] = None):
        if not isinstance(drafter, InfiniGramDrafter):
            raise ValueError(f"drafter must be an InfiniGramDrafter, got {type(drafter).__name__}")
        self.drafter = drafter
        self.max_length = max_length
        self.pad_token_id = pad_token_id
        self.matches: list[int] = []

    def get_candidates(self, input_ids: torch.LongTensor, **kwargs: Any) -> tuple[torch.LongTensor, None]:
        """input_ids plus the drafter's draft for them (no draft logits: verified by sample and match)."""
        if input_ids.shape[0] != 1:
            raise ValueError(f"transformers' assisted loop takes batch size 1, got {input_ids.shape[0]}")
        row = input_ids[0].detach().cpu().numpy()
        if self.pad_token_id is not None:
            real = row != self.pad_token_id
            row = row[int(real.argmax()):] if real.any() else row[:0]
        room = None if self.max_length is None else self.max_length - input_ids.shape[1] - 1
        d = self.drafter.draft(row, room)
        if not len(d):
            return input_ids, None
        draft = torch.as_tensor(d.tokens, dtype=input_ids.dtype, device=input_ids.device)[None]
        return torch.cat([input_ids, draft], dim=1), None

    def update_candidate_strategy(self, input_ids: torch.LongTensor, scores: torch.Tensor, num_matches: int) -> None:
        """The drafter adapts to the match length by itself; the matches are only recorded."""
        self.matches.append(int(num_matches))


def hf_assisted_generate(model: Any, input_ids: torch.LongTensor, logits_processor: Any = None,
                         stopping_criteria: Any = None, generation_config: Any = None,
                         index: Optional[InfiniGramIndex] = None, drafter: Optional[InfiniGramDrafter] = None,
                         draft_options: Optional[dict] = None, **model_kwargs: Any) -> Any:
    """`custom_generate` callable: transformers' assisted loop with `InfiniGramCandidateGenerator`.

    Use it as ``model.generate(ids, custom_generate=hf_assisted_generate, index=index, ...)``;
    called directly as ``hf_assisted_generate(model, ids, index=index, max_new_tokens=...)`` it
    makes that generate() call itself (generate() prepares the processors, stopping criteria
    and cache the loop needs). Batch size 1 only (transformers' rule). The generator is handed to
    the loop by shadowing ``model._get_candidate_generator`` for the duration of the call (so one
    model object should not run two of these calls at once from different threads).
    """
    if stopping_criteria is None:  # a direct call: generate() always passes prepared criteria
        return model.generate(input_ids, logits_processor=logits_processor, generation_config=generation_config,
                              custom_generate=hf_assisted_generate, index=index, drafter=drafter,
                              draft_options=draft_options, **model_kwargs)
    if drafter is None:
        if index is None:
            raise ValueError("pass index= (an InfiniGramIndex) or drafter= (an InfiniGramDrafter)")
        drafter = InfiniGramDrafter(index, **(draft_options or {}))
    cfg = generation_config if generation_config is not None else model.generation_config
    pad = getattr(cfg, "_pad_token_tensor", None)
    gen = InfiniGramCandidateGenerator(drafter, max_length=cfg.max_length,
                                       pad_token_id=None if pad is None else int(pad.reshape(-1)[0]))
    model._get_candidate_generator = lambda *a, **k: gen
    try:
        return type(model)._assisted_decoding(model, input_ids, logits_processor=logits_processor,
                                              stopping_criteria=stopping_criteria, generation_config=cfg,
                                              **model_kwargs)
    finally:
        del model._get_candidate_generator


__all__ = ["InfiniGramCandidateGenerator", "hf_assisted_generate"]
