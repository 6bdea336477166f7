"""Speculative decoding with ∞-gram drafts: the same greedy output, fewer model steps.

    python examples/speculative_decoding.py                        # offline: tiny GPT-2, stdlib index
    python examples/speculative_decoding.py --model path/to/model --index path/to/index
    python examples/speculative_decoding.py --batch 4 --tree       # a batch, token-tree drafts
    python examples/speculative_decoding.py --sample --seed 3      # sampling (lossless, seeded)

The drafter proposes the continuation of the longest suffix of the text that occurs in the
index (or earlier in the text itself); the model checks the whole draft in one forward pass and
keeps what it agrees with. Prompts are the starts of held-out standard-library files (never
indexed). The script prints greedy vs speculative wall time, model forward passes, tokens per
verification step, and checks that greedy outputs are identical.
"""
from __future__ import annotations

import argparse
import time

import torch

import _neural_setup
from infinigram_hf import InfiniGramDrafter
from infinigram_hf.speculative import generate as infinigram_generate
from infinigram_hf import speculative_generate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _neural_setup.add_arguments(p)
    p.add_argument("--batch", type=int, default=1, help="prompts decoded together (left-padded)")
    p.add_argument("--prompt-tokens", type=int, default=200)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--max-draft", type=int, default=8)
    p.add_argument("--tree", action="store_true", help="verify several candidate drafts at once (token tree)")
    p.add_argument("--sample", action="store_true", help="sample (temperature 0.8) instead of greedy")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (1 avoids waiting on descheduled threads when the CPU is shared)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tok, index, heldout = _neural_setup.load(args)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"

    # prompts: the first tokens of held-out files, decoded back to text (within the model's context)
    limit = getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", 1 << 30)
    prompt_tokens = min(args.prompt_tokens, limit - args.max_new_tokens - 4)
    texts: list = []
    for path in heldout:  # successive pieces of each file, as many as the batch needs
        ids = tok(path.read_text(encoding="utf-8", errors="replace"), add_special_tokens=False).input_ids
        for a in range(0, len(ids) - prompt_tokens, 4 * prompt_tokens):
            if len(texts) < args.batch:
                texts.append(tok.decode(ids[a:a + prompt_tokens]))
    batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    gen = dict(attention_mask=batch.attention_mask, max_new_tokens=args.max_new_tokens, do_sample=args.sample,
               pad_token_id=tok.pad_token_id)
    if args.sample:
        gen["temperature"] = 0.8

    counter = {"n": 0}
    model.register_forward_pre_hook(lambda *a: counter.__setitem__("n", counter["n"] + 1))
    print(f"index: {index}\nmodel: {type(model).__name__}, batch {args.batch}\n")

    # 1. plain generate()
    torch.manual_seed(args.seed)
    t0, counter["n"] = time.perf_counter(), 0
    plain = model.generate(batch.input_ids, **gen)
    t_plain, f_plain = time.perf_counter() - t0, counter["n"]

    # 2. the same call with ∞-gram drafts: one extra argument (index=) and custom_generate
    drafter = InfiniGramDrafter(index, max_draft=args.max_draft)
    stats: dict = {}
    torch.manual_seed(args.seed)
    t0, counter["n"] = time.perf_counter(), 0
    spec = model.generate(batch.input_ids, custom_generate=infinigram_generate, drafter=drafter,
                          draft_tree=args.tree, draft_stats=stats, **gen)
    t_spec, f_spec = time.perf_counter() - t0, counter["n"]
    st = stats["stats"]

    width = batch.input_ids.shape[1]
    for b in range(len(texts)):
        print(f"--- prompt {b} ends with: {texts[b][-60:]!r}")
        print(f"    continuation: {tok.decode(spec[b, width:], skip_special_tokens=True)[:200]!r}\n")
    print(f"plain generate: {t_plain:6.2f} s, {f_plain} forward passes")
    print(f"∞-gram drafts : {t_spec:6.2f} s, {f_spec} forward passes "
          f"({t_plain / t_spec:.2f}x), {st.tokens_per_step:.2f} tokens per verification step, "
          f"{st.accepted}/{st.drafted} drafted tokens accepted, drafting {st.draft_seconds * 1e3:.1f} ms")
    print(f"drafts from the index / from the text itself / none: {drafter.stats['infgram']} / "
          f"{drafter.stats['lookup']} / {drafter.stats['none']}")
    if not args.sample:
        print("identical to plain greedy:", torch.equal(plain, spec))
    # the one-call helper does the same
    out = speculative_generate(model, batch.input_ids, index, max_new_tokens=8, attention_mask=batch.attention_mask,
                               pad_token_id=tok.pad_token_id)
    assert out.shape[0] == len(texts)


if __name__ == "__main__":
    main()
