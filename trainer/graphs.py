"""CUDA graphs: each (task, batch shape)'s whole training step captured once and replayed.

A training step of a small encoder launches a few thousand kernels; on a GPU their launch
costs (Python, the dispatcher, the driver) take longer than the kernels, so a trial leaves the
GPU mostly idle. Replaying a captured graph launches them all at once. What that needs:

- static shapes: batches padded to a few fixed widths (`pad_to: buckets`), one graph per task
  and batch shape (the shape includes an epoch's short last batch);
- every input in fixed memory: the batch is copied into the graph's own tensors, the loss
  weight into a device scalar; the learning rate is a device scalar the schedule fills
  (`optim.make_capturable`), and the optimizer keeps its step counts on the device;
- no host read inside the step: the clip's norm and factor and the loss stay on the device
  (as in the eager loop, `weightsearch.trainer.clipping`), and the readings are copied out of
  the graph after each replay;
- gradients made by the step itself: before the backward the graph's step sets every
  parameter's gradient to None, so the backward allocates (in the graph's memory pool) just
  the gradients of the parameters the task trains (the encoder, its head), with no zeroing
  and no accumulating add, and the optimizer skips the other tasks' heads as an eager step
  does. The gradients are spent within the replay: the next graph may reuse their memory;
- dropout: the default CUDA generator advances on every replay, so each step draws new masks.

Before a shape is captured its first `warmup` steps run eagerly (they are real steps of the
run), on the stream the capture uses, which initialises what a capture cannot (cuBLAS
workspaces, the optimizer's state). What cannot be captured runs eagerly, with a note:
SMART (its ascent reads the device), `recompute_activations` (its recomputation reads the RNG
state on the host) and a weighting scheme that says it is not capturable keep
the whole run eager; distilled tasks (soft targets gathered per batch) and task types whose
head says its loss reads the host (`Head.capturable`; none of the built-in ones) train
eagerly. A capture that fails anyway
turns the graphs off for the rest of the run (a failed capture leaves CUDA's capture state
behind, so none is tried again).

`compile: true` inside the captured step: the warm-up steps compile the encoder, the capture
records the compiled kernels. It is checked on the CPU (the step without capture) but not yet
on a GPU, so a compiled run stays eager unless `COMPILE_IN_GRAPHS` is set (once the `gpu` tests
of tests/trainer/test_compiled_graphs.py pass) or the environment opts in
(`WEIGHTSEARCH_COMPILE_IN_GRAPHS=1`: those tests and the benchmarks).

`capture=False` runs the very same step on the same fixed tensors without capturing it: the
CPU's check of everything but the capture itself (tests).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from weightsearch.core.errors import ConfigError

if TYPE_CHECKING:
    from weightsearch.trainer.config import RunConfig
    from weightsearch.trainer.device import Runtime

WARMUP_STEPS = 2  # eager steps of a shape before its capture (lazy initialisation)
# compile: true inside the graphs, for everyone: set True once its gpu tests pass on a GPU.
COMPILE_IN_GRAPHS = False
COMPILE_IN_GRAPHS_ENV = "WEIGHTSEARCH_COMPILE_IN_GRAPHS"  # "1": opt in before that
Key = tuple[str, tuple[tuple[str, tuple[int, ...], torch.dtype], ...]]
# (task, batch, weight) -> the step's readings: forward, weighted backward, clip and optimizer
# step into the gradients the parameters hold (`weightsearch.trainer.step.update`).
Update = Callable[[str, dict[str, torch.Tensor], torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class GraphPlan:
    """Whether a stage's steps are captured, and why not where they are not."""

    enabled: bool
    capture: bool = True  # False: the graph step runs without capture (the CPU's check)
    why_not: str | None = None


def static_shapes(cfg: RunConfig, runtime: Runtime) -> bool:
    """Whether batches are padded to fixed widths (`pad_to`)."""
    return cfg.pad_to == "buckets" or (cfg.pad_to == "auto" and runtime.device.type == "cuda")


def plan_graphs(cfg: RunConfig, runtime: Runtime, scheme: Any = None) -> GraphPlan:
    """`cuda_graphs` resolved for this run (with its weighting `scheme`): on where the device
    and the settings allow; `on` where they do not is refused."""
    if cfg.cuda_graphs == "off":
        return GraphPlan(False, why_not="cuda_graphs: off")
    why_not = _why_not(cfg, runtime, scheme)
    if why_not is None:
        return GraphPlan(True)
    if cfg.cuda_graphs == "on":
        raise ConfigError([f"cuda_graphs: on, but {why_not}; use cuda_graphs: auto (eager "
                           "where graphs cannot run) or change that setting"])
    return GraphPlan(False, why_not=why_not)


def _why_not(cfg: RunConfig, runtime: Runtime, scheme: Any) -> str | None:
    if runtime.device.type != "cuda":
        return f"the run trains on {runtime.device.type}, and CUDA graphs need a CUDA GPU"
    if not static_shapes(cfg, runtime):
        return "pad_to: longest gives every batch its own shape; use pad_to: buckets"
    if cfg.adversarial.enabled:
        return "SMART (adversarial.enabled) reads the device inside each step"
    if cfg.compile and not compile_in_graphs():
        return ("compile: true inside CUDA graphs is not yet tested on a GPU (to try it, set "
                f"{COMPILE_IN_GRAPHS_ENV}=1)")
    if cfg.recompute_activations:
        return "recompute_activations reads the random state on the host"
    if cfg.idle_params == "step":
        return "idle_params: step schedules each parameter on a clock of its own, on the host"
    if not getattr(scheme, "capturable", True):
        return f"the weighting scheme {cfg.weighting.scheme!r} is not capturable"
    return None


def compile_in_graphs() -> bool:
    """Whether a compiled encoder's steps may be captured (module docstring)."""
    return COMPILE_IN_GRAPHS or os.environ.get(COMPILE_IN_GRAPHS_ENV) == "1"


def emulation_problems(cfg: RunConfig) -> list[str]:
    """Why graph steps cannot run without capture (on the CPU) for this run: torch's
    capturable optimizers run on CUDA only; AdamaxW's capturable path runs anywhere."""
    if cfg.optimizer == "adamax":
        return []
    return [f"optimizer: torch's capturable {cfg.optimizer} runs on CUDA only, so its graph "
            "steps cannot run without capture; use optimizer: adamax"]


@dataclass
class _Graph:
    """One captured step: its fixed inputs, and the readings it writes."""

    graph: Any  # torch.cuda.CUDAGraph, or None without capture
    batch: dict[str, torch.Tensor]
    weight: torch.Tensor
    readings: torch.Tensor | None = None


@dataclass
class GraphedSteps:
    """The graph steps of one stage (see the module docstring)."""

    run: Any  # the stage's StageRun
    update: Update | None  # None once released
    capture: bool = True
    warmup: int = WARMUP_STEPS
    note: Callable[[str], None] = print
    graphs: dict[Key, _Graph] = field(default_factory=dict)
    seen: dict[Key, int] = field(default_factory=dict)
    eager_keys: set[Key] = field(default_factory=set)
    trained: set[str] = field(default_factory=set)  # tasks with an eager update taken
    stream: Any = None
    pool: Any = None
    failed: str | None = None  # why a capture failed: the graphs are off from then on

    def __post_init__(self) -> None:
        if self.capture:
            self.stream = torch.cuda.Stream()
            self.pool = torch.cuda.graph_pool_handle()

    def step(self, task: str, batch: dict[str, torch.Tensor], weight: float
             ) -> torch.Tensor | None:
        """Train one batch by replaying its graph (capturing it first, once warmed up); its
        readings (loss, pre-clip norm, clip factor) on the device, or None where this step is
        the eager loop's to take (warm-up, or a shape that cannot be captured)."""
        if self.failed is not None or self._eager_only(task):
            return None
        key = (task, tuple((k, tuple(v.shape), v.dtype) for k, v in sorted(batch.items())))
        graph = self.graphs.get(key)
        if graph is None:
            if key in self.eager_keys or self.seen.get(key, 0) < self.warmup or \
                    task not in self.trained:
                self.seen[key] = self.seen.get(key, 0) + 1
                return None
            graph = self._capture(key, task, batch, weight)
            if graph is None:
                return None
        for name, value in batch.items():
            graph.batch[name].copy_(value, non_blocking=True)
        graph.weight.fill_(weight)
        if graph.graph is not None:
            graph.graph.replay()
        else:
            graph.readings = self._step(task, graph.batch, graph.weight)
        assert graph.readings is not None
        return graph.readings.clone()  # the next replay overwrites them

    @contextlib.contextmanager
    def eager(self, task: str) -> Iterator[None]:
        """Around an eager step of `task` (with an update): on the capture's stream, and it
        records which parameters the task trains."""
        side = self.capture and self.failed is None
        if side:
            self.stream.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(self.stream) if side else contextlib.nullcontext():
                yield
        finally:
            if side:
                torch.cuda.current_stream().wait_stream(self.stream)
        self.trained.add(task)
        # The step's gradients are spent: not held while graphs replay with their own.
        self.run.optimizer.zero_grad(set_to_none=True)

    def release(self) -> None:
        """Drop the graphs, their memory pool, and the link back to the run: the two point at
        each other, so without this a finished stage's model, optimizer and graphs would wait
        for the garbage collector while the next stage loads its own."""
        self.graphs.clear()
        self.trained.clear()
        self.stream = self.pool = None
        self.run = self.update = None

    def summary(self) -> str:
        """How many shapes were captured, and which stayed eager."""
        eager = sorted(t for t in self.run.data if self._eager_only(t))
        return (f"cuda graphs: {len(self.graphs)} step shapes captured"
                + (f"; eager: {', '.join(eager)}" if eager else "")
                + (f"; off after a failed capture ({self.failed})" if self.failed else ""))

    def _eager_only(self, task: str) -> bool:
        # Soft targets are gathered per batch from the host; some heads' losses read it.
        return task in self.run.soft or not self.run.model.head(task).capturable

    def _parameters(self) -> list[torch.Tensor]:
        return [p for group in self.run.optimizer.param_groups for p in group["params"]]

    def _capture(self, key: Key, task: str, batch: dict[str, torch.Tensor],
                 weight: float) -> _Graph | None:
        """The step of this task and shape, captured (or, without capture, set up)."""
        graph = _Graph(None, {k: torch.empty_like(v) for k, v in batch.items()},
                       torch.tensor(float(weight), device=self.run.runtime.device))
        if not self.capture:
            self.graphs[key] = graph
            return graph
        for name, value in batch.items():
            graph.batch[name].copy_(value)
        graph.graph = torch.cuda.CUDAGraph()
        current = torch.cuda.current_stream()
        try:
            with torch.cuda.graph(graph.graph, pool=self.pool, stream=self.stream):
                graph.readings = self._step(task, graph.batch, graph.weight)
        except Exception as err:  # an op that reads the host, or one not capturable
            # torch leaves the capture's stream current when ending the capture fails.
            torch.cuda.set_stream(current)
            with contextlib.suppress(Exception):  # the failure is reported below either way
                torch.cuda.synchronize()
            self.eager_keys.add(key)
            self.failed = (f"{task}, batch {tuple(batch['input_ids'].shape)}: "
                           f"{str(err).splitlines()[0] if str(err) else type(err).__name__}")
            self.note(f"cuda graphs: off for the rest of the run: capturing a step failed "
                      f"({self.failed})")
            return None
        self.graphs[key] = graph
        return graph

    def _step(self, task: str, batch: dict[str, torch.Tensor], weight: torch.Tensor
              ) -> torch.Tensor:
        """The whole update on fixed tensors: what a graph holds. The backward makes the
        gradients of the parameters the task trains (none held before it: no zeroing, no
        accumulating add), the optimizer steps those, and none is kept after."""
        assert self.update is not None, "a step after release()"
        parameters = self._parameters()
        for p in parameters:
            p.grad = None
        try:
            return self.update(task, batch, weight)
        finally:  # spent within the replay; the eager steps make their own
            for p in parameters:
                p.grad = None


__all__ = ["COMPILE_IN_GRAPHS", "COMPILE_IN_GRAPHS_ENV", "GraphPlan", "GraphedSteps",
           "compile_in_graphs", "emulation_problems", "plan_graphs", "static_shapes"]
