"""Dev RTE and MRPC accuracy of the trainer at the settings matched to the reference MT-DNN code.

The matched settings (issue 16): MiniLM, RTE + MRPC, equal task weights, 2 epochs, batch 32,
Adamax lr 2e-4, warm-up 0.1 then linear decay, clip 1.0, weight decay 0.01, max length 128,
BERT's pooled [CLS] under the heads, fp32, no length bucketing, one thread per run. Each
`--variant NAME:key=value,key=value` adds a row that changes settings (the ablation); `base` is
the matched settings themselves. Runs go `--jobs` at a time, one thread each.

    python benchmarks/bench_parity.py --data-dir ../shared/data/glue --seeds 1,2 \
        --variant base: --variant paper:preset=siwlm-paper
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MATCHED = {
    "tasks": ["rte", "mrpc"],
    "central_task": "rte",
    "weighting": {"scheme": "equal"},
    "epochs": 2,
    "batch_size": 32,
    "lr": 2e-4,
    "optimizer": "adamax",
    "warmup": 0.1,
    "grad_clip": 1.0,
    "weight_decay": 0.01,
    "max_seq_len": 128,
    "pooling": "pooler",
    "precision": "fp32",
    "device": "cpu",
    "length_bucketing": False,
    "num_threads": 1,
}


def parse_variant(text: str) -> tuple[str, list[str]]:
    name, _, sets = text.partition(":")
    return name, [s for s in sets.split(",") if s]


def run_one(args: tuple[str, list[str], int, str, str]) -> dict:
    name, sets, seed, data_dir, out_root = args
    import torch

    from trainer import load_config, train

    torch.set_num_threads(1)
    cfg = dict(MATCHED, data_dir=data_dir, seed=seed,
               output_dir=str(Path(out_root) / f"{name}-seed{seed}"))
    result = train(load_config(cfg, overrides=sets), quiet=True)
    last = result.history[-1]["metrics"]
    return {"variant": name, "seed": seed, "rte": last["rte"]["accuracy"],
            "mrpc": last["mrpc"]["accuracy"], "train_s": round(result.train_time_s)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data/glue")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME:key=value,... (repeatable); default: base")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", help="also write the per-run rows to this file")
    args = parser.parse_args()
    variants = [parse_variant(v) for v in (args.variant or ["base:"])]
    seeds = [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory() as out_root:
        jobs = [(name, sets, seed, args.data_dir, out_root)
                for name, sets in variants for seed in seeds]
        with ProcessPoolExecutor(args.jobs) as pool:
            rows = list(pool.map(run_one, jobs))
    print(f"{'variant':<24}" + "".join(f"  RTE s{s}  MRPC s{s}" for s in seeds)
          + "  RTE mean  MRPC mean")
    for name, sets in variants:
        mine = [r for r in rows if r["variant"] == name]
        cells = "".join(f"  {r['rte']:7.3f}  {r['mrpc']:8.3f}" for r in mine)
        rte = statistics.mean(r["rte"] for r in mine)
        mrpc = statistics.mean(r["mrpc"] for r in mine)
        print(f"{name:<24}{cells}  {rte:8.3f}  {mrpc:9.3f}   {','.join(sets)}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
