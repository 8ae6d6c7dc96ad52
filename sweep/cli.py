"""`weightsearch launch` and `weightsearch resume`; ray is imported only inside the handlers."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from weightsearch.core.errors import StorageError
from weightsearch.studies.storage_failures import storage_failure
from weightsearch.studies.urls import default_storage_url, shown_url

if TYPE_CHECKING:
    from weightsearch.sweep.summary import SweepSummary


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "launch", help="run a weight-search study (only the cells not finished yet)",
        description="Run every pending cell (central task, weight, seed) of a study file on Ray; "
        "results go to the Optuna study database.",
    )
    p.add_argument("study_file", metavar="STUDY.yaml", help="the study file")
    _common(p, default_storage="the study file's storage, else ")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a study setting, e.g. --set train.epochs=1 (repeatable)")
    p.set_defaults(handler=_launch, precheck=_check_study_file)

    r = sub.add_parser(
        "resume", help="continue a study with the configuration stored in the database",
        description="Run the cells of study STUDY that have not finished, e.g. after the "
        "driver was killed; trials continue from their last epoch checkpoint.",
    )
    r.add_argument("study", metavar="STUDY", help="the study name (without /<central task>)")
    _common(r, default_storage="")
    r.set_defaults(handler=_resume)


def _common(p: argparse.ArgumentParser, default_storage: str) -> None:
    p.add_argument("--storage", metavar="URL", default=None,
                   help=f"SQLAlchemy URL of the study database (default: {default_storage}"
                   f"$WEIGHTSEARCH_STORAGE or {shown_url(default_storage_url())})")
    p.add_argument("--ray-address", metavar="ADDR", default=None,
                   help="join a running Ray cluster (host:port of the head node) instead of "
                   "starting one on this machine")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def _check_study_file(args: argparse.Namespace) -> None:
    """A study file that is not there, refused before ray is imported (seconds) to run it."""
    from pathlib import Path

    from weightsearch.core.errors import ConfigError

    path = Path(args.study_file)  # other kinds of file: the study file's reader refuses them
    if path.is_dir() or not path.exists():
        what = "is a folder, not" if path.is_dir() else "does not exist; give the path of"
        raise ConfigError([f"study file {path} {what} a study file (STUDY.yaml)"])


def _launch(args: argparse.Namespace) -> int:
    from weightsearch.sweep.launch import launch
    from weightsearch.sweep.spec import load_study_spec

    spec = load_study_spec(args.study_file, overrides=args.overrides)
    url = args.storage or spec.storage or default_storage_url()
    with _storage_named(url, spec.study):
        summary = launch(spec, storage_url=url, ray_address=args.ray_address,
                         progress=not args.quiet)
    return _report(summary)


def _resume(args: argparse.Namespace) -> int:
    from weightsearch.sweep.launch import resume

    url = args.storage or default_storage_url()
    with _storage_named(url, args.study):
        summary = resume(args.study, storage_url=url, ray_address=args.ray_address,
                         progress=not args.quiet)
    return _report(summary)


@contextlib.contextmanager
def _storage_named(url: str, study: str) -> Iterator[None]:
    """A failure of the study database mid-study: one message naming it, and how to go on."""
    try:
        yield
    except Exception as exc:
        failure = storage_failure(exc, url)
        if failure is None:
            raise
        raise StorageError(f"{failure}; then `weightsearch resume {study} --storage "
                           f"{shown_url(url)}` continues the study") from None


def _report(summary: SweepSummary) -> int:
    for line in summary.lines():
        print(line)
    print(f"details: weightsearch inspect {summary.study} --storage "
          f"{shown_url(summary.storage_url)}")
    if not summary.finished:
        print(f"{summary.total - summary.complete} cells did not finish; "
              f"`weightsearch resume {summary.study} --storage {shown_url(summary.storage_url)}` "
              "runs them again", file=sys.stderr)
        return 1
    return 0
