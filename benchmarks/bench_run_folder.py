"""Disk use of one finished run under each `checkpoints` policy, with the shipped MiniLM.

    python benchmarks/bench_run_folder.py [--epochs 2] [--rows 32]

Trains the same small run (rte + mrpc from the shipped GLUE sample, `--rows` training rows per
task, `--epochs` epochs, MiniLM) once per policy and prints the size of its output folder and
of its checkpoints. `last` keeps what every run kept before the policy existed (one full
checkpoint); a study trial now defaults to `none`. The size depends on the encoder, not on the
rows: a full checkpoint is the weights plus Adamax's two moment buffers.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

POLICIES = ("all", "last", "final", "none")


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rows", type=int, default=32)
    args = parser.parse_args()

    from weightsearch.trainer import load_config, train

    print(f"MiniLM, rte + mrpc, {args.rows} training rows each, {args.epochs} epochs")
    print(f"{'checkpoints':<12} {'run folder MB':>14} {'checkpoints MB':>15}")
    with tempfile.TemporaryDirectory() as tmp:
        for policy in POLICIES:
            out = Path(tmp) / policy
            cfg = load_config({
                "data_dir": str(ROOT / "data" / "glue_sample"), "tasks": ["rte", "mrpc"],
                "central_task": "rte", "weighting": {"scheme": "siwlm", "central_weight": 9},
                "epochs": args.epochs, "max_train_examples": args.rows,
                "max_eval_examples": args.rows, "output_dir": str(out), "checkpoints": policy,
                "cache_dir": str(Path(tmp) / "cache"),
            })
            train(cfg, quiet=True)
            total, ckpts = folder_bytes(out), folder_bytes(out / "checkpoints")
            print(f"{policy:<12} {total / 1e6:>14.3f} {ckpts / 1e6:>15.3f}")


if __name__ == "__main__":
    main()
