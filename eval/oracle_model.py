"""A stand-in for a larger model that writes like the corpus: real forward cost, known output.

`OracleGPT2` is a GPT-2 built from a config (random weights, e.g. 12 layers × 768 with the
32k eval vocabulary, ~110M parameters): every call runs the full network, so decoding pays the
real cost of a model that size on this machine. Its output is then overridden: at every
position of a registered document, the greedy choice (argmax) is that document's real next
token. Greedy decoding from a prompt cut from a held-out file therefore reproduces the file's
real continuation, and a speculative decoder's drafts are accepted exactly when they match the
real text — acceptance "against the real continuation" with a real verification cost. It is a
stand-in, not a language model: the weights are random and only the argmax is meaningful.

How a row finds its document: when the model first sees a cache (the prefill), each row's real
tokens (attention mask) are matched against the start of the registered documents (longest
common start: transformers' assisted loop sends the prompt and its first draft together); the row →
document map is stored on the cache object, and the cache's `batch_select_indices` is wrapped
so the map follows rows that a loop drops from the batch. The position of a token in its
document is the position id the caller passes (our loop, tree drafts included: depth-based),
else the attention mask's running count, else the cache length.

Example:
    >>> model = build_oracle(layers=12, embd=768, heads=12)          # doctest: +SKIP
    >>> model.set_documents([np.concatenate([prompt, real])])        # doctest: +SKIP
    >>> out = model.generate(torch.tensor([prompt]), max_new_tokens=len(real), do_sample=False)  # doctest: +SKIP
    >>> bool((out[0, len(prompt):].numpy() == real).all())           # doctest: +SKIP
    True
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel

_BONUS = 1e4  # added to the target's logit: far above any logit of a random network


class OracleGPT2(GPT2LMHeadModel):
    """GPT-2 whose argmax at every position of a registered document is its real next token."""

    def __init__(self, config: GPT2Config):
        super().__init__(config)
        self.oracle_docs: Optional[List[np.ndarray]] = None
        self.oracle_stats = {"calls": 0, "ambiguous_rows": 0, "past_end": 0, "rows_dropped": 0}
        self.min_identify = 16  # tokens a row must share with the start of its document

    def set_documents(self, docs: Optional[Sequence[np.ndarray]]) -> None:
        """Register the documents (prompt + real continuation, 1-D int ids) rows come from;
        None turns the override off (plain random network)."""
        self.oracle_docs = None if docs is None else [np.asarray(d, dtype=np.int64) for d in docs]

    def forward(self, input_ids: Optional[torch.LongTensor] = None, past_key_values: Any = None,
                attention_mask: Optional[torch.Tensor] = None, token_type_ids: Optional[torch.LongTensor] = None,
                position_ids: Optional[torch.LongTensor] = None, inputs_embeds: Optional[torch.Tensor] = None,
                encoder_hidden_states: Optional[torch.Tensor] = None,
                encoder_attention_mask: Optional[torch.Tensor] = None, labels: Optional[torch.LongTensor] = None,
                use_cache: Optional[bool] = None, logits_to_keep: Any = 0, **kwargs: Any) -> Any:
        past = int(past_key_values.get_seq_length()) if past_key_values is not None else 0
        out = super().forward(input_ids=input_ids, past_key_values=past_key_values, attention_mask=attention_mask,
                              token_type_ids=token_type_ids, position_ids=position_ids, inputs_embeds=inputs_embeds,
                              encoder_hidden_states=encoder_hidden_states,
                              encoder_attention_mask=encoder_attention_mask, labels=labels, use_cache=use_cache,
                              logits_to_keep=logits_to_keep, **kwargs)
        if self.oracle_docs is None:
            return out
        if input_ids is None or past_key_values is None:
            raise ValueError("the oracle needs input_ids and a KV cache (use_cache=True)")
        self.oracle_stats["calls"] += 1
        rows = self._rows(past_key_values, input_ids, attention_mask, past)
        pos = _positions(input_ids, attention_mask, position_ids, past)
        k = out.logits.shape[1]
        pos = pos[:, pos.shape[1] - k:].cpu().numpy()
        target = np.empty(pos.shape, dtype=np.int64)
        for r, d in enumerate(rows):
            doc = self.oracle_docs[d]
            nxt = pos[r] + 1
            past_end = nxt >= len(doc)
            self.oracle_stats["past_end"] += int(past_end.sum())
            target[r] = doc[np.minimum(nxt, len(doc) - 1)]  # past the end: repeat the last token
        t = torch.from_numpy(target).to(out.logits.device)[..., None]
        out.logits.scatter_(2, t, out.logits.gather(2, t) + _BONUS)
        return out

    def _rows(self, cache: Any, input_ids: torch.Tensor, mask: Optional[torch.Tensor], past: int) -> List[int]:
        """Document index of every row of this call (identified at the cache's first call)."""
        rows = getattr(cache, "_oracle_rows", None)
        if rows is None:
            if past:
                raise ValueError("the oracle met a cache it did not see from the start")
            rows = self._identify(input_ids, mask)
            _follow_rows(cache, rows, self.oracle_stats)
        if len(rows) != input_ids.shape[0]:
            raise ValueError(f"the oracle tracks {len(rows)} rows, the call has {input_ids.shape[0]}")
        return cache._oracle_rows

    def _identify(self, input_ids: torch.Tensor, mask: Optional[torch.Tensor]) -> List[int]:
        ids = input_ids.cpu().numpy()
        m = mask.bool().cpu().numpy() if mask is not None and mask.dim() == 2 else np.ones(ids.shape, dtype=bool)
        rows, used = [], set()
        for r in range(len(ids)):
            real = ids[r][m[r, m.shape[1] - ids.shape[1]:]]
            # the longest common start wins (a first call may carry draft tokens after the prompt)
            lcp = np.array([_common_prefix(d, real) for d in self.oracle_docs])
            best = int(lcp.max()) if len(lcp) else 0
            if best < min(len(real), self.min_identify):
                raise ValueError(f"row {r}: its tokens start no registered document")
            hits = [int(i) for i in np.flatnonzero(lcp == best)]
            if len(hits) > 1:
                self.oracle_stats["ambiguous_rows"] += 1
            fresh = [i for i in hits if i not in used]
            rows.append((fresh or hits)[0])
            used.add(rows[-1])
        return rows


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def _follow_rows(cache: Any, rows: List[int], stats: dict) -> None:
    """Store the row → document map on the cache; rows a loop keeps (batch_select_indices)
    keep their documents."""
    cache._oracle_rows = list(rows)
    select = cache.batch_select_indices

    def batch_select_indices(indices: torch.Tensor) -> None:
        select(indices)
        keep = indices.reshape(-1).tolist()
        stats["rows_dropped"] += len(cache._oracle_rows) - len(keep)
        cache._oracle_rows = [cache._oracle_rows[i] for i in keep]

    cache.batch_select_indices = batch_select_indices


def _positions(input_ids: torch.Tensor, mask: Optional[torch.Tensor], position_ids: Optional[torch.Tensor],
               past: int) -> torch.Tensor:
    """(batch, q) position of every input token within its row's real tokens."""
    b, q = input_ids.shape
    if position_ids is not None:
        return position_ids.expand(b, q)
    if mask is not None and mask.dim() == 2:
        return (mask.long().cumsum(-1) - 1)[:, -q:]
    return (torch.arange(q, device=input_ids.device) + past)[None].expand(b, q)


def build_oracle(layers: int = 12, embd: int = 768, heads: int = 12, vocab_size: int = 32000, eos_token_id: int = 0,
                 n_positions: int = 1024, seed: int = 0) -> OracleGPT2:
    """A randomly initialised OracleGPT2 in eval mode (GPT-2 small shape by default)."""
    cfg = GPT2Config(vocab_size=vocab_size, n_positions=n_positions, n_embd=embd, n_layer=layers, n_head=heads,
                     bos_token_id=eos_token_id, eos_token_id=eos_token_id, pad_token_id=eos_token_id)
    torch.manual_seed(seed)
    return OracleGPT2(cfg).eval()
