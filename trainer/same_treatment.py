"""Members of a fused unit that train the same updates, trained once.

Under global clipping a loss weight stops acting once weight x gradient norm exceeds the clip:
the applied gradient is then g/||g|| x clip whatever the weight. Two members that start alike
and, update by update, either apply the same weight or are both clipped, hold the same
parameters throughout (up to the clip's epsilon: each step differs by at most 1e-6 / grad_clip
of itself): one treatment. Training them all computes the same updates K times.

The first epoch a unit trains measures it: every member trains, and at the epoch's end the
members whose logged updates were pairwise the same treatment, and whose parameters and
optimizer states agree, form a group (`same_groups`). The member with the smallest weights
trains on for the group; the others follow it (`Follower`): each update they log the record
their own weight gives, with the readings derived from their representative's (the unweighted
loss is the same, the weighted norm scales with the weight, the clip factor follows from it),
step their own schedule, and at each epoch's end, once every update of the epoch is checked to
be the same treatment (`same_epoch`), take a copy of the representative's state and end the
epoch as their own run would (evaluation, checkpoint, report). A follower whose check fails, or
whose representative stops before it, is released: it trains on from its own last checkpoint,
which holds the state both had at that epoch's start.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from weightsearch.trainer.clipping import clip_factor
from weightsearch.trainer.stage import StageRun
from weightsearch.trainer.weighting import Scheme

_STATE_RTOL, _STATE_ATOL = 1e-3, 1e-5  # parameters and optimizer states that agree


def can_follow(run: StageRun) -> bool:
    """Whether a member of this run's kind can follow another: its update is its batch loss x
    weight (no learned weighting, no SMART term), so weight and clip say all."""
    scheme = run.scheme
    return (type(scheme).weighted_loss is Scheme.weighted_loss and not scheme.state_dict()
            and not run.cfg.adversarial.enabled)


def same_update(a: Mapping[str, Any], b: Mapping[str, Any], global_clip: bool) -> bool:
    """Whether two members alike before this update are alike after it, from their logged rows
    of it: both skipped, or both stepped with the same weight, or, under global clipping, both
    clipped (which applies g/||g|| x clip whatever the weight)."""
    if a["skipped"] or b["skipped"]:
        return bool(a["skipped"] and b["skipped"])
    if a["weight"] == b["weight"]:
        return True
    return global_clip and _clipped(a) and _clipped(b)


def _clipped(row: Mapping[str, Any]) -> bool:
    scale = row.get("clip_scale")
    return scale is not None and math.isfinite(scale) and scale < 1.0


def same_groups(runs: Sequence[StageRun], rows: Sequence[Sequence[Mapping[str, Any]]],
                global_clip: bool) -> list[list[int]]:
    """Groups (indices into `runs`, representative first) of members that trained the same
    updates in `rows` (each member's logged rows of the epoch) and hold the same state; members
    alone are left out. The representative has the smallest weights: while it is clipped, every
    larger weight is too."""
    order = sorted(range(len(runs)), key=lambda k: sum(r["weight"] for r in rows[k]))
    grouped: set[int] = set()
    groups = []
    for i, rep in enumerate(order):
        if rep in grouped or not can_follow(runs[rep]):
            continue
        group = [rep]
        for other in order[i + 1:]:
            if other in grouped or not can_follow(runs[other]):
                continue
            if same_epoch(rows[rep], rows[other], global_clip) and \
                    same_state(runs[rep], runs[other]):
                group.append(other)
        if len(group) > 1:
            grouped.update(group)
            groups.append(group)
    return groups


def same_state(a: StageRun, b: StageRun) -> bool:
    """Whether two members' parameters and optimizer states agree (up to the clip's epsilon
    over an epoch of updates)."""
    for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
        if not torch.allclose(p, q, rtol=_STATE_RTOL, atol=_STATE_ATOL):
            return False
    for sa, sb in zip(a.optimizer.state_dict()["state"].values(),
                      b.optimizer.state_dict()["state"].values(), strict=True):
        for key, value in sa.items():
            other = sb.get(key)
            if isinstance(value, torch.Tensor) and value.is_floating_point() and (
                    not isinstance(other, torch.Tensor) or not torch.allclose(
                        value.float(), other.float(), rtol=_STATE_RTOL, atol=_STATE_ATOL)):
                return False
    return True


def set_weights(scheme: Scheme) -> dict[str, float] | None:
    """The weights a study set for a scheme (SIWLM's initial weights, in either variant), which
    name a follower's representative; None for schemes without."""
    initial = getattr(scheme, "initial", None)
    return {task: float(w) for task, w in initial.items()} if isinstance(initial, dict) else None


def follower_readings(readings: torch.Tensor, rep_weight: float, weight: float,
                      skipped: bool, grad_clip: float, mode: str) -> torch.Tensor:
    """A follower's readings of an update its representative took: the same unweighted loss,
    the weighted norm scaled by the ratio of their weights, and the clip factor that norm gets
    (`weightsearch.trainer.clipping.clip_gradient`), all on the device."""
    if skipped:
        nan = torch.full_like(readings[0], float("nan"))
        return torch.stack([readings[0], nan, nan])
    norm = readings[1] * (weight / rep_weight) if rep_weight else readings[1]
    return torch.stack([readings[0], norm, clip_factor(norm, grad_clip, mode, weight)])


def same_epoch(rep_rows: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]],
               global_clip: bool) -> bool:
    """Whether two members' epochs (their logged rows; a follower's derived from its
    representative's) were the same treatment, update by update."""
    return len(rep_rows) == len(rows) and all(
        same_update(a, b, global_clip) for a, b in zip(rep_rows, rows, strict=True))


def take_state(rep: StageRun, follower: StageRun) -> None:
    """Give the follower its representative's parameters, buffers, optimizer state and
    scheme state; its schedule stepped along with the representative's."""
    with torch.no_grad():
        for mine, theirs in zip(follower.model.parameters(), rep.model.parameters(), strict=True):
            mine.copy_(theirs)
        for buffer, source in zip(follower.model.buffers(), rep.model.buffers(), strict=True):
            buffer.copy_(source)
    follower.optimizer.load_state_dict(_copied(rep.optimizer.state_dict()))
    follower.scheme.load_state_dict(copy.deepcopy(rep.scheme.state_dict()))


def _copied(state_dict: dict[str, Any]) -> dict[str, Any]:
    """An optimizer's state_dict with tensors of its own: Optimizer.load_state_dict keeps the
    tensors it is given where dtype and device fit, and a follower's state must not move when
    its representative steps; a clone of a stacked state's slice copies the slice alone."""
    return {"state": {index: {key: value.clone() if isinstance(value, torch.Tensor)
                              else copy.deepcopy(value) for key, value in entry.items()}
                      for index, entry in state_dict["state"].items()},
            "param_groups": copy.deepcopy(state_dict["param_groups"])}


def detach_parameters(model: torch.nn.Module) -> None:
    """Give a model that leaves a stacked model parameters of its own (they were views of the
    stacked tensors, which a stack rebuilt without it lets go)."""
    with torch.no_grad():
        for p in model.parameters():
            p.data = p.data.clone()


__all__ = ["can_follow", "detach_parameters", "follower_readings",
           "same_epoch", "same_groups", "same_state", "same_update", "set_weights",
           "take_state"]
