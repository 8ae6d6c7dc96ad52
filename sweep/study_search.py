"""Parsing a study file's search: `search:` (a strategy, its settings and the space), or the
`weights:` shorthand for the central weight alone, and the `warm_start:` points a search tries
first. The space's own parsing: `sweep/space_parsing.py`; the checks across keys:
`sweep/study_checks.py`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from weightsearch.core.fields import is_real, unknown_keys
from weightsearch.studies.schema import SEARCH_GRID
from weightsearch.sweep.space import (
    CENTRAL_WEIGHT,
    EXHAUSTIVE_GROUP_MAX,
    Dimension,
    Point,
    Space,
)
from weightsearch.sweep.space_parsing import parse_space
from weightsearch.sweep.strategies import (
    STRATEGIES,
    StrategyContext,
    parse_settings,
)
from weightsearch.sweep.study_file import Search


def parse_search(raw: Mapping[str, Any], tasks: tuple[str, ...],
                  problems: list[str]) -> Search:
    if "weights" in raw and "search" in raw:
        problems.append("weights: give either weights (the central weight alone) or search, "
                        "not both")
    if "search" in raw:
        return _parse_search_mapping(raw["search"], tasks, problems)
    return _parse_weights(raw.get("weights", list(SEARCH_GRID)), problems)


def _parse_weights(raw: Any, problems: list[str]) -> Search:
    """The shorthand `weights:` for a search over the central weight alone."""
    from weightsearch.sweep.space_parsing import (  # the same checks as search.space
        parse_range,
        parse_values,
    )

    grid = STRATEGIES["grid"]
    if isinstance(raw, Mapping):
        known = ("low", "high", "n_trials", "sampler", "step")
        unknown_keys(raw, known, problems, "weights.")
        dim = parse_range(CENTRAL_WEIGHT, {k: v for k, v in raw.items()
                                            if k in ("low", "high", "step")},
                           problems, "weights")
        settings = parse_settings("guided", raw, StrategyContext(Space(()), "weights"), problems)
        dim = dim or Dimension(CENTRAL_WEIGHT, low=1.0, high=15.0)
        return Search("guided", settings, Space((dim,)), shorthand=True)
    if not isinstance(raw, list):
        problems.append(f"weights: expected a list of weights or a mapping "
                        f"{{low, high, n_trials}}, got {raw!r}")
        raw = list(SEARCH_GRID)
    if not raw:
        problems.append("weights: the grid is empty; list at least one weight, "
                        "e.g. weights: [1, 2, 4, 8, 15]")
        raw = list(SEARCH_GRID)
    dim = parse_values(CENTRAL_WEIGHT, raw, problems, "weights", categorical=False)
    dim = dim or Dimension(CENTRAL_WEIGHT, values=SEARCH_GRID)
    return Search("grid", grid.settings_type(), Space((dim,)), shorthand=True)


def _parse_search_mapping(raw: Any, tasks: tuple[str, ...], problems: list[str]) -> Search:
    if not isinstance(raw, Mapping):
        problems.append("search: expected a mapping such as {strategy: grid, space: "
                        "{weighting.central_weight: [1, 9]}}")
        raw = {}
    space = parse_space(raw.get("space"), tasks, problems)
    default = "grid"
    group = space.group
    if group is not None and len(group.candidates) > EXHAUSTIVE_GROUP_MAX:
        default = "forward"  # 2^6 = 64 groups and up: greedy forward selection
    name = raw.get("strategy", default)
    if name not in STRATEGIES:
        problems.append(f"search.strategy: {name!r} is not one of {', '.join(STRATEGIES)}")
        name = "grid"
    settings_type = STRATEGIES[name].settings_type
    known = ("strategy", "space", *settings_type.KEYS)
    unknown_keys(raw, known, problems, "search.", owner=f"strategy {name}")
    settings = parse_settings(name, raw, StrategyContext(space, "search"), problems)
    return Search(name, settings, space)


def parse_warm(raw: Any, search: Search, central: tuple[str, ...],
                problems: list[str]) -> tuple[tuple[Point, ...], bool]:
    if raw is None or raw == []:
        return (), False
    if not STRATEGIES[search.strategy].accepts_warm_start:
        problems.append("warm_start: applies to a guided search (weights: {n_trials: ...}) or "
                        "halving only; a grid tries every point anyway")
        return (), False
    if raw == "recommend":
        if search.space.dim(CENTRAL_WEIGHT) is None:
            problems.append("warm_start: recommend proposes a central weight, and this space "
                            "does not search weighting.central_weight; list points instead")
        return (), True
    if not isinstance(raw, list):
        problems.append(f"warm_start: expected a list of points or `recommend`, got {raw!r}")
        return (), False
    space = search.space
    out: list[Point] = []
    for i, item in enumerate(raw):
        point = {CENTRAL_WEIGHT: item} if space.central_weight_only and \
            not isinstance(item, Mapping) else item
        if not isinstance(point, Mapping) or set(point) != set(space.paths):
            problems.append(f"warm_start[{i}]: give a value for every searched path "
                            f"({', '.join(space.paths)}), e.g. {{{space.paths[0]}: ...}}")
            continue
        point = space.normalise(point)
        ok = True
        for d in space.dims:
            value = point[d.path]
            if d.path == CENTRAL_WEIGHT and not is_real(value):
                problems.append(f"warm_start[{i}]: {value!r} is not a number; use a weight "
                                "inside the search range")
                ok = False
            elif not d.contains(value, central[0] if central else ""):
                bounds = (f"the search range {d.low:g}..{d.high:g}; move it inside or widen "
                          f"{'weights' if search.shorthand else 'search.space.' + d.path}"
                          ".low/high") if d.kind == "range" else "the searched values"
                problems.append(f"warm_start[{i}]: {value!r} lies outside {bounds}")
                ok = False
        if ok:
            out.append({p: float(v) if p == CENTRAL_WEIGHT else v for p, v in point.items()})
    return tuple(out), False

