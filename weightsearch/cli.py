"""The `weightsearch` console script: a thin dispatcher over the packages' own subcommands.

Each package registers its subcommands in its `cli` module and imports its heavy dependencies
only inside the handler, so `weightsearch train` never imports ray and `recommend` never
imports torch.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Sequence

from weightsearch.core.errors import DiskFull, WeightsearchError, causes

DESCRIPTION = ("Find the loss weight a task should get in multi-task NLU training: train MT-DNN "
               "runs, search central weights with Ray Tune into an Optuna study database, "
               "inspect the studies, and recommend a weight for a new task from its size.")


class _Parser(argparse.ArgumentParser):
    """argparse exits with 2 on usage errors already; keep its message to one clear line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from weightsearch.recommender import cli as recommender_cli
    from weightsearch.service import cli as service_cli
    from weightsearch.studies import cli as studies_cli
    from weightsearch.sweep import cli as sweep_cli
    from weightsearch.trainer import cli as trainer_cli

    parser = _Parser(prog="weightsearch", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    trainer_cli.register(sub)
    sweep_cli.register(sub)
    studies_cli.register_inspect(sub)
    recommender_cli.register(sub)
    studies_cli.register_import(sub)
    studies_cli.register_export(sub)
    service_cli.register(sub)
    return parser


def _version() -> str:
    from weightsearch import __version__

    return f"weightsearch {__version__}"


# Subcommands whose optional dependencies the core install lacks: (extra, modules). Checked
# here, before the handler, so the message names the extra instead of an ImportError.
NEEDS = {"launch": ("cluster", ("ray",)), "resume": ("cluster", ("ray",))}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        precheck = getattr(args, "precheck", None)
        if precheck is not None:  # cheap input checks before a heavy extra is imported
            precheck(args)
        if args.command in NEEDS:
            from weightsearch.core.extras import require_extra

            extra, modules = NEEDS[args.command]
            require_extra(extra, *modules, feature=f"weightsearch {args.command}")
        return int(args.handler(args) or 0)
    except WeightsearchError as exc:
        print(f"weightsearch {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"weightsearch {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as Unix tools do, and keep Python
        # from complaining again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:  # a full disk or a failing study database: one message
        failure = _environment_failure(exc, args)
        if failure is None:
            raise
        print(f"weightsearch {args.command}: error: {failure}", file=sys.stderr)
        return failure.exit_code


def _environment_failure(exc: Exception, args: argparse.Namespace) -> WeightsearchError | None:
    """What the user must fix about the machine, not the input: a full disk, a failing study
    database. None for anything else (a bug: its traceback is wanted)."""
    full = next((e for e in causes(exc)  # torch, safetensors and Ray wrap the OSError
                 if isinstance(e, OSError) and e.errno == errno.ENOSPC), None)
    if full is not None:
        return DiskFull(f"no space left on the disk of {full.filename or 'a file it writes'}; "
                        "free space there and run it again")
    try:
        from weightsearch.studies.storage_failures import storage_failure
        from weightsearch.studies.urls import ENV_STORAGE
    except ImportError:  # an install without the study database's libraries
        return None
    url = getattr(args, "storage", None) or os.environ.get(ENV_STORAGE)
    return storage_failure(exc, url)


if __name__ == "__main__":
    sys.exit(main())
