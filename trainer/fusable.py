"""Which runs can train as one fused unit (`weightsearch.trainer.fused`), without torch: the
sweep's driver checks the cells it would fuse before it hands them to a worker."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from weightsearch.core.errors import ConfigError

if TYPE_CHECKING:
    from weightsearch.trainer.config import RunConfig

# The settings in which the members of a fused unit may differ: the loss weighting, and what
# each member does on its own (evaluation, checkpoints, logs, fine-tuning afterwards).
MEMBER_SETTINGS = ("weighting", "output_dir", "tracking", "checkpoints", "keep_checkpoints",
                   "finetune", "eval_batch_size", "max_eval_examples", "eval_max_seq_len",
                   "stop_on_divergence", "cache_dir")
# Members that would train the same updates (`weightsearch.trainer.same_treatment`): trained
# once, the others following (the default), or all trained.
SAME_TREATMENT = ("once", "all")


class CannotFuse(ConfigError):
    """These runs cannot train as one fused unit; each problem says why. Train them one by one."""


def fusion_problems(configs: Sequence[RunConfig]) -> list[str]:
    """Why `configs` cannot train as one fused unit (empty: they can)."""
    if not configs:
        return ["no runs to fuse"]
    problems: list[str] = []
    first = _shared_settings(configs[0])
    for i, cfg in enumerate(configs[1:], start=1):
        differing = sorted(k for k, v in _shared_settings(cfg).items() if first.get(k) != v)
        differing += sorted(k for k in first if k not in _shared_settings(cfg))
        if differing:
            problems.append(f"run {i} differs from run 0 in {', '.join(differing)}: fused runs "
                            f"may differ only in {', '.join(MEMBER_SETTINGS)}")
    folders = [str(Path(c.output_dir).expanduser().resolve()) for c in configs]
    if len(set(folders)) < len(folders):
        problems.append("output_dir: two fused runs share a folder; give each its own")
    cfg = configs[0]
    if cfg.compile:
        problems.append("compile: a compiled encoder cannot be stacked; leave compile out to fuse")
    if cfg.adversarial.enabled:
        problems.append("adversarial: SMART's perturbed forward pass runs per model; train "
                        "SMART runs one by one")
    if cfg.recompute_activations:
        problems.append("recompute_activations: recomputed layers do not vectorise over "
                        "stacked models; leave it out to fuse")
    if cfg.idle_params == "step":
        problems.append("idle_params: step schedules each parameter on a clock of its own, "
                        "which the stacked optimizer does not keep; train such runs one by one")
    return problems


def _shared_settings(cfg: RunConfig) -> dict[str, Any]:
    return {k: v for k, v in cfg.to_dict().items() if k not in MEMBER_SETTINGS}


__all__ = ["MEMBER_SETTINGS", "SAME_TREATMENT", "CannotFuse", "fusion_problems"]
