"""Train the small GPT-2 of the perplexity eval (Table 1 analogue) on CPU, in minutes.

The model: GPT-2 from a config (4 layers × 256, 4 heads, context 512, tied embeddings, ~11.5M
parameters with the 32k BPE vocabulary of eval/corpora.py), trained on random 512-token crops of
the first half (by file, in path order) of the stdlib **reference** split, documents joined with
EOS (so EOS before a document is its BOS, as the perplexity eval assumes). The ∞-gram index is
built on the whole reference split; validation and held-out files are never trained on.

Saved with save_pretrained (+ the tokenizer and train_info.json) to
<cache>/gpt2-small-stdlib/ (cache: $INFINIGRAM_EVAL_CACHE or ~/.cache/infinigram_hf_eval), where
the perplexity table, the processor benchmark and other evals pick it up. Training is
deterministic for a given --seed and step count (not wall time); it checkpoints every
--save-every steps and resumes from the checkpoint if killed.

    nice -n 10 .venv/bin/python eval/train_gpt2.py            # ~20 min on an idle 2-core CPU
    .venv/bin/python eval/train_gpt2.py --steps 20 --out /tmp/m   # smoke test
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpora  # noqa: E402

MODEL_DIR_NAME = "gpt2-small-stdlib"
MODEL_DIR_NAMES = {"stdlib": MODEL_DIR_NAME, "linux": "gpt2-small-linux"}
# The linux model trains on the linux `train` split (disjoint from the 200M-token datastore and
# from the validation/held-out documents, see corpora.linux_split_docs); its first 12M tokens are
# plenty for the 1300 x 4 x 512 = 2.7M tokens it sees (58 minutes on the 2-core CPU, 2026-11-28).
LINUX_STREAM_TOKENS = 12_000_000
DEFAULT_STEPS = {"stdlib": 600, "linux": 1300}


def default_model_dir(corpus: str = "stdlib") -> Path:
    return corpora.cache_dir() / MODEL_DIR_NAMES[corpus]


def training_stream(train_frac: float, corpus: str = "stdlib") -> np.ndarray:
    """Token stream of the training documents, each preceded by EOS: the first `train_frac` of the
    stdlib reference files, or the first LINUX_STREAM_TOKENS of the linux train split."""
    if corpus == "linux":
        tokens, offsets = corpora.linux_split_tokens("train", max_tokens=LINUX_STREAM_TOKENS)
        n_docs = len(offsets) - 1
    else:
        tokens, offsets = corpora.load_tokens("stdlib.reference")
        n_docs = int(round((len(offsets) - 1) * train_frac))
    parts = []
    for i in range(n_docs):
        parts.append(np.array([corpora.EOS_TOKEN_ID], dtype=np.int64))
        parts.append(np.asarray(tokens[offsets[i]:offsets[i + 1]], dtype=np.int64))
    return np.concatenate(parts)


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def build_model(args: argparse.Namespace):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=corpora.VOCAB_SIZE, n_positions=args.seq_len, n_embd=args.embd,
                     n_layer=args.layers, n_head=args.heads, bos_token_id=corpora.EOS_TOKEN_ID,
                     eos_token_id=corpora.EOS_TOKEN_ID, pad_token_id=corpora.EOS_TOKEN_ID,
                     resid_pdrop=args.dropout, embd_pdrop=args.dropout, attn_pdrop=args.dropout)
    return GPT2LMHeadModel(cfg)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", choices=sorted(MODEL_DIR_NAMES), default="stdlib")
    ap.add_argument("--out", type=Path, default=None, help="model directory (default <cache>/gpt2-small-<corpus>)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=None, help="default 600 (stdlib) or 1300 (linux)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--train-frac", type=float, default=0.5, help="share of the reference files trained on")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--save-every", type=int, default=50)
    ap.add_argument("--force", action="store_true", help="retrain even if a finished model exists")
    ap.add_argument("--device", default="cpu", help="torch device to train on (cpu, cuda)")
    ap.add_argument("--stream-file", type=Path, default=None,
                    help="train on this .npy token stream (written by --write-stream) instead of the corpus")
    ap.add_argument("--write-stream", type=Path, default=None,
                    help="only write the training stream to this .npy file (to train elsewhere) and exit")
    args = ap.parse_args(argv)
    args.steps = args.steps or DEFAULT_STEPS[args.corpus]
    if args.write_stream:
        np.save(args.write_stream, training_stream(args.train_frac, args.corpus).astype(np.uint16))
        print(f"wrote {args.write_stream}")
        return
    out = args.out or default_model_dir(args.corpus)
    if (out / "train_info.json").exists() and not args.force:
        print(f"{out} already holds a trained model (train_info.json); --force to retrain")
        return
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.stream_file:
        stream = np.load(args.stream_file).astype(np.int64)
    else:
        stream = training_stream(args.train_frac, args.corpus)
    print(f"training stream: {len(stream):,} tokens ({args.corpus})", flush=True)

    model = build_model(args).to(args.device)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    ckpt = out / "checkpoint.pt"
    step, elapsed, losses = 0, 0.0, []
    rng = np.random.default_rng(args.seed)
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False, map_location=args.device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, elapsed, losses = state["step"], state["elapsed"], state["losses"]
        rng.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])
        print(f"resumed at step {step}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    model.train()
    t0 = time.time() - elapsed
    while step < args.steps:
        starts = rng.integers(0, len(stream) - args.seq_len, size=args.batch)
        x = torch.from_numpy(np.stack([stream[s:s + args.seq_len] for s in starts])).to(args.device)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        step += 1
        if step % 10 == 0 or step == args.steps:
            el = time.time() - t0
            recent = float(np.mean(losses[-10:]))
            print(f"step {step}/{args.steps}  loss {recent:.3f} (ppl {math.exp(recent):.0f})  "
                  f"{step * args.batch * args.seq_len / el:,.0f} tok/s  {el / 60:.1f} min", flush=True)
        if step % args.save_every == 0 and step < args.steps:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                        "elapsed": time.time() - t0, "losses": losses, "rng": rng.bit_generator.state,
                        "torch_rng": torch.get_rng_state()}, ckpt)
    model.eval()
    model.to("cpu").save_pretrained(out)
    corpora.load_tokenizer().save_pretrained(out)
    info = {"params": n_params, "layers": args.layers, "embd": args.embd, "heads": args.heads,
            "seq_len": args.seq_len, "batch": args.batch, "steps": args.steps, "lr": args.lr,
            "tokens_seen": args.steps * args.batch * args.seq_len, "train_stream_tokens": int(len(stream)),
            "corpus": args.corpus, "device": args.device,
            "train_frac": args.train_frac, "seed": args.seed, "minutes": round((time.time() - t0) / 60, 2),
            "final_train_loss": float(np.mean(losses[-20:]))}
    (out / "train_info.json").write_text(json.dumps(info, indent=1) + "\n")
    ckpt.unlink(missing_ok=True)
    print(json.dumps(info), flush=True)


if __name__ == "__main__":
    main()
