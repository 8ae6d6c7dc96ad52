"""Growing a study: a launch whose study file adds cells to a stored grid study.

A study's results stay comparable only while every cell it already holds would train exactly
as before. So a changed study file extends a stored study when:
  - both search a grid (an adaptive strategy chose its points from the results so far),
    with the same objective and the same scheduler;
  - it keeps every central task, seed and grid value, and may add more of each (and new tasks
    to train.tasks, e.g. a larger size of a ladder, that the old cells do not train);
  - the run config of every old cell is the same, apart from the settings that decide where
    and how fast a trial runs, not what it learns (EXECUTION_KEYS: the settings a run may
    resume with changed, so that an interrupted old cell still continues from its checkpoint:
    device, threads, caches, logging, tracking, the output folder).
`precision: auto` is compared as written: grown on a GPU, new cells compute in bf16 where old
ones ran in fp32 on a CPU (each checkpoint records the precision it trained in); write
`precision` explicitly from the start where that matters.
Anything else is another study: the launch is refused and says what changed.
"""

from __future__ import annotations

import itertools
from typing import Any

from weightsearch.core.errors import ConfigError
from weightsearch.sweep.spec import StudySpec
from weightsearch.trainer.resume import RESUME_FREE

# Run-config keys that do not change what a trial learns: those a run may resume with changed,
# so that an interrupted old cell of a grown study still continues from its checkpoint.
EXECUTION_KEYS = RESUME_FREE


def extension_problem(old: StudySpec, new: StudySpec, central: str) -> str | None:
    """Why `new` does not extend `old`'s study of `central` (None when it does)."""
    if (old.search.strategy, new.search.strategy) != ("grid", "grid"):
        return "only a grid search can be extended (an adaptive one chose its points from " \
               "the results so far)"
    for what, a, b in (("objective", old.objective, new.objective),
                       ("scheduler", old.scheduler.name, new.scheduler.name),
                       ("search space", old.space.paths, new.space.paths)):
        if a != b:
            return f"its {what} changed"
    for listed, before, after in (("central tasks", old.central_tasks, new.central_tasks),
                                  ("seeds", old.seeds, new.seeds)):
        dropped = [str(x) for x in before if x not in after]
        if dropped:
            return f"it drops {listed} {', '.join(dropped)}"
    options = []
    for d_old, d_new in zip(old.space.dims, new.space.dims, strict=True):
        was, now = d_old.options(central), d_new.options(central)
        if was is None or now is None:
            return f"{d_old.path} is a continuous range, not a grid"
        dropped = [v for v in was if v not in now]
        if dropped:
            return f"it drops {d_old.path} value(s) {', '.join(map(str, dropped))}"
        options.append(was)
    for values in itertools.product(*options):
        point = dict(zip(old.space.paths, values, strict=True))
        changed = _training_changes(old, new, central, point)
        if changed:
            return (f"cell {old.space.label(point)} would train differently (changed: "
                    f"{', '.join(changed)})")
    return None


def _training_changes(old: StudySpec, new: StudySpec, central: str,
                      point: dict[str, Any]) -> list[str]:
    seed = old.seeds[0]
    try:
        a = old.for_cell(central, point, seed, "unused").to_dict()
        b = new.for_cell(central, point, seed, "unused").to_dict()
    except ConfigError as exc:
        return [f"the new file cannot train it: {exc.problems[0]}"]
    return sorted(k for k in set(a) | set(b)
                  if k not in EXECUTION_KEYS and a.get(k) != b.get(k))
