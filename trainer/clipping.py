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

Each update's pre-clip norm and the factor the clip applied stay on the device; the loop
reads them with the losses every `log_every` updates (`trainer.loop`), and `clip_summary`
condenses the logged rows into what a study needs per task: the share of updates clipped, the
median unweighted norm and the largest weight at which the median update would not clip.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch-free at import: the import file's checks read GRAD_CLIP_MODES
    import torch

GRAD_CLIP_MODES = ("global", "unweighted")
DEFAULT_GRAD_CLIP_MODE = "global"
_EPS = 1e-6  # as torch.nn.utils.clip_grad_norm_ adds to the norm


def clip_gradient(parameters: Iterable[torch.nn.Parameter], grad_clip: float, mode: str,
                  weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Clip the gradients of `parameters` in place as `mode` says; the weighted gradient's
    pre-clip norm and the factor applied to it (1: not clipped), both still on the device."""
    import torch

    grads = [p.grad for p in parameters if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)
    if grad_clip <= 0:
        return norm, torch.ones_like(norm)
    limit = grad_clip * weight if mode == "unweighted" else grad_clip
    scale = (limit / (norm + _EPS)).clamp(max=1.0)
    torch._foreach_mul_(grads, scale)  # what clip_grads_with_norm_ does, with this scale
    return norm, scale


def grad_clip_problems(grad_clip: Any, mode: Any) -> list[str]:
    """The combinations of the two settings that cannot run (each setting alone is checked
    by its own field)."""
    if mode == "unweighted" and isinstance(grad_clip, int | float) and grad_clip == 0:
        return ["grad_clip_mode: unweighted clips each task's unweighted gradient to grad_clip, "
                "and grad_clip is 0 (no clipping); set grad_clip above 0, or leave "
                "grad_clip_mode out"]
    return []


def clip_summary(rows: Iterable[Mapping[str, Any]], grad_clip: float, mode: str
                 ) -> dict[str, dict[str, Any]]:
    """Per task, over the updates in `rows` (steps.jsonl rows; skipped batches left out):
    `updates`, `clipped`, `clip_share`, `median_norm` (of the unweighted gradient) and
    `acts_below`: the largest weight at which the median update would not be clipped, where
    the weight can be clipped away (global clipping); None where it cannot."""
    norms: dict[str, list[float]] = {}
    clipped: dict[str, int] = {}
    for row in rows:
        if row.get("skipped") or row.get("grad_norm_unweighted") is None:
            continue
        task = row["task"]
        norms.setdefault(task, []).append(float(row["grad_norm_unweighted"]))
        clipped[task] = clipped.get(task, 0) + bool(row.get("clipped"))
    out = {}
    for task, values in norms.items():
        median = statistics.median(values)
        acts = grad_clip / median if mode == "global" and grad_clip > 0 and median > 0 else None
        out[task] = {"updates": len(values), "clipped": clipped[task],
                     "clip_share": clipped[task] / len(values), "median_norm": median,
                     "acts_below": acts}
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


def reading_fields(weight: float, norm: float, scale: float) -> dict[str, Any]:
    """The steps.jsonl fields of one update's norm and clip factor."""
    if norm != norm:  # NaN: a skipped batch, nothing computed
        return {"grad_norm": None, "grad_norm_unweighted": None, "clip_scale": None,
                "clipped": None}
    return {"grad_norm": norm, "grad_norm_unweighted": norm / weight if weight else None,
            "clip_scale": scale, "clipped": scale < 1.0}


__all__ = ["DEFAULT_GRAD_CLIP_MODE", "GRAD_CLIP_MODES", "clip_gradient", "clip_summary",
           "grad_clip_problems", "reading_fields", "step_readings"]
