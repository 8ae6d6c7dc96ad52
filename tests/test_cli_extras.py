"""--plot targets are checked before any computing; missing extras get a clear message."""

from __future__ import annotations

import pytest

from weightsearch.cli import main
from weightsearch.errors import ConfigError
from weightsearch.extras import require_extra


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
