"""A tiny GPT-2 trained in seconds on an index's own documents, for the demo and the examples.

No hub needed: the model is built from a `GPT2Config` and trained on random crops of the indexed
documents (read back from the index, so nothing is tokenized again). With so small a budget it is a
weak language model, which is where the ∞-gram helps most. Cached in a directory (save_pretrained
and the tokenizer), keyed by the index's fingerprint and the settings.

Example:
    >>> model, tok = tiny_gpt2(index, tokenizer, "cache/tiny-gpt2")        # doctest: +SKIP
    >>> model.generate(**tok("def main(", return_tensors="pt"))            # doctest: +SKIP
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Tuple, Union

import numpy as np

from .index.infinigram_index import InfiniGramIndex


def _stream(index: InfiniGramIndex, eos: int, max_tokens: int) -> np.ndarray:
    """The indexed documents, each preceded by EOS, up to about max_tokens tokens."""
    parts, total = [], 0
    for d in range(index.num_docs):
        ids = index.get_doc(d, decode=False).token_ids.astype(np.int64)
        parts += [np.array([eos], dtype=np.int64), ids]
        total += len(ids) + 1
        if total >= max_tokens:
            break
    return np.concatenate(parts)


def tiny_gpt2(index: InfiniGramIndex, tokenizer: Any, out_dir: Union[str, Path], *, steps: int = 40,
              batch: int = 8, seq_len: int = 64, n_layer: int = 2, n_embd: int = 64, lr: float = 3e-3,
              seed: int = 0, verbose: bool = True) -> Tuple[Any, Any]:
    """(model, tokenizer): loaded from `out_dir` when trained there with the same settings on the
    same index, else trained now and saved there. The defaults train for seconds (40 steps of
    8 x 64 tokens: the demo's first run stays short), so the model is very weak -- barely better
    than a unigram model; the demo says so next to its perplexity."""
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

    out = Path(out_dir)
    settings = dict(index_fingerprint=index.vocab_fingerprint, index_tokens=index.num_tokens, steps=steps,
                    batch=batch, seq_len=seq_len, n_layer=n_layer, n_embd=n_embd, lr=lr, seed=seed)
    info_path = out / "tiny_gpt2.json"
    if info_path.exists() and json.loads(info_path.read_text()).get("settings") == settings:
        return AutoModelForCausalLM.from_pretrained(out).eval(), tokenizer
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    stream = _stream(index, eos, max_tokens=4_000_000)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    cfg = GPT2Config(vocab_size=len(tokenizer), n_positions=seq_len, n_embd=n_embd, n_layer=n_layer, n_head=2,
                     bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)
    model = GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    started = time.perf_counter()
    model.train()
    for step in range(steps):
        starts = rng.integers(0, len(stream) - seq_len, size=batch)
        x = torch.from_numpy(np.stack([stream[s:s + seq_len] for s in starts]))
        for g in opt.param_groups:  # short warmup, then linear decay
            g["lr"] = lr * min(1.0, (step + 1) / 10) * (1 - 0.9 * step / steps)
        loss = model(input_ids=x, attention_mask=torch.ones_like(x), labels=x).loss  # EOS = pad id: no warning
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if verbose and (step + 1) % 20 == 0:
            print(f"      step {step + 1}/{steps}: loss {loss.item():.2f}", flush=True)
    seconds = time.perf_counter() - started
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    if hasattr(tokenizer, "save_pretrained"):
        tokenizer.save_pretrained(out)
    info_path.write_text(json.dumps({"settings": settings, "seconds": round(seconds, 1), "final_loss": float(loss.item()),
                                     "params": sum(p.numel() for p in model.parameters())}))
    return model, tokenizer
