"""Gradient clipping, and whether it leaves the loss weight any say.

Every update trains one task's batch as loss x weight, then clips the gradient. How:

- `global` (the default, and what the MT-DNN and SIWLM reference code does with
  `global_grad_clipping`): clip the weighted gradient g_w = weight x g to norm `grad_clip`.
  Once weight x ||g|| exceeds `grad_clip`, the applied gradient is g/||g|| x grad_clip whatever
  the weight: the weight acts only below grad_clip / ||g||.
- `unweighted`: clip the task's unweighted gradient g to `grad_clip`, then scale it by the
  weight, so that the weight scales the step at any norm. Clipping g to c and multiplying by w
  is clipping g_w to c x w, which is how it is computed (one gradient, one norm).
- `grad_clip: 0`: no clipping in either mode (`unweighted` then is refused: nothing to clip).

Each update's pre-clip norm and the factor the clip applied stay on the device; the step log
reads them with the losses every `log_every` updates
(`weightsearch.trainer.stage_output.EpochLog`), and `clip_summary` condenses the logged rows
into what a study needs per task: the share of updates clipped, the median unweighted norm and
the largest weight at which the median update would not clip.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch-free at import: the import file's checks read GRAD_CLIP_MODES
    import torch

GRAD_CLIP_MODES = ("global", "unweighted")
# The run config's defaults (the reference scripts' global_grad_clipping=1): every layer above
# the trainer reads them from here.
DEFAULT_GRAD_CLIP = 1.0
DEFAULT_GRAD_CLIP_MODE = "global"
_EPS = 1e-6  # as torch.nn.utils.clip_grad_norm_ adds to the norm


def clip_gradient(parameters: Iterable[torch.nn.Parameter], grad_clip: float, mode: str,
                  weight: float | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Clip the gradients of `parameters` in place as `mode` says; the weighted gradient's
    pre-clip norm and the factor applied to it (1: not clipped), both still on the device.
    `weight` is a 0-dim tensor on the device where a CUDA graph replays the update."""
    import torch

    grads = [p.grad for p in parameters if p.grad is not None]
    # The 2-norm of all gradients, as clip_grad_norm_ computes it (on torch before 2.6 too,
    # which lacks get_total_norm).
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    scale = clip_factor(norm, grad_clip, mode, weight)
    if grad_clip > 0:
        torch._foreach_mul_(grads, scale)  # what clip_grads_with_norm_ does, with this scale
    return norm, scale


def clip_factor(norm: torch.Tensor, grad_clip: float, mode: str,
                weight: float | torch.Tensor) -> torch.Tensor:
    """The factor `mode` clips a weighted gradient of norm `norm` by (1: not clipped);
    elementwise, so that a fused unit's stacked step clips all its members at once
    (`weightsearch.trainer.stacked_optim`, `norm` and `weight` one entry per member)."""
    import torch

    if grad_clip <= 0:
        return torch.ones_like(norm)
    if mode == "unweighted":  # the unweighted gradient g = g_w / weight, clipped to grad_clip
        return (grad_clip / (norm / weight + _EPS)).clamp(max=1.0)
    return (grad_clip / (norm + _EPS)).clamp(max=1.0)


def grad_clip_problems(grad_clip: Any, mode: Any, adversarial: bool = False) -> list[str]:
    """The combinations of the settings that cannot run (each setting alone is checked by its
    own field)."""
    if mode != "unweighted":
        return []
    if isinstance(grad_clip, int | float) and grad_clip == 0:
        return ["grad_clip_mode: unweighted clips each task's unweighted gradient to grad_clip, "
                "and grad_clip is 0 (no clipping); set grad_clip above 0, or leave "
                "grad_clip_mode out"]
    if adversarial:  # SMART's term is added unweighted: the update has no unweighted gradient
        return ["grad_clip_mode: unweighted needs the update's gradient to be its task's times "
                "the weight, and SMART adds its term unweighted; leave grad_clip_mode out "
                "with adversarial.enabled, or switch SMART off"]
    return []


def clip_summary(rows: Iterable[Mapping[str, Any]], grad_clip: float, mode: str,
                 nominal: Mapping[str, float] | None = None) -> dict[str, dict[str, Any]]:
    """Per task, over the updates in `rows` (steps.jsonl rows; skipped batches left out):

    - `updates`, `clipped`, `clip_share`: over the updates that logged their clipping;
      `unrecorded`: updates that did not (rows of a run begun before norms were logged; a
      record with any is incomplete);
    - `median_norm`: of the unweighted gradient (None where the update's gradient is not its
      task's times the weight: SMART on, `nominal` None for it);
    - `acts_below`: the value of the task's `nominal` weight (the setting a study varies:
      SIWLM's central or auxiliary weight, which the weight of each update scales) above which
      its median update is clipped: per update grad_clip x nominal / its weighted norm. Where
      the task has no nominal weight, in the weight the update applied. None where the weight
      cannot be clipped away (no clipping, or `unweighted`). A median of a mix: SIWLM's
      in-focus updates apply the weight, its off-focus ones a tenth of it, so the median
      describes neither group;
    - `saturates_in_focus`, `saturates_off_focus`: the value of the nominal weight above which
      every update of that group is clipped (the largest of its updates' limits above), so
      that from there up the weight no longer changes that group's steps. In focus: the
      updates that applied the full nominal weight; off focus: those that applied less (SIWLM's
      off-focus factor). None where the group had no update or the weight cannot be clipped
      away; `saturates_at`, the larger of the two: the weight above which every update of the
      task is clipped, and two weights above it train the same steps (in exact arithmetic);
    - `applied_norm`: the mean norm of the task's updates as applied (after the clip): with
      the other tasks' it gives the run's effective treatment, the ratio of their steps.
    """
    limits: dict[str, list[float]] = {}
    groups: dict[str, dict[bool, list[float]]] = {}  # task -> in focus? -> limits
    applied: dict[str, list[float]] = {}
    norms: dict[str, list[float]] = {}
    counts: dict[str, list[int]] = {}
    for row in rows:
        if row.get("skipped"):
            continue
        task = row["task"]
        count = counts.setdefault(task, [0, 0, 0])  # updates, clipped, unrecorded
        if row.get("clipped") is None:
            count[2] += 1
            continue
        count[0] += 1
        count[1] += bool(row["clipped"])
        norm = row.get("grad_norm")
        if norm is not None and math.isfinite(norm) and norm > 0:
            scale = (nominal or {}).get(task, row["weight"])
            limit = grad_clip * scale / norm
            limits.setdefault(task, []).append(limit)
            in_focus = row["weight"] >= scale * (1 - 1e-9)
            groups.setdefault(task, {}).setdefault(in_focus, []).append(limit)
            factor = row.get("clip_scale")
            if factor is not None and math.isfinite(factor):
                applied.setdefault(task, []).append(norm * min(float(factor), 1.0))
        if row.get("grad_norm_unweighted") is not None:
            norms.setdefault(task, []).append(float(row["grad_norm_unweighted"]))
    out = {}
    acting = mode == "global" and grad_clip > 0
    for task, (updates, clipped, unrecorded) in counts.items():
        mine = groups.get(task, {})
        focus, off = (max(mine[g]) if acting and mine.get(g) else None for g in (True, False))
        out[task] = {
            "updates": updates, "clipped": clipped,
            "clip_share": clipped / updates if updates else None,
            "median_norm": statistics.median(norms[task]) if task in norms else None,
            "acts_below": statistics.median(limits[task]) if acting and task in limits
            else None,
            "saturates_in_focus": focus, "saturates_off_focus": off,
            "saturates_at": max(v for v in (focus, off) if v is not None)
            if focus is not None or off is not None else None,
            "applied_norm": statistics.fmean(applied[task]) if task in applied else None,
            **({"unrecorded": unrecorded} if unrecorded else {}),
        }
    return out


def step_readings(norm: torch.Tensor | None, scale: torch.Tensor | None, loss: torch.Tensor
                  ) -> torch.Tensor:
    """One update's loss, pre-clip norm and clip factor as one device vector (NaN norm and
    factor for a skipped batch), so a flush reads every update in one transfer."""
    import torch

    loss = loss.detach().float().reshape(())
    if norm is None or scale is None:
        nan = torch.full((), float("nan"), device=loss.device)
        return torch.stack([loss, nan, nan])
    return torch.stack([loss, norm.float().reshape(()), scale.float().reshape(())])


def reading_fields(record: Mapping[str, Any], norm: float, scale: float,
                   weighted_task_gradient: bool = True) -> dict[str, Any]:
    """The steps.jsonl fields of one update's norm and clip factor (None for a skipped batch,
    nothing computed). `grad_norm_unweighted` needs the update's gradient to be its task's
    times the weight (not with SMART's unweighted term); a non-finite norm is logged as such
    and counts as clipped (torch scales such gradients by a non-finite factor)."""
    if record["skipped"]:
        return {"grad_norm": None, "grad_norm_unweighted": None, "clip_scale": None,
                "clipped": None}
    weight = record["weight"]
    return {"grad_norm": norm,
            "grad_norm_unweighted": norm / weight if weighted_task_gradient else None,
            "clip_scale": scale, "clipped": scale < 1.0 or not math.isfinite(scale)}


__all__ = ["DEFAULT_GRAD_CLIP_MODE", "GRAD_CLIP_MODES", "clip_factor", "clip_gradient",
           "clip_summary", "grad_clip_problems", "reading_fields", "step_readings"]
