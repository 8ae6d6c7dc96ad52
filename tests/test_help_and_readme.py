"""The README's command table and the commands' own help tell the same story: every
subcommand has a row, and every option of a subcommand appears in its row."""

from __future__ import annotations

import argparse
import re

from tests.helpers import ROOT
from weightsearch.cli import build_parser


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _readme_rows() -> dict[str, str]:
    rows = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        found = re.match(r"^\| `weightsearch ([a-z-]+)([^`]*)`", line)
        if found:
            rows[found.group(1)] = found.group(2)
    return rows


def test_every_command_and_option_is_in_the_readme_table():
    rows = _readme_rows()
    commands = _subcommands()
    assert set(rows) == set(commands)
    missing = {name: [opt for a in parser._actions if a.option_strings and a.dest != "help"
                      for opt in [max(a.option_strings, key=len)] if opt not in rows[name]]
               for name, parser in commands.items()}
    assert {k: v for k, v in missing.items() if v} == {}


def test_resume_help_speaks_of_the_database_not_a_study_file(capsys):
    import pytest

    with pytest.raises(SystemExit):
        build_parser().parse_args(["resume", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "study file's storage" not in text and "(default: $WEIGHTSEARCH_STORAGE" in text
