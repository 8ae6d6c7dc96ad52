"""The live line speaks of single trials ("top trial"), never of a best weight: only the
summary's verdict, over seeds and drivers, names one."""

from __future__ import annotations

import io

from sweep.progress import Progress


def test_the_live_line_names_the_top_trial_not_a_best_weight():
    out = io.StringIO()
    p = Progress("s", 4, 2, stream=out, metric="accuracy", live=False)
    p.started("a", "rte", "w=1", 1, 2)
    p.finished("a", "COMPLETE", 3.0, 0.52)
    p.started("b", "rte", "w=9", 1, 2)
    p.finished("b", "COMPLETE", 3.0, 0.49)
    line = p.status()
    assert "top trial rte w=1 (0.5200)" in line and "best" not in line
