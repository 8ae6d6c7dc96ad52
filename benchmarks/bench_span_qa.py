"""SQuAD 2.0 training throughput: the trainer against a plain transformers QA loop.

The plain loop is the usual run_qa recipe: every window padded to 384 tokens (the tokenizer's
overflowing windows with 128 tokens of overlap, `padding="max_length"`), BertForQuestionAnswering
on the same MiniLM encoder, random batches. The trainer cuts windows only as long as each
context needs and batches windows of similar length together. Both train the first N training
questions of the same file for the same number of updates at batch 32, with the same optimizer,
learning rate and precision, each in its own process so that peak memory is its own.

    python benchmarks/bench_span_qa.py \
        --train-file ../shared/data/squad2/train-v2.0.first-10-articles.json

Prints, per side: the windows trained per second and the peak RSS; then the speed ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]


def plain(args: argparse.Namespace) -> dict:
    import numpy as np
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from weightsearch.trainer.data.readers import read_table
    from weightsearch.trainer.encoders import default_encoder_path
    from weightsearch.trainer.memory import peak_memory

    path = default_encoder_path()
    tok = AutoTokenizer.from_pretrained(path)
    table = read_table(Path(args.train_file), "squad")
    n = args.updates * args.batch_size
    questions = [q.lstrip() for q in table.columns["question"][:n]]
    contexts = table.columns["context"][:n]
    answers = table.columns["answers"][:n]
    enc = tok(questions, contexts, truncation="only_second", max_length=384, stride=128,
              return_overflowing_tokens=True, return_offsets_mapping=True, padding="max_length")
    starts, ends = [], []
    for i, offsets in enumerate(enc["offset_mapping"]):
        example = enc["overflow_to_sample_mapping"][i]
        seq = enc.sequence_ids(i)
        s = e = 0
        if answers[example]:
            first = answers[example][0]
            lo, hi = first["answer_start"], first["answer_start"] + len(first["text"])
            ctx = [j for j, k in enumerate(seq) if k == 1]
            if offsets[ctx[0]][0] <= lo and offsets[ctx[-1]][1] >= hi:
                s = next(j for j in ctx if offsets[j][1] > lo)
                e = max(j for j in ctx if offsets[j][0] < hi)
        starts.append(s)
        ends.append(e)
    torch.manual_seed(args.seed)
    model = AutoModelForQuestionAnswering.from_pretrained(path)
    opt = torch.optim.Adamax(model.parameters(), lr=args.lr)
    ids = torch.tensor(enc["input_ids"])
    types = torch.tensor(enc["token_type_ids"])
    mask = torch.tensor(enc["attention_mask"])
    order = np.random.default_rng(args.seed).permutation(len(ids))[:n]
    batches = [order[i:i + args.batch_size] for i in range(0, len(order), args.batch_size)]
    bf16 = args.precision == "bf16"
    model.train()
    start = time.perf_counter()
    for b in batches:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(input_ids=ids[b], token_type_ids=types[b], attention_mask=mask[b],
                        start_positions=torch.tensor([starts[i] for i in b]),
                        end_positions=torch.tensor([ends[i] for i in b]))
        opt.zero_grad()
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    elapsed = time.perf_counter() - start
    windows = sum(len(b) for b in batches)
    return {"side": "plain (padded to 384)", "updates": len(batches), "windows": windows,
            "questions": len(set(enc["overflow_to_sample_mapping"][i] for i in order)),
            "train_s": elapsed, "windows_per_s": windows / elapsed, **peak_memory()}


def trainer_side(args: argparse.Namespace) -> dict:
    from weightsearch.trainer import load_config, train

    train_file = Path(args.train_file).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config({
            "tasks": [{"preset": "squad2", "train_file": str(train_file),
                       "dev_files": str(train_file)}],
            "epochs": 1, "batch_size": args.batch_size, "lr": args.lr, "seed": args.seed,
            "max_train_examples": args.updates * args.batch_size, "subsample": "head",
            "max_eval_examples": 8, "precision": args.precision, "output_dir": f"{tmp}/run",
            "cache_dir": f"{tmp}/cache", "warmup": 0,
        })
        result = train(cfg, quiet=True)
        steps = [json.loads(line) for line in Path(f"{tmp}/run/steps.jsonl").read_text()
                 .splitlines()]
    windows = sum(s["batch_size"] for s in steps)
    return {"side": "trainer (length-aware windows, bucketed)", "updates": len(steps),
            "windows": windows, "questions": result.train_sizes["squad2"],
            "train_s": result.train_time_s, "windows_per_s": windows / result.train_time_s,
            "peak_rss_mib": result.extra["peak_rss_mib"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-file", default=str(ROOT / "data/qa_sample/SQuAD2/train-v2.0.json"))
    p.add_argument("--updates", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--side", choices=("trainer", "plain"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.side:
        print(json.dumps((trainer_side if args.side == "trainer" else plain)(args)))
        return
    rows = []
    for side in ("trainer", "plain"):  # each in a fresh process: its own peak memory
        cmd = [sys.executable, __file__, "--side", side, *sys.argv[1:]]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"{r['side']}: {r['updates']} updates, {r['windows']} windows "
              f"({r['questions']} questions) in {r['train_s']:.1f} s = "
              f"{r['windows_per_s']:.1f} windows/s; peak RSS {r['peak_rss_mib']:.0f} MiB",
              flush=True)
    print(f"speed ratio trainer / plain (windows per second): "
          f"{rows[0]['windows_per_s'] / rows[1]['windows_per_s']:.2f}x")


if __name__ == "__main__":
    main()
