"""The answer handed to another tuner as its starting points: Optuna's `enqueue_trial` calls
(`recommend --format optuna`) or Ray Tune's `points_to_evaluate` list (`--format ray`).

The points are the recommended weight first, then the two ends of the weights the evidence
cannot tell from the best (`equivalent`), or of the 80% range where no measurement says how
flat the curve is: a search that starts there tries the answer and both edges of what is known
before it explores. Rounded to 2 decimals; repeated values once.
"""

from __future__ import annotations

import json
import re

from weightsearch.core.errors import ConfigError
from weightsearch.recommender.recommend import Recommendation

FORMATS = ("optuna", "ray")
PARAM_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-/]{0,99}")
DEFAULT_PARAM = "central_weight"  # the name weightsearch's own studies give the weight


def check_param(name: str) -> str:
    if not isinstance(name, str) or not PARAM_PATTERN.fullmatch(name):
        raise ConfigError(f"--param must be a parameter name (a letter or _ first, then "
                          f"letters, digits, _ . - /; at most 100), got {name!r}")
    return name


def start_points(rec: Recommendation) -> list[float]:
    """The recommended weight, then the ends of the equivalent set (else the 80% range)."""
    ends = rec.equivalent if rec.equivalent is not None else list(rec.interval)
    out: list[float] = []
    for weight in (rec.central_weight, *ends):
        value = round(float(weight), 2)
        if value not in out:
            out.append(value)
    return out


def _origin(rec: Recommendation) -> str:
    return (f"weightsearch recommend --train-size {rec.train_size}: "
            f"{rec.central_weight:.2f} (80% range {rec.interval[0]:.2f}-{rec.interval[1]:.2f})")


def optuna_text(rec: Recommendation, param: str = DEFAULT_PARAM) -> str:
    """Python that enqueues the start points in an Optuna study (`study` is the user's)."""
    lines = [f"# {_origin(rec)}",
             "# Enqueued trials run first; pass your own study (optuna.load_study(...)).",
             "import optuna", "",
             "study = optuna.create_study(direction=\"maximize\")"]
    lines += [f"study.enqueue_trial({{{json.dumps(param)}: {w!r}}})"
              for w in start_points(rec)]
    return "\n".join(lines)


def ray_text(rec: Recommendation, param: str = DEFAULT_PARAM) -> str:
    """The start points as JSON for Ray Tune's `points_to_evaluate`."""
    return json.dumps([{param: w} for w in start_points(rec)])
