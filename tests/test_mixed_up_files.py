"""A study file given to `train`, or a run config given to `launch`: one message naming the
right command, exit 2, not a page of unknown settings."""

from __future__ import annotations

import pytest

from tests.helpers import EXAMPLES
from weightsearch.cli import main


@pytest.mark.parametrize(("argv", "needle"), [
    (["train", "--config", str(EXAMPLES / "study-sample.yaml")],
     "this is a study file (it has study: and train:), not a run config; run the study with "
     "`weightsearch launch FILE`"),
    (["launch", str(EXAMPLES / "run-sample.yaml")],
     "this is a run config (it has tasks: and no study: or train:), not a study file; train it "
     "with `weightsearch train --config FILE`"),
])
def test_the_other_kind_of_file_names_the_right_command(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") <= 3 and "known settings" not in err


def test_several_unknown_settings_list_the_known_ones_once(tmp_path, capsys):
    run = tmp_path / "run.yaml"
    run.write_text("tasks: [rte]\nbogus: 1\nlrr: 2\nepochz: 3\n")
    assert main(["train", "--config", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("known settings:") == 1
    assert "epochz: unknown setting (did you mean epochs?)" in err
