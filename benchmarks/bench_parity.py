"""Dev RTE and MRPC accuracy of the trainer at the settings matched to the reference MT-DNN code.

The matched settings (issue 16): MiniLM, RTE + MRPC, equal task weights, 2 epochs, batch 32,
Adamax lr 2e-4, warm-up 0.1 then linear decay, clip 1.0, weight decay 0.01, max length 128,
BERT's pooled [CLS] under the heads, fp32, no length bucketing, one thread per run; over-long
training examples truncated unless a variant drops them (`overlong=drop`) or takes a preset.
Each `--variant NAME:key=value,key=value` adds a row that changes settings (the ablation);
`base:` is the matched settings themselves. Three keys are the benchmark's own:

- `preset=NAME` fills in what the matched settings leave open from a run-config preset
  (`siwlm-paper`: over-long training examples dropped, dev examples up to 512 tokens, the
  reference's head initialisation and Adamax). The matched keys replace the preset's whole
  (its SIWLM weighting too), and its fine-tuning stage is left out: parity is about the
  multi-task stage.
- `bench.decay=l2` puts weight decay into the gradient as torch's Adamax does (the trainer
  before issue 16), biases and LayerNorm still exempt.
- `bench.head=san` puts that head (`linear` or `san`) on both tasks, as the reference's
  multi-task script does with SAN on its pairwise tasks.

Every run prints its row when it finishes and is appended to `--results` (JSON, plus a CSV
beside it); the table of means comes at the end.

    python benchmarks/bench_parity.py --data-dir ../shared/data/glue --seeds 1,2 \
        --variant base: --variant paper:preset=siwlm-paper --results /tmp/parity.json
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MATCHED: dict[str, Any] = {
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
FIELDS = ("variant", "seed", "rte", "mrpc", "train_s", "settings")


def parse_variant(text: str) -> tuple[str, list[str]]:
    name, _, sets = text.partition(":")
    return name, [s for s in sets.split(",") if s]


def variant_config(sets: list[str]) -> tuple[dict[str, Any], list[str], str | None]:
    """(base config, the run-config overrides, the weight-decay form) of one variant."""
    from weightsearch.trainer.config.presets import RUN_PRESETS

    # Truncation, the trainer's default when the rows of BENCHMARKS.md section 11 were taken,
    # keeps `base` comparable with them; a preset brings its own.
    base, rest, decay = {**MATCHED, "overlong": "truncate"}, [], None
    for item in sets:
        key, _, value = item.partition("=")
        if key == "preset":
            if value not in RUN_PRESETS:
                raise SystemExit(f"--variant: preset {value!r} is not one of "
                                 f"{', '.join(RUN_PRESETS)}")
            preset = {k: v for k, v in RUN_PRESETS[value].items() if k != "finetune"}
            base = {**preset, **{k: v for k, v in base.items() if k != "overlong"}}
        elif key == "bench.head":
            if value not in ("linear", "san"):
                raise SystemExit(f"--variant: bench.head={value!r}; use linear or san")
            base["tasks"] = [{"preset": t, "head": value} for t in MATCHED["tasks"]]
        elif key == "bench.decay":
            if value not in ("l2", "decoupled"):
                raise SystemExit(f"--variant: bench.decay={value!r}; use l2 or decoupled")
            decay = value
        else:
            rest.append(item)
    return base, rest, decay


def _l2_adamax(model, cfg, device):
    """torch's Adamax with its L2 weight decay on the decayed group (the pre-issue-16 trainer)."""
    import torch

    from weightsearch.trainer.optim import decay_groups

    decay, no_decay = decay_groups(model)
    return torch.optim.Adamax([{"params": decay, "weight_decay": cfg.weight_decay},
                               {"params": no_decay, "weight_decay": 0.0}],
                              lr=cfg.learning_rate, foreach=True)


def run_one(args: tuple[str, list[str], int, str, str]) -> dict[str, Any]:
    name, sets, seed, data_dir, out_root = args
    import torch

    from weightsearch.trainer import load_config, loop, train

    torch.set_num_threads(1)
    base, overrides, decay = variant_config(sets)
    if decay == "l2":
        loop.build_optimizer = _l2_adamax  # this worker process only
    cfg = dict(base, data_dir=data_dir, seed=seed,
               output_dir=str(Path(out_root) / f"{name}-seed{seed}"))
    result = train(load_config(cfg, overrides=overrides), quiet=True)
    last = result.history[-1]["metrics"]
    return {"variant": name, "seed": seed, "rte": last["rte"]["accuracy"],
            "mrpc": last["mrpc"]["accuracy"], "train_s": round(result.train_time_s),
            "settings": ",".join(sets)}


def write_results(rows: list[dict[str, Any]], path: Path) -> None:
    path.write_text(json.dumps(rows, indent=1))
    with path.with_suffix(".csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data/glue")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME:key=value,... (repeatable); default: base:")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at a time, one thread each (default 1)")
    parser.add_argument("--results", help="write every finished run to this JSON file (and a "
                                          "CSV beside it) as it finishes")
    parser.add_argument("--keep-runs", help="keep the run folders here (default: a temp dir)")
    args = parser.parse_args()
    variants = [parse_variant(v) for v in (args.variant or ["base:"])]
    for _, sets in variants:
        variant_config(sets)  # a bad preset or bench key fails before any run
    seeds = [int(s) for s in args.seeds.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        out_root = args.keep_runs or tmp
        jobs = [(name, sets, seed, args.data_dir, out_root)
                for name, sets in variants for seed in seeds]
        # A fresh process per run: no state (patched optimizer, RNG, caches) leaks between rows.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(args.jobs, mp_context=context, max_tasks_per_child=1) as pool:
            futures = [pool.submit(run_one, job) for job in jobs]
            for future in as_completed(futures):
                row = future.result()
                rows.append(row)
                print(f"{row['variant']:<24} seed {row['seed']}  RTE {row['rte']:.3f}  "
                      f"MRPC {row['mrpc']:.3f}  ({row['train_s']} s)", flush=True)
                if args.results:
                    write_results(rows, Path(args.results))
    print(f"\n{'variant':<24}" + "".join(f"  RTE s{s}  MRPC s{s}" for s in seeds)
          + "  RTE mean  MRPC mean")
    for name, sets in variants:
        mine = sorted((r for r in rows if r["variant"] == name), key=lambda r: r["seed"])
        cells = "".join(f"  {r['rte']:7.3f}  {r['mrpc']:8.3f}" for r in mine)
        rte = statistics.mean(r["rte"] for r in mine)
        mrpc = statistics.mean(r["mrpc"] for r in mine)
        print(f"{name:<24}{cells}  {rte:8.3f}  {mrpc:9.3f}   {','.join(sets)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
