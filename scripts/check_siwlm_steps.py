"""Check a finished run's steps.jsonl against the SIWLM rule, update by update.

The rule is written out again here from docs/training.md ("SIWLM, exactly") rather than imported
from weightsearch.trainer.weighting, so that a bug in the trainer's scheme cannot agree with
itself.

    python scripts/check_siwlm_steps.py runs/glue-rte-w9

Prints a summary as JSON; exit 0 when every update matches, 1 otherwise, 2 on a bad folder.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import yaml


def expected(cfg: dict, epoch: int, step: int, task: str) -> tuple[str, str, float]:
    """(stage, focus, weight) of one update, from docs/training.md's statement of SIWLM."""
    w = cfg["weighting"]
    names = [t["name"] for t in cfg["tasks"]]
    central = cfg["central_task"]
    order = [central] + [n for n in names if n != central]
    initial = {n: float(w["aux_weight"]) for n in order}
    initial.update({n: float(v) for n, v in (w.get("aux_weights") or {}).items()})
    initial[central] = float(w["central_weight"])
    if epoch % 2 == 1:
        stage, focus = "swl", order[(step // w["focus_span"]) % len(order)]
    else:
        stage, focus = "iwl", central
    if task == focus:
        weight = 1.0 if w["variant"] == "paper" else initial[task]
    else:
        weight = initial[task] * w["off_focus"]
    return stage, focus, weight


def check(run_dir: Path) -> dict:
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    if cfg["weighting"]["scheme"] != "siwlm":
        raise ValueError(f"{run_dir} used weighting {cfg['weighting']['scheme']!r}, not siwlm")
    rows = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    mismatches, counts = [], {}
    previous = (0, -1)
    for global_step, row in enumerate(rows):
        stage, focus, weight = expected(cfg, row["epoch"], row["step"], row["task"])
        step_ok = row["global_step"] == global_step and (
            (row["epoch"], row["step"]) == (previous[0], previous[1] + 1)
            or (row["epoch"] == previous[0] + 1 and row["step"] == 0)
        )
        if not (step_ok and row["stage"] == stage and row["focus"] == focus
                and math.isclose(row["weight"], weight, rel_tol=1e-9)):
            mismatches.append({"logged": row, "expected": {"stage": stage, "focus": focus,
                                                           "weight": weight}})
        key = f"{row['task']}@{weight:g}"
        counts[key] = counts.get(key, 0) + 1
        previous = (row["epoch"], row["step"])
    epochs = {r["epoch"] for r in rows}
    return {"run": str(run_dir), "updates": len(rows), "epochs": sorted(epochs),
            "mismatches": len(mismatches), "first_mismatches": mismatches[:3],
            "updates_per_task_and_weight": dict(sorted(counts.items()))}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/check_siwlm_steps.py RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(argv[0])
    try:
        summary = check(run_dir)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"run folder {run_dir}: {exc}; give the output_dir of a finished SIWLM run",
              file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=1))
    return 0 if summary["mismatches"] == 0 and summary["updates"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
