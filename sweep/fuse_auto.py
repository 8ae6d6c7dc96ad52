"""`fuse_cells: auto`: how many cells one fused trial trains, from the memory one member takes
on the card the trials run on (`weightsearch.trainer.fuse_size`).

Where K is chosen: in the driver, before it hands out a unit's partners. The driver hands out
units (`unit_handout.take_unit`/`take_partners`) and creates each member's Optuna trial and
claim; a worker that trained fewer members than it was handed would leave claimed cells to
train one after another in the same trial, holding one GPU while others idle. So the driver
asks once per memory key (encoder, longest sequence, batch size, precision;
`fuse_size.memory_key`) by a Ray task with a trial's resources: it runs where a trial would,
on the device a trial would get, and measures there (a fused step of one and of two members)
unless the study already holds a measurement for that card. Until the answer comes, the unit is
put back unclaimed and the searcher asks Tune to call again (it never blocks Tune's loop, whose
running trials must go on reporting); the K decided is kept with the central task's plan for
the rest of the launch.

Measurements are stored in each central task's Optuna study as user attributes, one per memory
key and card (`fuse_memory/<digest>`), so every driver of a study, on any machine, reuses them
and two drivers never overwrite each other's; the decision, not the measurement, stays in
memory. On CPUs nothing is measured and K is 1 (`fuse_size` says why).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from weightsearch.sweep.driver_state import CentralPlan
from weightsearch.sweep.spec import StudySpec
from weightsearch.sweep.study_file import AUTO_GPU, MAX_FUSED
from weightsearch.trainer.fuse_size import CPU, fused_size, memory_key

if TYPE_CHECKING:
    from weightsearch.trainer.fuse_size import FuseMemory

FUSE_MEMORY = "fuse_memory"  # prefix of the study attributes that hold measurements


def memory_attr(key: str, device: str) -> str:
    """The study attribute of one measurement (a digest: a key holds paths of any length)."""
    return f"{FUSE_MEMORY}/{hashlib.sha256(f'{key}|{device}'.encode()).hexdigest()[:20]}"


def stored(studies: Sequence[Any], key: str) -> dict[str, dict[str, Any]]:
    """The measurements of `key` that `studies` (Optuna studies) hold, by card name."""
    found: dict[str, dict[str, Any]] = {}
    for study in studies:
        for attr, value in study.user_attrs.items():
            if attr.startswith(FUSE_MEMORY + "/") and isinstance(value, dict) \
                    and value.get("key") == key and isinstance(value.get("device"), str):
                found[value["device"]] = value
    return found


def remember(study: Any, key: str, memory: FuseMemory) -> None:
    """Store a card's measurement of `key` in `study` (an Optuna study), unless it holds it."""
    attr, value = memory_attr(key, memory.device), {"key": key, **memory.to_plain()}
    if study.user_attrs.get(attr) != value:
        study.set_user_attr(attr, value)


def probe(cfg: Any, known: dict[str, dict[str, Any]]) -> FuseMemory:
    """The Ray task: the measurement for `cfg` on this worker's device."""
    from weightsearch.trainer.fuse_size import fuse_memory

    return fuse_memory(cfg, known)


class FuseSizer:
    """K for each fused unit of a study with `fuse_cells: auto` (module docstring): `size`
    answers at once when the plan's key is decided, else starts or polls the key's probe."""

    def __init__(self, spec: StudySpec, plans: Sequence[CentralPlan],
                 tell: Callable[[str], None]) -> None:
        gpu = spec.resources.gpu
        # What a trial may use of its card (it trains on one device), and what its probe asks.
        self.share = 1.0 if gpu == AUTO_GPU else min(1.0, float(gpu))
        self.cpus = spec.resources.cpu
        self.plans = plans
        self.tell = tell
        self._pending: dict[str, Any] = {}  # memory key -> the probe's Ray ObjectRef
        self._waiting: dict[str, str] = {}  # memory key -> the plan (study name) it holds up

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles the searcher that holds this (it never restores it): no Ray references.
        return {**self.__dict__, "_pending": {}, "_waiting": {}, "plans": [], "tell": print}

    def waiting(self, plan: CentralPlan) -> bool:
        """Whether `plan` waits for a probe that has not answered (its units stay unclaimed,
        and unread, meanwhile)."""
        refs = [self._pending[k] for k, name in self._waiting.items() if name == plan.name]
        if not refs:
            return False
        import ray

        return not ray.wait(refs, num_returns=1, timeout=0)[0]

    def size(self, plan: CentralPlan, cfg: Any) -> int | None:
        """K for a unit of `plan` whose first cell's RunConfig is `cfg`; None while its probe
        runs (ask again later)."""
        key = memory_key(cfg)
        decided = next((p.fuse_sizes[key] for p in self.plans if key in p.fuse_sizes), None)
        if decided is not None:
            plan.fuse_sizes[key] = decided
            return decided
        import ray

        ref = self._pending.get(key)
        if ref is None:
            # max_calls=1: the worker exits after it, keeping none of the card's memory
            task = ray.remote(num_cpus=self.cpus, num_gpus=self.share, max_calls=1)(probe)
            self._pending[key] = task.remote(cfg, stored([p.study for p in self.plans], key))
            self._waiting[key] = plan.name
            return None
        if not ray.wait([ref], timeout=0)[0]:
            return None
        del self._pending[key], self._waiting[key]
        try:
            memory = ray.get(ref)
        except Exception as exc:  # the study goes on, one cell per trial, and says why
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]
            self.tell(f"note: fuse_cells: auto could not measure a fused member ({first}); "
                      "one cell per trial")
            plan.fuse_sizes[key] = 1
            return 1
        plan.fuse_sizes[key] = k = fused_size(memory, self.share, MAX_FUSED)
        if memory.device == CPU:
            self.tell("note: fuse_cells: auto trains one cell per trial on CPUs (a fused step "
                      "there costs what its cells' steps cost one by one)")
            return k
        remember(plan.study, key, memory)
        self.tell(f"note: fuse_cells: auto: {k} cells per trial on {memory.device} "
                  f"({memory.per_member_mib:,.0f} MiB a member, {memory.free_mib:,.0f} MiB "
                  f"free, {cfg.encoder} at batch {cfg.batch_size} x {cfg.max_seq_len})")
        return k
