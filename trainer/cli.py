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

    s = sub.add_parser(
        "soft-targets",
        help="build a student's distillation targets from teacher runs",
        description="Average the class probabilities (or scores) of finished teacher runs on a "
        "student's training rows and store them beside the tokenized cache; prints the distill "
        "setting that uses them.",
    )
    s.add_argument("--config", required=True, metavar="STUDENT.yaml", help="the student's run "
                   "config (its data settings decide the rows)")
    s.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key (repeatable)")
    s.add_argument("--candidates", nargs="+", metavar="RUN_DIR", default=[],
                   help="finished teacher runs to pick from, instead of the config's "
                   "distill.teachers")
    s.add_argument("--best", type=int, default=3, metavar="K",
                   help="with --candidates: per task, the K runs with the best dev score "
                   "(default 3)")
    s.set_defaults(handler=_soft_targets)


def _train(args: argparse.Namespace) -> int:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub
    from weightsearch.trainer.config import load_config

    cfg = load_config(args.config, args.overrides)  # a bad config costs no torch import
    from weightsearch.trainer.pipeline import train

    result = train(cfg, resume=args.resume, quiet=args.quiet)
    summary = {
        "output_dir": str(result.output_dir),
        "best": {t: m for t, m in result.best.items()},
        "best_epoch": result.best_epoch,
        **({"finetuned": result.stage_best("finetuned")} if result.finetuned else {}),
        "wall_time_s": round(result.wall_time_s, 1),
        "train_examples_per_s": round(result.train_examples_per_s, 1),
    }
    print(json.dumps(summary, indent=1))
    return 0


def _soft_targets(args: argparse.Namespace) -> int:
    import os
    import sys

    import yaml

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from weightsearch.core.errors import ConfigError
    from weightsearch.trainer.config import load_config
    from weightsearch.trainer.device import select_runtime
    from weightsearch.trainer.distill import build_soft_target_files, pick_teachers
    from weightsearch.trainer.encoders import load_tokenizer, resolve_encoder
    from weightsearch.trainer.run_data import load_data

    cfg = load_config(args.config, args.overrides)
    if args.candidates:
        if args.best < 1:
            raise ConfigError([f"--best: {args.best} is not a count; give K >= 1"])
        picked = pick_teachers(cfg, args.candidates, args.best)
        for task, runs in picked.items():
            for run, source in runs:
                print(f"{task}: teacher {run} (dev {source.score:.4f}, {source.stage} epoch "
                      f"{source.epoch})", file=sys.stderr)
        cfg = load_config({**cfg.to_dict(), "distill": {"teachers": {
            task: [str(run) for run, _ in runs] for task, runs in picked.items()}}})
    if cfg.distill is None:
        raise ConfigError(["distill: the config names no teachers; add distill.teachers or "
                           "pass --candidates RUN_DIR ..."], args.config)
    runtime = select_runtime(cfg.device, cfg.precision, cfg.num_threads)
    tokenizer = load_tokenizer(os.path.expanduser(resolve_encoder(cfg.encoder)))
    data = load_data(cfg, tokenizer)
    # Notes on stderr: stdout is the distill setting alone, ready to redirect into a config.
    paths = build_soft_target_files(cfg, data, tokenizer, runtime,
                                    note=lambda line: print(line, file=sys.stderr))
    print(yaml.safe_dump({"distill": {"teachers": {t: str(p) for t, p in paths.items()}}},
                         sort_keys=False), end="")
    return 0
