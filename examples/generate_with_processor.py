"""generate() with and without the ∞-gram: InfiniGramLogitsProcessor mixes P_∞ into every step.

    python examples/generate_with_processor.py                       # offline: tiny GPT-2, stdlib index
    python examples/generate_with_processor.py --model path/to/model --index path/to/index
    python examples/generate_with_processor.py --model gpt2          # where the hub is reachable
    python examples/generate_with_processor.py --sample --top-p 0.9 --temperature 0.8
    python examples/generate_with_processor.py --num-beams 4 --min-effective-n 6

The processor returns log(λ·P_∞ + (1−λ)·softmax(scores)) for every row (λ_sparse when the ∞-gram
has a single possible next token, λ_dense otherwise), so greedy, sampling (temperature / top-k /
top-p act on the mixture), beam search and batches with left padding all work unchanged.
--min-effective-n leaves the model alone where the matched context is short.
"""
from __future__ import annotations

import argparse
import time

import torch
from transformers import LogitsProcessorList

import _neural_setup
from infinigram_hf import InfiniGramLogitsProcessor


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _neural_setup.add_arguments(p)
    p.add_argument("--prompt", action="append", default=None,
                   help="a prompt (repeat for a batch; default: two code prompts)")
    p.add_argument("--max-new-tokens", type=int, default=40)
    p.add_argument("--lambda-sparse", type=float, default=0.7)
    p.add_argument("--lambda-dense", type=float, default=0.4)
    p.add_argument("--min-effective-n", type=int, default=1)
    p.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--num-beams", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    model, tok, index, _ = _neural_setup.load(args)

    prompts = args.prompt or ["import os\n\n\ndef main(", "class Stack:\n    def __init__(self):\n        self."]
    tok.padding_side = "left"  # decoder-only batches are left-padded; the processor strips the padding
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    batch = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    proc = InfiniGramLogitsProcessor(index, args.lambda_sparse, args.lambda_dense,
                                     min_effective_n=args.min_effective_n, tokenizer=tok, pad_token_id=pad)
    gen = dict(max_new_tokens=args.max_new_tokens, do_sample=args.sample, num_beams=args.num_beams,
               pad_token_id=pad)
    if args.sample:
        gen.update(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    print(f"index: {index}\n")
    for label, procs in (("model alone", []), ("model + ∞-gram", [proc])):
        torch.manual_seed(args.seed)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(**batch, logits_processor=LogitsProcessorList(procs), **gen)
        seconds = time.perf_counter() - t0
        print(f"=== {label} ({seconds:.2f} s)")
        for prompt, row in zip(prompts, out):
            text = tok.decode(row[batch["input_ids"].shape[1]:], skip_special_tokens=True)
            print(f"--- {prompt!r}\n{prompt}{text}\n")


if __name__ == "__main__":
    main()
