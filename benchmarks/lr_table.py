"""The learning-rate study's scores (benchmarks/study-minilm-lr.yaml) per seed and per rate.

    python benchmarks/lr_table.py --storage sqlite:///minilm-lr.db [--csv results/minilm_lr.csv]

Each finished trial's dev scores at its last epoch (each task's primary metric: SST-2 and MRPC
accuracy, STS-B correlation), one row per (rate, seed), then the mean over seeds per rate.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--storage", required=True)
    p.add_argument("--study", default="minilm-lr/stsb")
    p.add_argument("--csv", help="write the per-seed rows here")
    args = p.parse_args()

    import optuna

    study = optuna.load_study(study_name=args.study, storage=args.storage)
    rows = []
    for t in study.get_trials(states=[optuna.trial.TrialState.COMPLETE]):
        primary = t.user_attrs["history"][-1]["primary"]  # the last epoch's, per task
        rows.append({"lr": t.user_attrs["point"]["lr"], "seed": t.user_attrs["seed"],
                     **{task: round(v, 4) for task, v in sorted(primary.items())}})
    if not rows:
        sys.exit(f"no finished trial in {args.study}")
    rows.sort(key=lambda r: (r["lr"], r["seed"]))
    tasks = [k for k in rows[0] if k not in ("lr", "seed")]
    print(f"{'lr':>8} {'seed':>4} " + " ".join(f"{t:>6}" for t in tasks))
    for r in rows:
        print(f"{r['lr']:>8g} {r['seed']:>4} " + " ".join(f"{r[t]:>6.3f}" for t in tasks))
    print("mean over seeds:")
    for rate in sorted({r["lr"] for r in rows}):
        same = [r for r in rows if r["lr"] == rate]
        means = [statistics.fmean(r[t] for r in same) for t in tasks]
        print(f"{rate:>8g} {len(same):>4} " + " ".join(f"{m:>6.3f}" for m in means))
    if args.csv:
        with Path(args.csv).open("w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=["lr", "seed", *tasks])
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
