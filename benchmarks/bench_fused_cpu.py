"""CPU cost of a fused weight grid against the same cells trained one by one.

    python benchmarks/bench_fused_cpu.py --data-dir ../shared/data/glue [--json OUT]

Trains the cells of one SIWLM weight grid (--weights, default 1,5,9; RTE central with MRPC and
STS-B, --examples training rows each, --epochs, MiniLM unless --encoder) twice in this process:
one `weightsearch.trainer.train` per cell, then all cells as one `train_fused` unit. Reports
per cell the process CPU time and wall time of the whole run (set-up, training, evaluation,
checkpoints) and of training alone, the ratio fused/alone, and the largest difference of a
member's dev scores from its stand-alone run's. One torch thread (--threads) so that CPU time
is the work done, not threads waiting for each other. --grad-clip and --same-treatment show
what training members of one treatment once saves (a clip every update of the larger weights
exceeds, 2 epochs or more: members are grouped at the first epoch's end).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default="../shared/data/glue")
    p.add_argument("--encoder", help="a local encoder folder (default: the shipped MiniLM)")
    p.add_argument("--weights", default="1,5,9", help="central weights, one cell each")
    p.add_argument("--examples", type=int, default=256, help="training rows per task")
    p.add_argument("--eval-examples", type=int, default=128, help="dev rows per task")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--grad-clip", type=float, help="global clip (default: the trainer's)")
    p.add_argument("--same-treatment", choices=("once", "all"), default="once",
                   help="fused members of one treatment: trained once (default) or all")
    p.add_argument("--json", help="write the figures to this file")
    return p.parse_args()


def cell_config(args: argparse.Namespace, weight: float, out: Path):
    from weightsearch.trainer import load_config

    raw = {"data_dir": args.data_dir, "tasks": ["rte", "mrpc", "stsb"], "central_task": "rte",
           "weighting": {"scheme": "siwlm", "central_weight": weight}, "epochs": args.epochs,
           "batch_size": 32, "lr": 2e-4, "max_train_examples": args.examples,
           "max_eval_examples": args.eval_examples, "max_seq_len": 128, "precision": "fp32",
           "num_threads": args.threads, "checkpoints": "final", "output_dir": str(out),
           "cache_dir": str(out.parent / "cache")}
    if args.encoder:
        raw["encoder"] = args.encoder
    if args.grad_clip is not None:
        raw["grad_clip"] = args.grad_clip
    return load_config(raw)


def timed(fn):
    cpu, wall = time.process_time(), time.perf_counter()
    value = fn()
    return value, time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    args = parse_args()
    from weightsearch.trainer import train, train_fused

    weights = [float(w) for w in args.weights.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-fused-") as name:
        tmp = Path(name)
        # Tokenize once before either side is timed: both then read the same cache.
        train(cell_config(args, weights[0], tmp / "warm"), quiet=True)
        alone, alone_cpu, alone_wall = timed(lambda: [
            train(cell_config(args, w, tmp / f"alone-{w:g}"), quiet=True) for w in weights])
        fused, fused_cpu, fused_wall = timed(lambda: train_fused(
            [cell_config(args, w, tmp / f"fused-{w:g}") for w in weights], quiet=True,
            same_treatment=args.same_treatment))
    failed = [r for r in fused if isinstance(r, BaseException)]
    if failed:
        raise SystemExit(f"a fused member failed: {failed[0]!r}")
    k = len(weights)
    drift = max(abs(f.best[t][m] - a.best[t][m]) for f, a in zip(fused, alone, strict=True)
                for t in a.best for m in a.best[t] if isinstance(a.best[t][m], float))
    report = {
        "cells": k, "weights": weights, "examples_per_task": args.examples,
        "epochs": args.epochs, "threads": args.threads,
        "alone": {"cpu_s_per_cell": alone_cpu / k, "wall_s_per_cell": alone_wall / k,
                  "train_s_per_cell": sum(r.train_time_s for r in alone) / k},
        "fused": {"cpu_s_per_cell": fused_cpu / k, "wall_s_per_cell": fused_wall / k,
                  "train_s_per_cell": fused[0].train_time_s / k},
        "max_score_difference": drift, "same_treatment": args.same_treatment,
        "followers": sum("same_treatment" in r.extra for r in fused),
    }
    report["cpu_ratio"] = report["fused"]["cpu_s_per_cell"] / report["alone"]["cpu_s_per_cell"]
    report["train_ratio"] = (report["fused"]["train_s_per_cell"]
                             / report["alone"]["train_s_per_cell"])
    for side in ("alone", "fused"):
        r = report[side]
        print(f"{side:<6} per cell: {r['cpu_s_per_cell']:.1f} CPU s, {r['wall_s_per_cell']:.1f} "
              f"s wall, {r['train_s_per_cell']:.1f} s training")
    print(f"fused/alone: CPU {report['cpu_ratio']:.3f}x, training {report['train_ratio']:.3f}x; "
          f"largest dev-score difference {drift:.2e} ({k} cells, {args.examples} rows per task, "
          f"{args.epochs} epoch(s), {args.threads} thread(s)); {report['followers']} member(s) "
          f"followed another of the same treatment")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
