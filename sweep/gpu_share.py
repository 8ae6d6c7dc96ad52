"""`resources.gpu: auto`: a trial's share of a GPU from the GPU memory the study's trials
measured, so that as many trials train side by side on a card as fit in its memory.

An eager trial of a small encoder leaves most of a GPU idle (the host's Python and kernel
launches bound it), and such trials side by side each run at nearly the speed of one alone. A
trial whose steps replay as CUDA graphs keeps the card busier: on an H200 two of them filled it
and more only shared the same throughput (BENCHMARKS.md section 2), which the CPUs per trial
cap (below). How many fit is a matter of memory, which only a trial can measure: the trainer
reports the peak its caching allocator reserved and the card's size
(`trainer.memory.gpu_peaks`), and the driver stores both with the trial
(`studies.schema.GPU_MEASURES`). Until one trial of the study has measured, a trial asks for a
whole GPU, so the first one measures alone; after that, each new trial asks for the share the
largest measured peak needs (`gpu_fraction`). The
measurements are read from the study database, so every driver of a study sizes its trials
from every driver's trials.

A fused trial (`fuse_cells`) trains its cells in one process, and the peak it measures is that
process's, every cell's model included: the share it needs applies as it is, to the next fused
trial of the same size. A study whose fused units vary in size (the last unit of a grid short
of cells) is sized by its largest measured peak, which over-reserves for a smaller unit but
never starves a larger one once it has been measured. With `fuse_cells: auto` a unit is sized
to the card's free memory (`sweep/fuse_auto.py`), so its measured peak keeps it a whole GPU
unless the cells left to fuse made it small.

The CPUs per trial (`resources.cpu`) still cap how many trials run at once on a node: Ray
places a trial only where both its CPUs and its GPU share are free.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeGuard

from weightsearch.studies import schema as S

# CUDA's per-process context (the driver's state, the loaded kernels of torch and its
# libraries; about 500 MiB on an H100 with lazy module loading) and cuBLAS's workspaces sit
# outside PyTorch's caching allocator, so `max_memory_reserved` does not count them; every
# process on a card pays them once.
CUDA_CONTEXT_MIB = 600.0
# Room for what one measurement cannot see: another seed's or point's batches (the longest
# batch of a bucketed epoch), fragmentation that grows over a longer run.
SAFETY_MARGIN = 0.15
# Ray counts a resource in steps of 1/10,000 (MIN_RESOURCE_GRANULARITY): a share is rounded
# down to a step, so that k shares of 1/k never add up to more than one GPU in Ray's books.
_RAY_STEPS = 10_000
CACHE_S = 5.0  # the driver re-reads the study's measurements at most this often
GPU_SHARE = "gpu_share"  # key of a trial's config: the share of a GPU the driver gave it


def gpu_fraction(peaks_mib: Iterable[float], totals_mib: Iterable[float]) -> float:
    """The share of a GPU a trial asks for, from the peaks (MiB reserved by PyTorch's caching
    allocator) that earlier trials measured and the sizes of the cards they ran on: 1.0 before
    any measurement; else the largest peak plus CUDA_CONTEXT_MIB, plus SAFETY_MARGIN, over the
    smallest card's memory, rounded up to 1/k (k whole: k trials fit on the card exactly), at
    most 1. Values that are no measurement (not finite, not positive) are left out."""
    peaks = [p for p in peaks_mib if _measured(p)]
    totals = [t for t in totals_mib if _measured(t)]
    if not peaks or not totals:
        return 1.0
    need = (max(peaks) + CUDA_CONTEXT_MIB) * (1.0 + SAFETY_MARGIN)
    k = math.floor(min(totals) / need)  # the whole trials that fit on the smallest card
    if k <= 1:
        return 1.0
    return math.floor(_RAY_STEPS / k) / _RAY_STEPS


def _measured(value: Any) -> TypeGuard[float]:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


def measured(engine: Any, study: str) -> tuple[list[float], list[float]]:
    """The reserved peaks and card sizes (MiB) recorded by the finished trials of every
    central task of `study` (Optuna studies `<study>/<central>`), in one query."""
    from sqlalchemy import select

    from weightsearch.studies.bulk import optuna_tables

    t = optuna_tables()
    trials, attrs, studies = t["trials"], t["attrs"], t["studies"]
    query = (select(attrs.c.key, attrs.c.value_json)
             .join(trials, trials.c.trial_id == attrs.c.trial_id)
             .join(studies, studies.c.study_id == trials.c.study_id)
             .where(studies.c.study_name.startswith(study + S.SEPARATOR, autoescape=True),
                    trials.c.state.in_(("COMPLETE", "PRUNED", "FAIL")),
                    attrs.c.key.in_((S.T_PEAK_GPU_RESERVED, S.T_GPU_TOTAL))))
    found: dict[str, list[float]] = {S.T_PEAK_GPU_RESERVED: [], S.T_GPU_TOTAL: []}
    with engine.connect() as connection:
        for key, text in connection.execute(query):
            try:
                found[key].append(json.loads(text))
            except (TypeError, ValueError):  # another tool's value: no measurement
                continue
    return found[S.T_PEAK_GPU_RESERVED], found[S.T_GPU_TOTAL]


class GpuShares:
    """The share of a GPU the next trial of a study asks for (`gpu_fraction` of the study's
    measurements), read from its database at most every CACHE_S seconds and at once after
    `forget`. A database error never stops the driver: the share is then a whole GPU, said
    once through `tell`."""

    def __init__(self, engine: Any, study: str, tell: Callable[[str], None]) -> None:
        self.engine = engine
        self.study = study
        self.tell = tell
        self._read_at: float | None = None
        self._share = 1.0
        self._told = False

    def current(self) -> float:
        now = time.monotonic()
        if self._read_at is not None and now - self._read_at < CACHE_S:
            return self._share
        self._read_at = now
        try:
            self._share = gpu_fraction(*measured(self.engine, self.study))
        except Exception as exc:  # the driver goes on: a whole GPU is always safe
            self._share = 1.0
            if not self._told:
                self._told = True
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
                self.tell(f"note: resources.gpu: auto could not read the trials' GPU memory "
                          f"({first}); trials ask for a whole GPU until it can")
        return self._share

    def forget(self) -> None:
        """A trial ended: its measurement counts from the next trial on."""
        self._read_at = None

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its searcher, this gate's included (for its own restore, which the
        # sweep never uses): a database engine does not pickle.
        return {**self.__dict__, "engine": None, "tell": print}


class TrialResources:
    """Tune's per-trial resources (`tune.with_resources(trainable, TrialResources(cpu))`),
    called in the driver when a trial is created: `cpu` CPUs and the GPU share the driver
    wrote into the trial's config (`GPU_SHARE`; none: CPUs only). Tune pickles it with the
    trainable and unpickles a copy for each trial, so it holds plain values only."""

    def __init__(self, cpu: float) -> None:
        self.cpu = cpu

    def __call__(self, config: dict[str, Any]) -> dict[str, float]:
        return {"cpu": self.cpu, "gpu": float(config.get(GPU_SHARE) or 0.0)}


def measurements(summary: dict[str, Any]) -> dict[str, float]:
    """A finished run's GPU figures (`studies.schema.GPU_MEASURES`) from its summary (the
    trainer's RunResult as a dict): the most of its stages, since the multi-task stage and each
    fine-tuning run measure their own peaks in one process; empty for a run on the CPU."""
    stages = [summary, *(summary.get("finetuned") or {}).values()]
    out: dict[str, float] = {}
    for key in S.GPU_MEASURES:
        read = [s.get(key) for s in stages if isinstance(s, dict)]
        values = [float(v) for v in read if _measured(v)]
        if values:
            out[key] = min(values) if key == S.T_GPU_TOTAL else max(values)
    return out
