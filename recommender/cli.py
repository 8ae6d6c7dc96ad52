"""The `recommend` subcommand.

Heavy imports (optuna, pandas, matplotlib) happen inside the handler, so that
`weightsearch recommend --train-size N` starts fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from weightsearch.core.errors import ConfigError, DataError
from weightsearch.studies.cli import STORAGE_HELP, check_plot_target, storage_url
from weightsearch.trainer.task_types import (
    TASK_TYPES,  # a live view: registered types count at once
)

STAGES = ("multitask", "finetuned")  # = studies.schema.STAGES


def register(subparsers) -> None:
    p = subparsers.add_parser("recommend", help="a central weight for a training-set size",
                              description="Recommend a central weight from the training-set "
                              "size, using the SIWLM paper's results and the finished studies.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--train-size", type=int, metavar="N", help="training examples")
    what.add_argument("--data", metavar="FILE",
                      help="count the rows of a CSV/TSV (with a header)/JSONL/Parquet file")
    what.add_argument("--task", metavar="PRESET",
                      help="a task preset (e.g. rte); its train file is counted in --data-dir")
    what.add_argument("--evaluate", action="store_true",
                      help="leave-one-task-out check over the finished central tasks")
    p.add_argument("--data-dir", metavar="DIR", help="data folder of --task")
    p.add_argument("--task-type", choices=TASK_TYPES, help="upweights tasks of the same type")
    p.add_argument("--encoder", metavar="NAME",
                   help="answer for studies of this encoder (default: the regime of your "
                   "own studies, else the default encoder's); others count with a discount")
    p.add_argument("--stage", choices=STAGES,
                   help="answer for scores of this stage (default: the best-supported stage of "
                   "that regime)")
    p.add_argument("--clipping", metavar="REGIME",
                   help="answer for scores trained with this gradient clipping: clip1 (the "
                   "weighted gradient clipped at norm 1, the trainer's default and the "
                   "reference's), uclip1 (grad_clip_mode: unweighted) or noclip (grad_clip: 0), "
                   "each led by rate- for a weight that was the central task's sampling rate "
                   "(weight_acts_on: sampling, e.g. rate-clip1); default clip1 where measured; "
                   "others count with a discount")
    p.add_argument("--storage", default=None, help=STORAGE_HELP)
    p.add_argument("--format", choices=("text", "json", "optuna", "ray"), default="text",
                   help="text (the weight, its range and the evidence table, for reading), "
                   "json (everything, for scripts), optuna (Python that enqueues the answer's "
                   "start points with study.enqueue_trial) or ray (the points_to_evaluate list "
                   "for Ray Tune, JSON); default: text")
    p.add_argument("--param", default="central_weight",
                   help="with --format optuna or ray: the name your search gives the weight "
                   "(default: central_weight, as weightsearch's studies name it)")
    p.add_argument("--plot", metavar="FILE",
                   help="best weight vs training size, with the curve; with --evaluate: "
                   "recommended vs best weight per task. The format by the extension: .pdf, "
                   ".svg or .eps (vector), .png or .jpg (needs the plot extra)")
    p.set_defaults(handler=run_recommend)


def _train_size(args) -> int:
    from weightsearch.recommender.asking import check_train_size

    if args.train_size is not None:
        try:
            return check_train_size(args.train_size)
        except ConfigError as exc:
            raise ConfigError(["--" + m.replace("_", "-", 1) for m in exc.problems]) from None
    if args.data:
        return _count_data(Path(args.data))
    from weightsearch.studies.tables import count_preset_rows
    from weightsearch.trainer.tasks import TASK_PRESETS, preset_key

    spec = TASK_PRESETS.get(preset_key(args.task))
    if spec is None:
        raise ConfigError(f"--task {args.task!r} is not a preset; presets: "
                          f"{', '.join(TASK_PRESETS)}")
    if not args.data_dir:
        raise ConfigError(f"--task {args.task} needs --data-dir, the folder that holds "
                          f"{spec.train_file}")
    if args.task_type is None:
        args.task_type = spec.type
    return count_preset_rows(spec, args.data_dir)


def _count_data(path: Path) -> int:
    """The training examples of --data: its rows, the first line of a CSV/TSV counted too when
    it holds a number (column names do not: the file has no header); says how it counted."""
    from weightsearch.studies.tables import count_rows, table_format

    count = count_rows(path)
    fmt = table_format(path)
    if fmt not in ("csv", "tsv"):
        return count
    first = _first_line(path, "," if fmt == "csv" else "\t")
    shown = ",".join(first)[:60]
    if any(_is_number(cell) for cell in first):
        count += 1
        how = (f"its first line ({shown}) holds a number, so it is read as data, not as a "
               "header")
    else:
        how = (f"its first line ({shown}) is read as the header; a file without one would "
               "be counted one row short: give --train-size N instead")
    print(f"note: --data {path}: {count:,} training examples; {how}", file=sys.stderr)
    return count


def _first_line(path: Path, sep: str) -> list[str]:
    import csv

    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            return next(csv.reader(handle, delimiter=sep), [])
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"--data {path}: cannot read its first line: {exc}") from None


def _is_number(cell: str) -> bool:
    """A finite number ("nan" or "inf" may well be a column's name)."""
    import math

    try:
        return math.isfinite(float(cell))
    except ValueError:
        return False


def run_recommend(args) -> int:
    from weightsearch.recommender.asking import check_regime
    from weightsearch.recommender.evaluation import evaluation_summary, leave_one_task_out
    from weightsearch.recommender.evidence import load_evidence
    from weightsearch.recommender.handover import FORMATS, check_param, optuna_text, ray_text
    from weightsearch.recommender.recommend import recommend_from
    from weightsearch.recommender.report import (
        evaluation_text,
        plot_evaluation,
        plot_recommendation,
        recommendation_text,
    )

    if args.data_dir and not args.task:
        raise ConfigError("--data-dir goes with --task PRESET")
    check_regime(args.encoder, args.stage, clipping=args.clipping)
    check_param(args.param)
    if args.evaluate and args.format in FORMATS:
        raise ConfigError(f"--format {args.format} hands over a recommendation; --evaluate "
                          "prints text or json")
    check_plot_target(args.plot)
    size = None if args.evaluate else _train_size(args)  # user errors before any DB access
    evidence = load_evidence(storage_url(args))
    if args.evaluate:
        rows, rate, over = leave_one_task_out(evidence, args.encoder, args.stage)
        if args.format == "json":
            print(json.dumps({"evaluated": over, **evaluation_summary(rows), "tasks": rows},
                             indent=2))
        else:
            print(evaluation_text(rows, rate, over))
        rec = None
    else:
        assert size is not None  # read above unless --evaluate
        rec = recommend_from(evidence, size, args.task_type, args.encoder, args.stage,
                             clipping=args.clipping)
        if args.format == "optuna":
            print(optuna_text(rec, args.param))
        elif args.format == "ray":
            print(ray_text(rec, args.param))
        else:
            print(json.dumps(rec.to_dict(), indent=2) if args.format == "json"
                  else recommendation_text(rec))
    if args.plot and args.evaluate:
        plot_evaluation(rows, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    elif args.plot:
        plot_recommendation(evidence, rec, args.plot, args.task_type, args.encoder, args.stage)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0
