"""How many runs one fused unit (`weightsearch.trainer.fused`) fits on a device: a study's
`fuse_cells: auto`.

What a fused member costs in device memory depends on the encoder, the longest batch, the
precision and the card, and only a step on that card shows it. `measure_fuse_memory` builds the
stacked model of one member, then of two, on the run's device, and takes one fused step
(forward, backward, each member's clip and optimizer step) on the first epoch's batch of the
most tokens, reading CUDA's peak allocation after each: the second member's cost is the
difference, and what is left of the first is the unit's fixed part. `fused_size` turns those
numbers into K, as a pure function of them.

On a CPU nothing is measured and K is 1: a fused step there costs what its members' steps cost
one by one (1.004x CPU time per cell, BENCHMARKS.md section 18) and set-up is not shared, so
fusing saves no work, while K cells in one trial take the CPUs of one trial instead of K.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from weightsearch.trainer.config import RunConfig

if TYPE_CHECKING:  # the sizing is pure: a study's driver reads it without loading torch
    import numpy as np
    import torch

# Room for what one step cannot show: fragmentation of the caching allocator over a long run,
# cuBLAS's workspaces (outside the allocator), an evaluation's batches.
SAFETY_MARGIN = 0.15
CPU = "cpu"  # the device name of a measurement on a CPU (it holds no numbers)


@dataclasses.dataclass(frozen=True)
class FuseMemory:
    """What a probe found on one device: its name, the memory free there before the probe
    allocated and the card's size, and the peak allocated by a fused step of one and of two
    members (MiB). A CPU's has its name only."""

    device: str
    free_mib: float | None = None
    total_mib: float | None = None
    one_mib: float | None = None
    two_mib: float | None = None

    @property
    def per_member_mib(self) -> float | None:
        if self.one_mib is None or self.two_mib is None:
            return None
        return self.two_mib - self.one_mib

    def to_plain(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_plain(cls, raw: Any) -> FuseMemory | None:
        """A stored measurement, or None for a value that is not one (another tool's)."""
        if not isinstance(raw, Mapping) or not isinstance(raw.get("device"), str):
            return None
        numbers = {}
        for f in dataclasses.fields(cls)[1:]:
            value = raw.get(f.name)
            if value is not None and (isinstance(value, bool) or
                                      not isinstance(value, int | float)):
                return None
            numbers[f.name] = None if value is None else float(value)
        return cls(device=raw["device"], **numbers)


def fused_size(memory: FuseMemory, share: float, cap: int) -> int:
    """K, the members one fused unit trains on `memory`'s device: the memory the trial may use
    (what was free, at most `share` of the card), less SAFETY_MARGIN, less the unit's fixed
    part, over one member's cost; at least 1 and at most `cap`. 1 on a CPU and for numbers
    that measure nothing (a second member that cost nothing)."""
    per = memory.per_member_mib
    if per is None or per <= 0 or memory.free_mib is None or memory.total_mib is None \
            or memory.one_mib is None:
        return 1
    base = max(0.0, memory.one_mib - per)
    budget = min(memory.free_mib, memory.total_mib * max(0.0, min(1.0, share)))
    fits = math.floor((budget * (1.0 - SAFETY_MARGIN) - base) / per)
    return max(1, min(cap, fits))


def memory_key(cfg: RunConfig) -> str:
    """What a measurement depends on besides the card: the encoder, the longest sequence,
    the batch size and the precision (one key per combination; the card's name is added by
    whoever stores it)."""
    return f"{cfg.encoder}|{cfg.max_seq_len}|{cfg.batch_size}|{cfg.precision}"


def fuse_memory(cfg: RunConfig, known: Mapping[str, Any]) -> FuseMemory:
    """The measurement for `cfg` on the device its run would train on: a CPU's (nothing to
    measure), the one `known` holds for this card's name (measurements stored by device name),
    or a new one (`measure_fuse_memory`)."""
    import torch

    from weightsearch.trainer.device import select_runtime

    runtime = select_runtime(cfg.device, cfg.precision, cfg.num_threads)
    if runtime.device.type != "cuda":
        return FuseMemory(device=CPU)
    stored = FuseMemory.from_plain(known.get(torch.cuda.get_device_name(runtime.device)))
    return stored if stored is not None else measure_fuse_memory(cfg)


def measure_fuse_memory(cfg: RunConfig) -> FuseMemory:
    """Measure `cfg`'s fused members on its device (module docstring), in a scratch folder;
    nothing of the run's own folder is touched. On a CPU only the device is recorded."""
    import torch

    from weightsearch.trainer.device import select_runtime

    runtime = select_runtime(cfg.device, cfg.precision, cfg.num_threads)
    device = runtime.device
    cuda = device.type == "cuda"
    with tempfile.TemporaryDirectory(prefix="fuse-probe-") as scratch:
        probe = dataclasses.replace(cfg, output_dir=scratch, checkpoints="none", finetune=None)
        if not cuda:
            for members in (1, 2):  # the same steps, so a CPU runs the code a GPU measures
                _fused_step_peak(probe, members, device)
            return FuseMemory(device=CPU)
        with torch.cuda.device(device):
            torch.cuda.init()
            free, total = torch.cuda.mem_get_info()
            one = _fused_step_peak(probe, 1, device)
            two = _fused_step_peak(probe, 2, device)
            return FuseMemory(device=torch.cuda.get_device_name(device), free_mib=free / 2**20,
                              total_mib=total / 2**20, one_mib=one, two_mib=two)


def _fused_step_peak(cfg: RunConfig, members: int, device: torch.device) -> float | None:
    """The peak device memory (MiB above what was allocated before) of setting up `members`
    runs of `cfg` stacked and taking one fused step on the longest batch; None on a CPU."""
    import torch

    from weightsearch.trainer.fused import NO_GRAPHS, StackedModels
    from weightsearch.trainer.loop import set_up
    from weightsearch.trainer.step import clip_and_step, step_batch, task_loss, weighted_total

    cuda = device.type == "cuda"
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device) if cuda else 0
    runs = [set_up(cfg, graphs=NO_GRAPHS) for _ in range(members)]
    stack = StackedModels([run.model for run in runs])
    lead = runs[0]
    task, indices = longest_batch(lead.plans[1], lead.data)
    batch = step_batch(lead, task, indices)
    for run in runs:
        run.model.train()
    stack.lead.train()
    with lead.runtime.autocast():
        outputs = stack.forward(task, batch)
    losses = [task_loss(run, task, outputs[k], batch) for k, run in enumerate(runs)]
    total = sum(weighted_total(run, task, batch, outputs[k], losses[k], 1.0)
                for k, run in enumerate(runs))
    with lead.runtime.backward():
        total.backward()  # type: ignore[union-attr]
    stack.share_gradients(range(members))
    for run in runs:
        clip_and_step(run, 1.0)
    peak = (torch.cuda.max_memory_allocated(device) - before) / 2**20 if cuda else None
    del runs, stack, lead, batch, outputs, losses, total
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return peak


def longest_batch(plan: list[tuple[str, np.ndarray]], data: Mapping[str, Any]
                  ) -> tuple[str, np.ndarray]:
    """The batch of `plan` with the most tokens (rows x its longest row), the one whose
    activations a step holds the most of."""
    import numpy as np

    lengths = {name: np.asarray(task.train.with_format("arrow")["length"].to_numpy())
               for name, task in data.items()}

    def tokens(entry: tuple[str, np.ndarray]) -> int:
        name, indices = entry
        return len(indices) * int(lengths[name][indices].max(initial=0))

    return max(plan, key=tokens)


__all__ = ["CPU", "SAFETY_MARGIN", "FuseMemory", "fuse_memory", "fused_size", "longest_batch",
           "measure_fuse_memory", "memory_key"]
