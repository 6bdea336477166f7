"""Generation from the standalone ∞-gram LM: sampling options, stop strings, and constraints on
the output for making names and words (in the spirit of the Phony character n-gram generator:
starts_with, ends_with, contains, minimum / maximum length), with a bounded number of tries.

The sampling loop runs in C (ig_lm_generate) in chunks; Python only decodes and checks.

Example:
    >>> lm = InfiniGramLM(InfiniGramIndex.open("names_idx"))          # doctest: +SKIP
    >>> lm.generate(starts_with="Mar", ends_with="a", max_length=8, seed=1).text  # doctest: +SKIP
    'Marietta'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._core.args import UNSET, float_arg, int_arg, opt_int_arg
from .._core.native import ffi
from .._core.errors import InfiniGramError
from .._core.ids import as_ids

if TYPE_CHECKING:  # pragma: no cover
    from .model import InfiniGramLM


class GenerationError(InfiniGramError, ValueError):
    """No output satisfied the constraints within max_tries (on_failure="raise")."""


@dataclass(frozen=True)
class Generation:
    """One generated continuation.

    text: the output (starts_with included, the prompt and any stop string excluded); None
        without a tokenizer. token_ids: its ids (starts_with's included). suffix_len / matches:
        for each sampled token, the length and number of continuations of the longest context
        used (the post's n - 1 and m). finish_reason: "length", "stop", "ends_with" or
        "end_of_document". tries: attempts used.
    """

    text: Optional[str]
    token_ids: np.ndarray
    suffix_len: np.ndarray
    matches: np.ndarray
    finish_reason: str
    tries: int

    def __str__(self) -> str:
        return self.text if self.text is not None else " ".join(map(str, self.token_ids.tolist()))


@dataclass
class _Spec:
    starts_with: str
    ends_with: Optional[str]
    contains: List[str]
    min_length: Optional[int]
    max_length: Optional[int]
    unit: str
    stops: List[str]

    @property
    def needs_text(self) -> bool:
        return bool(self.stops or self.ends_with or self.contains or self.unit == "chars" and
                    (self.min_length is not None or self.max_length is not None))

    def length(self, text: str, n_tokens: int) -> int:
        return len(text) if self.unit == "chars" else n_tokens

    def satisfied(self, text: str, n_tokens: int) -> bool:
        n = self.length(text, n_tokens)
        return (text.startswith(self.starts_with)
                and (self.ends_with is None or text.endswith(self.ends_with))
                and all(c in text for c in self.contains)
                and (self.min_length is None or n >= self.min_length)
                and (self.max_length is None or n <= self.max_length))


def _as_list(x: Union[None, str, Sequence[str]], name: str) -> List[str]:
    if x is None:
        return []
    items = [x] if isinstance(x, str) else list(x)
    if not all(isinstance(s, str) and s for s in items):
        raise ValueError(f"{name} must be a non-empty string or a list of them, got {x!r}")
    return items


def _sampling(greedy: bool, temperature: float, top_k: int, top_p: float) -> Any:
    # (NaN slipped through `temperature < 0` and was then sampled at temperature 1)
    temperature = float_arg("temperature", temperature, 0.0, 1e6, note="0 = greedy")
    top_k = int_arg("top_k", top_k, 0, note="0 = off")
    top_p = float_arg("top_p", top_p, 0.0, 1.0, lo_open=True)
    smp = ffi.new("ig_lm_sampling *")
    smp.greedy = int(bool(greedy) or temperature == 0)
    smp.temperature = float(temperature) if temperature > 0 else 1.0
    smp.top_k = int(top_k)
    smp.top_p = float(top_p)
    return smp


def sample_continuation(lm: "InfiniGramLM", configure: Callable[..., Tuple[Any, list]],
                        sample_chunk: Callable[..., Any], prompt: Union[str, Sequence[int], np.ndarray] = "",
                        max_new_tokens: int = 200, *, method: str = "kn", k: Any = UNSET,
                        decay: Any = UNSET, max_context: Optional[int] = None,
                        order: Any = UNSET, smoothing: Any = UNSET, eod: bool = True,
                        greedy: bool = False, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                        seed: Optional[int] = None, stop: Union[None, str, Sequence[str]] = None,
                        starts_with: str = "", ends_with: Optional[str] = None,
                        contains: Union[None, str, Sequence[str]] = None, min_length: Optional[int] = None,
                        max_length: Optional[int] = None, length_unit: str = "chars", max_tries: int = 100,
                        on_failure: str = "none", chunk_size: int = 64) -> Optional[Generation]:
    """Sample a continuation of `prompt` from the ∞-gram LM (the body of `InfiniGramLM.generate`,
    which passes its C configuration and sampling calls as `configure` and `sample_chunk`).

    method / k / decay / order / smoothing: the distribution (see InfiniGramLM; InfiniGramLM.generate
        passes the LM's own, Kneser-Ney by default, so sampling and scoring agree). The post's
        generation setting is method="backoff", k=2.
    eod: end of document is a possible next token; sampling it ends the output.
    greedy, temperature (0 = greedy), top_k, top_p: as in transformers (temperature first).
        Plain sampling (temperature 1, no top-k / top-p) draws a uniform suffix-array rank.
    seed: reproducible output (same seed, same arguments, same index -> same text).
    stop: string(s) that end the output (cut before the stop string).
    Constraints, checked on the output text (length_unit "chars" or "tokens"):
        starts_with: the output begins with it (it is forced, then continued);
        ends_with: the output must end with it; without stop strings, generation ends at the
            first token where the output ends with it and every other constraint holds;
        contains: every one of these substrings must appear;
        min_length / max_length: bounds on the output's length (exceeding max_length fails
            the try at once).
    max_tries: attempts before giving up; then None (on_failure="none") or GenerationError
        (on_failure="raise"). Greedy decoding is tried once (it is deterministic).
    """
    max_new_tokens = int_arg("max_new_tokens", max_new_tokens, 0)
    if length_unit not in ("chars", "tokens"):
        raise ValueError(f"length_unit must be 'chars' or 'tokens', got {length_unit!r}")
    if on_failure not in ("none", "raise"):
        raise ValueError(f"on_failure must be 'none' or 'raise', got {on_failure!r}")
    max_tries = int_arg("max_tries", max_tries, 1)
    chunk_size = int_arg("chunk_size", chunk_size, 1, 1 << 20)  # sizes the buffers of one C call
    min_length = opt_int_arg("min_length", min_length, 0)
    max_length = opt_int_arg("max_length", max_length, 0)
    if min_length is not None and max_length is not None and min_length > max_length:
        raise ValueError(f"min_length ({min_length}) > max_length ({max_length})")
    if not isinstance(starts_with, str):
        raise ValueError(f"starts_with must be a string, got {starts_with!r}")
    spec = _Spec(starts_with, ends_with or None, _as_list(contains, "contains"), min_length, max_length,
                 length_unit, _as_list(stop, "stop"))
    if spec.needs_text and lm.tokenizer is None:
        raise ValueError("stop strings and text constraints need a tokenizer (the index has none)")
    if isinstance(prompt, str) or starts_with:
        if lm.tokenizer is None:
            raise ValueError("a text prompt needs a tokenizer: pass token ids")
    cfg, keep = configure(method, k=k, decay=decay, eod=eod, max_context=max_context, order=order,
                         smoothing=smoothing)
    smp = _sampling(greedy, temperature, top_k, top_p)
    prompt_ids = lm.encode(prompt) if isinstance(prompt, str) else as_ids(prompt, "prompt")
    sw_ids = lm.encode(starts_with) if starts_with else as_ids([])
    rng = np.random.default_rng(seed)
    tries = 1 if smp.greedy else int(max_tries)
    for attempt in range(1, tries + 1):
        state = rng.integers(1, 2**63, size=4, dtype=np.uint64)
        out = _one_try(lm, sample_chunk, cfg, smp, prompt_ids, sw_ids, int(max_new_tokens), state, spec, chunk_size)
        if out is not None:
            text, ids, sl, mt, reason = out
            return Generation(text=text, token_ids=ids, suffix_len=sl, matches=mt, finish_reason=reason, tries=attempt)
    if on_failure == "raise":
        raise GenerationError(
            f"no output satisfied the constraints in {tries} tr{'y' if tries == 1 else 'ies'} "
            f"(starts_with={starts_with!r}, ends_with={ends_with!r}, contains={spec.contains!r}, "
            f"min_length={min_length}, max_length={max_length} {length_unit}, max_new_tokens={max_new_tokens})")
    return None


def _one_try(lm: "InfiniGramLM", sample_chunk: Callable[..., Any], cfg: Any, smp: Any, prompt_ids: np.ndarray, sw_ids: np.ndarray, max_new: int,
             state: np.ndarray, spec: _Spec, chunk: int) -> Optional[tuple]:
    """One attempt: (text, ids, suffix_len, matches, finish_reason), or None if it fails."""
    decode = (lambda ids: lm.decode(ids)) if lm.tokenizer is not None else None
    gen: List[int] = []
    sls: List[int] = []
    mts: List[int] = []
    sw = sw_ids.tolist()
    text = decode(sw) if decode else None
    reason = "length"
    done = False
    while len(gen) < max_new and not done:
        n = min(chunk, max_new - len(gen))
        ctx = np.concatenate([prompt_ids, sw_ids, np.asarray(gen, dtype=np.uint32)])
        ids, sl, mt, ended = sample_chunk(cfg, smp, ctx, n, state)
        for t, s, m in zip(ids.tolist(), sl.tolist(), mt.tolist()):
            prev = len(text) if text is not None else 0
            gen.append(t)
            sls.append(s)
            mts.append(m)
            if spec.unit == "tokens" and spec.max_length is not None and len(sw) + len(gen) > spec.max_length:
                return None
            if not spec.needs_text:
                continue
            text = decode(sw + gen)
            cut = _stop_cut(text, prev, len(spec.starts_with), spec.stops)
            if cut is not None:
                text, reason, done = text[:cut], "stop", True
                break
            if spec.max_length is not None and spec.unit == "chars" and len(text) > spec.max_length:
                return None
            if (spec.ends_with and not spec.stops and len(text) > len(spec.starts_with)
                    and spec.satisfied(text, len(sw) + len(gen))):
                reason, done = "ends_with", True
                break
        if not done and ended:
            reason, done = "end_of_document", True
    all_ids = np.asarray(sw + gen, dtype=np.uint32)
    if decode and not spec.needs_text:
        text = decode(all_ids.tolist())
    if text is not None and not spec.satisfied(text, len(all_ids)):
        return None
    if text is None and spec.unit == "tokens" and not _token_lengths_ok(spec, len(all_ids)):
        return None
    return text, all_ids, np.asarray(sls, dtype=np.int64), np.asarray(mts, dtype=np.uint64), reason


def _token_lengths_ok(spec: _Spec, n: int) -> bool:
    return (spec.min_length is None or n >= spec.min_length) and (spec.max_length is None or n <= spec.max_length)


def _stop_cut(text: str, prev_len: int, protected: int, stops: List[str]) -> Optional[int]:
    """Start of the earliest stop string that ends after prev_len (and starts after the forced
    prefix), or None."""
    best = None
    for s in stops:
        i = text.find(s, max(protected, prev_len - len(s) + 1))
        if i >= 0 and (best is None or i < best):
            best = i
    return best
