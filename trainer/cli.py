"""`weightsearch train`: one MT-DNN run from a YAML config, no Ray, no Optuna."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train one MT-DNN run (no Ray, no Optuna)",
        description="Train one MT-DNN run with the weighting scheme of its config.",
    )
    p.add_argument("--config", required=True, metavar="RUN.yaml", help="run config (YAML)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set weighting.central_weight=9 (repeatable)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the last epoch checkpoint in output_dir",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar (for workers and logs)")
    p.set_defaults(handler=_train)


def _train(args: argparse.Namespace) -> int:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub
    from trainer.config import load_config
    from trainer.loop import train

    cfg = load_config(args.config, args.overrides)
    result = train(cfg, resume=args.resume, quiet=args.quiet)
    summary = {
        "output_dir": str(result.output_dir),
        "best": {t: m for t, m in result.best.items()},
        "best_epoch": result.best_epoch,
        "wall_time_s": round(result.wall_time_s, 1),
        "train_examples_per_s": round(result.train_examples_per_s, 1),
    }
    print(json.dumps(summary, indent=1))
    return 0
