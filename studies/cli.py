"""Subcommands of the study database: inspect, import and export.

Heavy imports (optuna, pandas, matplotlib) happen inside the handlers, so that the console
script starts fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

from weightsearch.core.errors import ConfigError
from weightsearch.core.extras import require_extra
from weightsearch.studies.urls import ENV_STORAGE, default_storage_url

STORAGE_HELP = f"study database URL (default: ${ENV_STORAGE} or sqlite:///weightsearch.db)"

def register_inspect(subparsers) -> None:
    p = subparsers.add_parser("inspect", help="progress of every study, or the cells of one",
                              description="Without STUDY: every study with its progress. With "
                              "STUDY (base name or <study>/<central>): every cell and the best "
                              "central weight per central task; for a grouping study (tasks: "
                              "{groups_of: [...]}), the networks to train for each budget.")
    p.add_argument("study", nargs="?", help="a study name, e.g. glue or glue/rte")
    p.add_argument("--storage", default=None, help=STORAGE_HELP)
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="table (for reading), csv (one row per cell) or json (everything, "
                   "for scripts); default: table")
    p.add_argument("--plot", metavar="FILE", help="metric vs central weight per central task, mean "
                   "+- 1 sd over seeds (a grouping study: total score vs budget); the format "
                   "by the extension: .pdf, .svg or .eps (vector, "
                   "for papers), .png or .jpg (needs the plot extra)")
    p.add_argument("--budget", type=int, metavar="N", help="a grouping study (tasks: "
                   "{groups_of: [...]}): only the choice of at most N networks (1 to the number "
                   "of tasks); default: every budget")
    p.set_defaults(handler=run_inspect)

def register_import(subparsers) -> None:
    p = subparsers.add_parser("import", help="external results (e.g. a paper's table) as a study",
                              description="Import a CSV/TSV/JSONL with the columns central_task, "
                              "task_type, train_size, central_weight, seed, metric as one study "
                              "per central task (<study>/<central_task>).")
    p.add_argument("file", help="the results file (.csv, .tsv or .jsonl), one row per trial; "
                   "an optional metric_name column names the metric; numeric columns are kept")
    p.add_argument("--study", required=True, help="base name of the imported studies")
    p.add_argument("--storage", default=None, help=STORAGE_HELP)
    p.set_defaults(handler=run_import)

def register_export(subparsers) -> None:
    p = subparsers.add_parser("export", help="a study's finished trials as an import file",
                              description="Write every finished trial of STUDY (a weight "
                              "search) in the format `weightsearch import` reads, with the "
                              "regime (encoder, stage, variant) and dataset it recorded, so "
                              "that another database can import the same evidence.")
    p.add_argument("study", help="a study name, e.g. glue or glue/rte")
    p.add_argument("--output", "-o", required=True, metavar="FILE",
                   help="the file to write (.csv or .tsv); replaced whole")
    p.add_argument("--storage", default=None, help=STORAGE_HELP)
    p.set_defaults(handler=run_export)


def storage_url(args) -> str:
    return args.storage or default_storage_url()


PLOT_FORMATS = (".png", ".pdf", ".svg", ".eps", ".jpg", ".jpeg")


def check_plot_target(path: str | None) -> None:
    """Before any computing: matplotlib installed, the folder present, a known extension."""
    if not path:
        return
    from weightsearch.core.files import check_output_file

    require_extra("plot", "matplotlib", feature="--plot")
    target = Path(path)
    if target.suffix.lower() not in PLOT_FORMATS:
        raise ConfigError(f"--plot {path}: unknown image format {target.suffix or '(none)'!r}; "
                          f"end the name with one of {', '.join(PLOT_FORMATS)}")
    check_output_file(target, "--plot")


def run_inspect(args) -> int:
    from weightsearch.studies.inspection import inspect

    if args.budget is not None and args.budget < 1:  # the task count is checked once read
        raise ConfigError(f"--budget: {args.budget} networks; give at least 1 (one network "
                          "for every task)")
    check_plot_target(args.plot)

    text = inspect(storage_url(args), args.study, args.format, args.plot, args.budget)
    print(text, end="" if text.endswith("\n") else "\n")
    if args.plot:
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def run_import(args) -> int:
    from weightsearch.studies.importer import import_file
    from weightsearch.studies.url_checks import check_url
    from weightsearch.studies.urls import shown_url

    check_url(storage_url(args), write=True)  # not into memory, nor a read-only file
    names = import_file(args.file, args.study, storage_url(args))
    tasks = f"{len(names)} central task{'s' if len(names) != 1 else ''}"
    print(f"imported {tasks} into {shown_url(storage_url(args))}: "
          f"{', '.join(names)}")
    return 0


def run_export(args) -> int:
    from weightsearch.studies.exporter import export_study

    n = export_study(storage_url(args), args.study, args.output)
    print(f"exported {n} trial(s) of {args.study} to {args.output}")
    return 0
