"""Subcommands of the study side: inspect, recommend, import, serve.

Heavy imports (optuna, pandas, matplotlib, fastapi) happen inside the handlers, so that
`weightsearch recommend --train-size N` starts fast.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from studies.storage import ENV_STORAGE, default_storage_url
from trainer.task_types import NAMES as TASK_TYPES
from weightsearch.errors import ConfigError
from weightsearch.extras import require_extra

_STORAGE_HELP = f"study database URL (default: ${ENV_STORAGE} or sqlite:///weightsearch.db)"
TOKEN_ENV = "WEIGHTSEARCH_TOKEN"

STAGES = ("multitask", "finetuned")  # = studies.schema.STAGES


def register(subparsers) -> None:
    p = subparsers.add_parser("inspect", help="progress of every study, or the cells of one",
                              description="Without STUDY: every study with its progress. With "
                              "STUDY (base name or <study>/<central>): every cell and the best "
                              "central weight per central task.")
    p.add_argument("study", nargs="?", help="a study name, e.g. glue or glue/rte")
    p.add_argument("--storage", default=None, help=_STORAGE_HELP)
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="table (for reading), csv (one row per cell) or json (everything, "
                   "for scripts); default: table")
    p.add_argument("--plot", metavar="FILE", help="metric vs central weight per central task, mean "
                   "+- 1 sd over seeds; the format by the extension: .pdf, .svg or .eps (vector, "
                   "for papers), .png or .jpg (needs the plot extra)")
    p.set_defaults(handler=run_inspect)

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
                   help="answer for studies of this encoder (default: the regime with the "
                   "strongest evidence); others count with a discount")
    p.add_argument("--stage", choices=STAGES,
                   help="answer for scores of this stage (default: the strongest evidence)")
    p.add_argument("--storage", default=None, help=_STORAGE_HELP)
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text (the weight, its range and the evidence table, for reading) or "
                   "json (everything, for scripts); default: text")
    p.add_argument("--plot", metavar="FILE",
                   help="best weight vs training size, with the curve; with --evaluate: "
                   "recommended vs best weight per task. The format by the extension: .pdf, "
                   ".svg or .eps (vector), .png or .jpg (needs the plot extra)")
    p.set_defaults(handler=run_recommend)

    p = subparsers.add_parser("import", help="external results (e.g. a paper's table) as a study",
                              description="Import a CSV/TSV/JSONL with the columns central_task, "
                              "task_type, train_size, central_weight, seed, metric as one study "
                              "per central task (<study>/<central_task>).")
    p.add_argument("file", help="the results file (.csv, .tsv or .jsonl), one row per trial; "
                   "an optional metric_name column names the metric; numeric columns are kept")
    p.add_argument("--study", required=True, help="base name of the imported studies")
    p.add_argument("--storage", default=None, help=_STORAGE_HELP)
    p.set_defaults(handler=run_import)

    p = subparsers.add_parser("serve", help="the REST service (studies, recommend, launch)",
                              description="Serve the study database over HTTP: read studies, "
                              f"recommend a weight, launch or resume a study. With ${TOKEN_ENV} "
                              "set, write routes need 'Authorization: Bearer <token>'. API pages "
                              "at /docs and /redoc. Needs the serve extra.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1); anything but localhost or a "
                   f"loopback address needs ${TOKEN_ENV}")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="a Host name to answer besides localhost and loopback addresses, e.g. "
                   "the name of a reverse proxy in front of a loopback server (repeatable); a "
                   "server on loopback refuses other names, against DNS rebinding")
    p.add_argument("--storage", default=None, help=_STORAGE_HELP)
    p.set_defaults(handler=run_serve)


def _storage(args) -> str:
    return args.storage or default_storage_url()


PLOT_FORMATS = (".png", ".pdf", ".svg", ".eps", ".jpg", ".jpeg")


def check_plot_target(path: str | None) -> None:
    """Before any computing: matplotlib installed, the folder present, a known extension."""
    if not path:
        return
    require_extra("plot", "matplotlib", feature="--plot")
    target = Path(path)
    if target.suffix.lower() not in PLOT_FORMATS:
        raise ConfigError(f"--plot {path}: unknown image format {target.suffix or '(none)'!r}; "
                          f"end the name with one of {', '.join(PLOT_FORMATS)}")
    if not target.parent.is_dir():
        raise ConfigError(f"--plot {path}: folder {str(target.parent)!r} does not exist; "
                          "create it first")


def run_inspect(args) -> int:
    from studies.inspection import inspect

    check_plot_target(args.plot)

    text = inspect(_storage(args), args.study, args.format, args.plot)
    print(text, end="" if text.endswith("\n") else "\n")
    if args.plot:
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def _train_size(args) -> int:
    from studies.recommend import check_train_size

    if args.train_size is not None:
        try:
            return check_train_size(args.train_size)
        except ConfigError as exc:
            raise ConfigError(["--" + m.replace("_", "-", 1) for m in exc.problems]) from None
    if args.data:
        from studies.tables import count_rows

        return count_rows(args.data)
    from studies.tables import count_preset_rows
    from trainer.tasks import PRESETS, preset_key

    spec = PRESETS.get(preset_key(args.task))
    if spec is None:
        raise ConfigError(f"--task {args.task!r} is not a preset; presets: {', '.join(PRESETS)}")
    if not args.data_dir:
        raise ConfigError(f"--task {args.task} needs --data-dir, the folder that holds "
                          f"{spec.train_file}")
    if args.task_type is None:
        args.task_type = spec.type
    return count_preset_rows(spec, args.data_dir)


def run_recommend(args) -> int:
    from studies.recommend import (
        check_regime,
        evaluation_summary,
        leave_one_task_out,
        load_evidence,
        recommend_from,
    )
    from studies.recommend_report import (
        evaluation_text,
        plot_evaluation,
        plot_recommendation,
        recommendation_text,
    )

    if args.data_dir and not args.task:
        raise ConfigError("--data-dir goes with --task PRESET")
    check_regime(args.encoder, args.stage)
    check_plot_target(args.plot)
    size = None if args.evaluate else _train_size(args)  # user errors before any DB access
    evidence = load_evidence(_storage(args))
    if args.evaluate:
        rows, rate, over = leave_one_task_out(evidence, args.encoder, args.stage)
        if args.format == "json":
            print(json.dumps({"evaluated": over, **evaluation_summary(rows), "tasks": rows},
                             indent=2))
        else:
            print(evaluation_text(rows, rate, over))
        rec = None
    else:
        rec = recommend_from(evidence, size, args.task_type, args.encoder, args.stage)
        print(json.dumps(rec.to_dict(), indent=2) if args.format == "json"
              else recommendation_text(rec))
    if args.plot and args.evaluate:
        plot_evaluation(rows, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    elif args.plot:
        plot_recommendation(evidence, rec, args.plot, args.task_type, args.encoder, args.stage)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def run_import(args) -> int:
    from studies.importer import import_file

    names = import_file(args.file, args.study, _storage(args))
    print(f"imported {len(names)} central task(s) into {_storage(args)}: {', '.join(names)}")
    return 0


def run_serve(args) -> int:
    require_extra("serve", "fastapi", "fastapi_offline", "uvicorn", feature="weightsearch serve")
    import uvicorn

    from studies.http_limits import LimitedH11Protocol
    from studies.request_guard import is_loopback
    from studies.service import create_app

    exposed = not is_loopback(args.host)
    if exposed and not os.environ.get(TOKEN_ENV):
        raise ConfigError(
            f"--host {args.host} exposes the service beyond this machine, and its POST routes "
            f"start training runs; set {TOKEN_ENV} to a secret token (clients send "
            f"'Authorization: Bearer <token>'), or bind to 127.0.0.1"
        )
    # Bound to loopback (or told which names to answer): other Host names are refused, so a
    # page whose DNS name the attacker re-points at 127.0.0.1 cannot reach the service.
    hosts = args.allow_host if not exposed or args.allow_host else None
    app = create_app(_storage(args), token_env=TOKEN_ENV, require_token=exposed, hosts=hosts)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", http=LimitedH11Protocol)
    return 0
