"""Before a study spends: refuse a search whose every central weight trains one treatment.

Two ways a grid can be inert, judged before the first write:

- by its settings alone (`settings_problems`, at parse time: `launch` exits 2, the service
  answers 400): a central task trained without an auxiliary task, where a loss weight scales
  the whole loss (which every optimizer here, all of the Adam family, cancels up to its eps)
  and a sampling rate has nothing to share batches with; SIWLM's paper variant with
  `off_focus: 0`, whose central weight reaches no batch;
- by a probe of the central task's gradient norms (`refuse_clipped_grids`, in `launch`
  before the storage is opened): under global clipping, every weight above the point where
  each central update is clipped trains the same steps.

A study that means it sets `allow_inert: true`. The first finished cell judges again from the
whole run's record (`sweep/live_range.py`), since a probe sees only the first updates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from weightsearch.core.errors import ConfigError
from weightsearch.sweep.progress import say
from weightsearch.sweep.space import CENTRAL_WEIGHT, Dimension
from weightsearch.sweep.weight_action import LOSS

if TYPE_CHECKING:
    from weightsearch.sweep.study_file import Search, StudySpec

MEANS_IT = "or set allow_inert: true in the study file to train them anyway"


def clipping_fix(limit: float, grad_clip: float) -> str:
    """What makes the weights differ again, under global clipping at `grad_clip` from weight
    `limit` up."""
    inside = (f"search weights up to about {limit:.2g}" if limit >= 1 else
              f"raise train.grad_clip well above {grad_clip:g} (it clips every central update "
              f"from weight {limit:.2g} up)")
    return (f"set train.grad_clip_mode: unweighted (the weight then scales the step at any "
            f"norm), weight by sampling instead (weight_acts_on: sampling), or {inside}")


def settings_problems(train: Mapping[str, Any], search: Search, central_tasks: Sequence[str],
                      aux_of: Mapping[str, Sequence[str]], weight_acts_on: str) -> list[str]:
    """The study's searched central weight is one treatment by its settings alone."""
    if not search.space.central_weight_only:
        return []
    problems = []
    alone = [c for c in central_tasks if not aux_of.get(c)]
    if alone:
        why = ("a loss weight scales the whole loss, which the Adam-family optimizers cancel "
               "(up to their eps)" if weight_acts_on == LOSS else
               "a sampling rate has no other task to share the batches with")
        problems.append(
            f"central_tasks: {', '.join(alone)} would train with no auxiliary task, where every "
            f"searched weight is one treatment ({why}); add auxiliary tasks to train.tasks (or "
            f"aux_tasks), {MEANS_IT}")
    weighting = train.get("weighting")
    if (weight_acts_on == LOSS and isinstance(weighting, Mapping)
            and weighting.get("variant") == "paper" and weighting.get("off_focus") == 0):
        problems.append(
            "train.weighting: SIWLM's paper variant trains the focus batches at 1 whatever the "
            "weight, and off_focus: 0 gives every other batch weight 0, so the central weight "
            f"reaches no batch; set off_focus above 0 or use variant: reference, {MEANS_IT}")
    return problems


def weights_of(dim: Dimension | None) -> list[float]:
    """The searched central weights: a grid's values, or a range's two ends."""
    if dim is None:
        return []
    if dim.values:
        return sorted(float(w) for w in dim.values)
    return [float(w) for w in (dim.low, dim.high) if w is not None]


def needs_probe(spec: StudySpec) -> bool:
    """Whether the study refuses a grid of one treatment and searches more than one loss
    weight alone (a probe then judges what its clipping leaves of them)."""
    return (not spec.allow_inert and spec.weight_acts_on == LOSS
            and spec.space.central_weight_only
            and len(set(weights_of(spec.space.dim(CENTRAL_WEIGHT)))) > 1)


def refuse_clipped_grids(spec: StudySpec, centrals: Sequence[str], progress: bool) -> None:
    """Probe each of `centrals` (their studies hold no finished cell yet) at the grid's smallest
    weight and first seed; raise ConfigError naming each central task whose every searched
    weight lies above the probe's clipping limit, and say which weights will train alike where
    only some do. Nothing is written but the tokenisation cache."""
    if not centrals or not needs_probe(spec):
        return
    dim = spec.space.dim(CENTRAL_WEIGHT)
    weights = weights_of(dim)
    span = "grid" if dim is not None and dim.values else "range"
    field = "weights" if spec.search.shorthand else "search"  # as the file wrote it
    problems = []
    for central in centrals:
        point = {CENTRAL_WEIGHT: weights[0]}
        # the cell's own config; the probe trains in a folder of its own, never this one
        cfg = spec.for_cell(central, point, spec.seeds[0],
                            spec.trial_dir(central, point, spec.seeds[0]))
        if cfg.grad_clip <= 0 or cfg.grad_clip_mode != "global" or cfg.adversarial.enabled:
            continue  # no clip, or one that cannot cut the weight away (or no probe of it)
        if cfg.distill is not None and central in cfg.distill.sources():
            say(f"note: {central} is distilled: its loss mixes soft targets, which a probe does "
                "not build; the first finished cell judges the grid", progress)
            continue
        say(f"[{spec.study}] {central}: probing the gradient norms of its first updates "
            f"(global clipping at {cfg.grad_clip:g})", progress)
        probe = _probe_apart(cfg)
        limit = probe.saturates_at if not isinstance(probe, str) else None
        if limit is None:
            why = probe if isinstance(probe, str) else "it saw no update of the task"
            if isinstance(probe, str) or not probe.central_updates:
                say(f"note: {central}: the clipping probe could not judge the grid ({why}); "
                    "the first finished cell judges it", progress)
            continue
        above = [w for w in weights if w > limit]
        if len(above) < 2:
            continue
        said = (f"{central}: in a probe of {probe.updates} updates "
                f"({probe.central_updates} of {central}, smallest gradient norm "
                f"{probe.smallest_norm:.3g}) "
                f"every central update would be clipped from weight about {limit:.2g} up "
                f"(global clipping at {cfg.grad_clip:g})")
        shown = ", ".join(f"{w:g}" for w in above)
        fix = clipping_fix(limit, cfg.grad_clip)
        if len(above) == len(weights):
            problems.append(f"{field}: {said}, so every weight of the {span} ({shown}) would "
                            f"train the same treatment; {fix}, {MEANS_IT}")
        else:
            say(f"note: {said}, so weights {shown} will likely train the same treatment; to "
                f"tell them apart, {fix}", progress)
    if problems:
        raise ConfigError(problems)


def _probe_apart(cfg: Any) -> Any:
    """`probe_clipping(cfg)` in a process of its own, so that the driver keeps no model, data
    or GPU context once it is done; a failure's one line (str) instead of the probe: the
    launch goes on, and the first finished cell judges the grid."""
    import multiprocessing

    from weightsearch.trainer.probe import probe_clipping

    pool = multiprocessing.get_context("spawn").Pool(1)
    try:
        return pool.apply(probe_clipping, (cfg,))
    except Exception as exc:  # any failure of a probe is a note, not a stop
        text = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
    finally:  # on Ctrl-C too, which must not wait for the probe
        pool.terminate()
        pool.join()


__all__ = ["MEANS_IT", "clipping_fix", "needs_probe", "refuse_clipped_grids",
           "settings_problems", "weights_of"]
