"""--plot targets are checked before any computing; missing extras get a clear message."""

from __future__ import annotations

import pytest

from weightsearch.cli import main
from weightsearch.core.errors import ConfigError
from weightsearch.core.extras import require_extra


@pytest.mark.parametrize(("target", "says"), [
    ("missing-folder/plot.png", "does not exist"),
    ("plot.bmpx", "unknown image format"),
    ("plot", "unknown image format"),
])
def test_plot_target_is_checked_first(tmp_path, capsys, target, says):
    url = f"sqlite:///{tmp_path / 'none.db'}"
    path = str(tmp_path / target)
    assert main(["recommend", "--train-size", "2500", "--storage", url, "--plot", path]) == 2
    assert main(["inspect", "--storage", url, "--plot", path]) == 2
    err = capsys.readouterr().err
    assert err.count(says) == 2 and "Traceback" not in err
    assert not (tmp_path / "none.db").exists()  # nothing computed, nothing written


def test_a_missing_extra_names_what_to_install():
    with pytest.raises(ConfigError, match=r"pip install 'weightsearch\[serve\]'"):
        require_extra("serve", "weightsearch_no_such_module", feature="weightsearch serve")
    require_extra("serve", "fastapi", feature="weightsearch serve")  # installed: no error


@pytest.mark.slow
def test_plots_are_written_in_the_format_of_their_extension(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from tests.helpers import TABLE2
    from weightsearch.studies.importer import import_file

    url = f"sqlite:///{tmp_path / 'paper.db'}"
    import_file(TABLE2, "paper", url)
    heads = {".pdf": b"%PDF", ".svg": b"<?xml", ".png": b"\x89PNG"}
    for suffix, head in heads.items():
        target = tmp_path / f"study{suffix}"
        assert main(["inspect", "paper", "--storage", url, "--plot", str(target)]) == 0
        assert target.read_bytes().startswith(head), suffix
        rec = tmp_path / f"rec{suffix}"
        assert main(["recommend", "--train-size", "2500", "--storage", url,
                     "--plot", str(rec)]) == 0
        assert rec.read_bytes().startswith(head), suffix
    # SVG keeps its text as text: the labels a paper needs are there to read.
    svg = (tmp_path / "study.svg").read_text()
    # The shipped table carries its regime (BERT-base, scored after fine-tuning).
    for text in ("rte (train n=2,490)", "finetuned stage", "encoder bert-base-uncased",
                 "central-task loss weight", "accuracy on dev (%)", "no error bar"):
        assert text in svg, text
    rec_svg = (tmp_path / "rec.svg").read_text()
    assert "training examples of the central task (count, log scale)" in rec_svg
    assert "train n=2,500" in rec_svg
    capsys.readouterr()


def test_output_cut_short_by_its_reader_ends_quietly():
    """`weightsearch recommend --evaluate | head -1`: no traceback when the pipe closes."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "weightsearch.cli", "recommend",
                             "--evaluate"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader goes away before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in (0, 141)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
