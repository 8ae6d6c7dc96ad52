"""Fused runs: one process trains K runs that differ only in their loss weighting, as one
stacked model on the shared batches.

The runs of a weight search's cells differ in one scalar on the loss; everything else (central
task, seed, data, batch plan, every other setting) is the same. Trained one by one, each costs
a step's host work per batch, and a small encoder leaves a GPU mostly idle. Fused, each
parameter of the K models lives in one [K, ...] tensor, and a training step is one forward pass
of a wide model of ordinary batched kernels (`weightsearch.trainer.stacked`) on the batch
replicated K times: the K weighted losses are summed (their parameters are disjoint, so each
member's gradient is its own), and each member then clips its own gradient and steps its own
optimizer and schedule. The clips and optimizer steps of the updating members run as one step
over the stacked tensors (`weightsearch.trainer.stacked_optim`: torch's arithmetic with each
member's learning rate, weight decay, step counts and clipping settings; each member's
optimizer state is views of its slices of stacked state tensors, so its checkpoints are its
own), instead of K steps over P small tensors each; a member whose optimizer it does not
reproduce (one that also steps a weighting scheme's learned parameters) steps alone on its
slices. Autocast covers the wide model as it does a stand-alone run's.

Each member stays its own run. Its model's parameters are views of its slices, so evaluation,
checkpoints, resume and the result are the stand-alone code's, in the member's own
`output_dir`. Dropout, attention dropout included, draws one mask per call for all members
(`weightsearch.trainer.draws`), which is the mask a stand-alone run with the same seed draws:
its random stream does not depend on the weights. So each member trains as its stand-alone run
does, to float tolerance, and a member that stops (a report that stops it, a diverged loss) or
skips a batch (weight 0) simply takes no step; the others go on. On resume, members whose
checkpoints are behind the others train alone first until all are at the same epoch (the random
state is the same for all of them at every epoch's end).

What cannot be fused raises `CannotFuse` (a `ConfigError`) before anything is written:
members that differ in more than their weighting, a compiled encoder, SMART (its perturbation
is a forward pass of its own), activation recomputation, layers that cannot be stacked, and
tasks whose stacked forward pass is not the members' (probed on a batch of each task). The
caller trains those runs one by one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tqdm.auto import tqdm

from weightsearch.core.errors import TrainingDiverged
from weightsearch.trainer import draws
from weightsearch.trainer.checkpoint import restore_rng, rng_state
from weightsearch.trainer.config import RunConfig
from weightsearch.trainer.fusable import (
    MEMBER_SETTINGS,
    SAME_TREATMENT,
    CannotFuse,
    fusion_problems,
)
from weightsearch.trainer.fused_probe import probe
from weightsearch.trainer.graphs import GraphPlan
from weightsearch.trainer.loop import SoftTargets, no_soft_targets, set_up
from weightsearch.trainer.model import MTDNN
from weightsearch.trainer.optim import current_lr
from weightsearch.trainer.results import RunResult
from weightsearch.trainer.same_treatment import (
    detach_parameters,
    follower_readings,
    same_epoch,
    same_groups,
    set_weights,
    take_state,
)
from weightsearch.trainer.stacked import replicated, widen
from weightsearch.trainer.stacked_optim import own_state, step_members
from weightsearch.trainer.stage import Progress, Report, StageRun
from weightsearch.trainer.stage_output import (
    STEPS,
    EpochLog,
    end_epoch,
    open_output,
    stage_result,
    step_rows,
)
from weightsearch.trainer.step import (
    step_batch,
    step_record,
    step_scheduler,
    task_loss,
    weighted_total,
)
from weightsearch.trainer.tracking import Tracker, open_tracker, run_params

NO_GRAPHS = GraphPlan(False, why_not="fused runs train every member in one stacked step")


class StackedModels:
    """K models of one architecture whose parameters live in stacked [K, ...] tensors: each
    model's parameter is a view of its slice (same Parameter object, so the model's optimizer
    and checkpoints work unchanged), while `forward` runs all K as one wide model
    (`weightsearch.trainer.stacked`) on the batch replicated K times."""

    def __init__(self, models: Sequence[MTDNN]) -> None:
        self.models = list(models)
        self.lead = self.models[0]  # its structure and buffers serve every member
        self.lead_device = next(self.lead.parameters()).device
        members = [dict(m.named_parameters()) for m in self.models]
        self.stacked: dict[str, torch.nn.Parameter] = {}
        self.views: list[list[tuple[torch.nn.Parameter, str]]] = [[] for _ in self.models]
        for name, lead in members[0].items():
            params = [m[name] for m in members]
            stacked = torch.nn.Parameter(torch.stack([p.detach() for p in params]),
                                         requires_grad=lead.requires_grad)
            for k, p in enumerate(params):
                p.data = stacked.data[k]  # the member's parameter now lives in its slice
                self.views[k].append((p, name))
            self.stacked[name] = stacked
        self.wide = widen(self.lead, self.stacked)
        self.wide_training: bool | None = None  # the mode last set on every wide layer
        self.last = draws.Stack()  # the last forward pass's (how many attention layers drew)

    def __len__(self) -> int:
        return len(self.models)

    def forward(self, task: str, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Every member's head outputs for the shared batch, stacked: [K, ...]."""
        k = len(self)
        if self.wide_training is not self.lead.training:  # the lead's mode, set recursively
            self.wide.train(self.lead.training)
            self.wide_training = self.lead.training
        wide = {name: replicated(t, k) for name, t in batch.items()}
        with draws.stacked(k, wide["input_ids"].shape[0]) as self.last:
            out = self.wide(task, wide)
        return out.view(k, out.shape[0] // k, *out.shape[1:])

    def clear_gradients(self) -> None:
        for stacked in self.stacked.values():
            stacked.grad = None
        for views in self.views:
            for p, _ in views:
                p.grad = None

    def share_gradients(self, members: Sequence[int]) -> None:
        """Give each of `members` its slice of the stacked gradients."""
        for k in members:
            for p, name in self.views[k]:
                grad = self.stacked[name].grad
                p.grad = None if grad is None else grad[k]


@dataclasses.dataclass
class Member:
    """One run of a fused unit and how far it has got."""

    run: StageRun
    report: Report | None
    slot: int  # its place in the stacked tensors
    progress: Progress | None = None
    tracker: Tracker | None = None
    done_epochs: int = 0  # epochs trained before this attempt (its checkpoint's)
    outcome: BaseException | None = None  # why it stopped early, if it did
    follows: Member | None = None  # the member that trains its updates (same treatment)
    follows_from: int = 0  # the first epoch it followed
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # its last epoch's

    @property
    def training(self) -> bool:
        return self.outcome is None

    def opened(self) -> tuple[Progress, Tracker]:
        """Its progress and tracker, which _train_unit opens before the first epoch."""
        assert self.progress is not None and self.tracker is not None
        return self.progress, self.tracker


class Released(Exception):
    """A follower that stopped being its representative's treatment (or outlived it): it
    trains on from its own last checkpoint, after the unit."""


def train_fused_stage(configs: Sequence[RunConfig],
                      reports: Sequence[Report | None] | None = None, resume: bool = False,
                      quiet: bool = False, stage: str = "multitask",
                      soft_targets: SoftTargets = no_soft_targets,
                      prepare: Callable[[StageRun], None] | None = None,
                      same_treatment: str = "once",
                      ) -> list[tuple[RunConfig, RunResult | BaseException]]:
    """Train one stage of each run in `configs` as one fused unit. Per run: its config as it
    trained (a resumed run's recorded defaults) and its result, or the exception that stopped
    it (its report's, a diverged loss). Raises CannotFuse before anything is written when the
    runs cannot be fused; `prepare` sees each set-up run once that is settled.
    `same_treatment`: `once` trains members that would train the same updates once
    (`weightsearch.trainer.same_treatment`), `all` trains every member."""
    if same_treatment not in SAME_TREATMENT:
        raise ValueError(f"same_treatment: {same_treatment!r}; one of {SAME_TREATMENT}")
    problems = fusion_problems(configs)
    if problems:
        raise CannotFuse(problems)
    reports = list(reports) if reports is not None else [None] * len(configs)
    if len(reports) != len(configs):
        raise ValueError(f"{len(configs)} runs but {len(reports)} reports")
    trained = _train_fused_unit(configs, reports, resume, quiet, stage, soft_targets, prepare,
                                same_treatment == "once")
    released = [k for k, (_, outcome) in enumerate(trained) if isinstance(outcome, Released)]
    if released:  # each from its own last checkpoint: the state it shared until then
        again = train_fused_stage([configs[k] for k in released], [reports[k] for k in released],
                                  True, quiet, stage, soft_targets, prepare, same_treatment)
        for k, (cfg, outcome) in zip(released, again, strict=True):
            if isinstance(outcome, RunResult):  # it trained fused with this unit until then
                outcome = dataclasses.replace(outcome, extra={
                    **outcome.extra, "fused_members": len(configs)})
            trained[k] = (cfg, outcome)
    return trained


def _train_fused_unit(configs: Sequence[RunConfig], reports: list[Report | None],
                      resume: bool, quiet: bool, stage: str, soft_targets: SoftTargets,
                      prepare: Callable[[StageRun], None] | None, train_once: bool,
                      ) -> list[tuple[RunConfig, RunResult | BaseException]]:
    """`train_fused_stage`'s unit, whose runs, models and stacks go when it returns: the
    released members train on after it, and nothing of it stays alive meanwhile."""
    # One stacked step for every member: no per-member CUDA graphs.
    runs = [set_up(cfg, resume, stage, soft_targets, graphs=NO_GRAPHS)
            for cfg in configs]
    problems = fusion_problems([r.cfg for r in runs])  # as resumed runs trained them
    if problems:
        raise CannotFuse(problems)
    fresh_rng = rng_state()  # every member's at its first update (each set-up seeds the same)
    members = [Member(run, report, slot)
               for slot, (run, report) in enumerate(zip(runs, reports, strict=True))]
    stacks = [StackedModels([r.model for r in runs])]
    probe(stacks[0], runs[0])
    if prepare is not None:
        for run in runs:
            prepare(run)
    # Handed over, not kept here: a stack rebuilt without a member frees the old one (its
    # stacked parameters and optimizer state, K models' worth) only where no frame holds it.
    outcomes = _train_unit(stacks.pop(), members, fresh_rng, quiet, train_once)
    return [(run.cfg, outcome) for run, outcome in zip(runs, outcomes, strict=True)]


def _train_unit(stack: StackedModels, members: list[Member], fresh_rng: dict[str, Any],
                quiet: bool, train_once: bool) -> list[RunResult | BaseException]:
    # Open the furthest runs first: the last random state restored is then the one of the run
    # furthest behind, where training starts (all are equal at every epoch's end).
    for member in sorted(members, key=lambda m: -(m.run.ckpt.epoch if m.run.ckpt else 0)):
        member.progress = open_output(member.run, quiet)
        member.done_epochs = member.run.ckpt.epoch if member.run.ckpt else 0
    if min(m.done_epochs for m in members) == 0:
        restore_rng(fresh_rng)
    lead = members[0].run
    epochs = lead.cfg.epochs
    total = sum(len(lead.plans[e]) for e in range(min(m.done_epochs for m in members) + 1,
                                                   epochs + 1))
    bar = tqdm(total=total, disable=quiet, unit="step", dynamic_ncols=True,
               desc=f"train x{len(members)}")
    try:
        for member in members:
            run, progress = member.run, member.progress
            assert progress is not None  # opened above
            member.tracker = open_tracker(
                run.cfg.tracking, run.out, run.stage, run_params(run.cfg),
                resumed_at=progress.global_step if run.ckpt is not None else None)
        first = min(m.done_epochs for m in members) + 1
        for epoch in range(first, epochs + 1):
            _release_orphans(members, epoch)
            active = [m for m in members if m.training and m.done_epochs < epoch]
            if not active:
                break
            stack = _restacked(stack, members, [m for m in active if m.follows is None])
            for member, (train_loss, clipping) in _train_epoch(stack, active, epoch, bar, quiet):
                _finish_epoch(member, epoch, train_loss, clipping, quiet)
            if train_once and epoch == first < epochs:  # after the last: nothing to follow
                _group_same_treatments(members, epoch, quiet)
    finally:
        bar.close()
        for member in members:
            if member.tracker is not None:
                member.tracker.close()
    return [_member_result(m, len(members)) for m in members]


def _release_orphans(members: list[Member], epoch: int) -> None:
    """Followers whose representative stopped while they train on: released."""
    for member in members:
        rep = member.follows
        if member.training and rep is not None and not rep.training:
            member.outcome = Released(f"its representative stopped before epoch {epoch}")


def _restacked(stack: StackedModels, members: list[Member], stepping: list[Member]
               ) -> StackedModels:
    """The stacked model of the members that step this epoch, rebuilt when they changed;
    members that leave it get parameters and optimizer state of their own."""
    if [m.run.model for m in stepping] == stack.models:
        return stack
    kept = {id(m.run.model) for m in stepping}
    in_stack = {id(model) for model in stack.models}
    for member in members:
        if id(member.run.model) in in_stack and id(member.run.model) not in kept:
            detach_parameters(member.run.model)
            if member.follows is not None:  # refilled from its representative's at the epoch's end
                member.run.optimizer.state.clear()
            else:
                own_state(member.run.optimizer)
    for slot, member in enumerate(stepping):
        member.slot = slot
    return StackedModels([m.run.model for m in stepping])


def _group_same_treatments(members: list[Member], epoch: int, quiet: bool) -> None:
    """After the unit's first epoch: members that trained the same updates follow the one of
    them with the smallest weights from the next epoch on."""
    candidates = [m for m in members if m.training and m.follows is None and m.rows]
    if len(candidates) < 2:
        return
    cfg = candidates[0].run.cfg
    global_clip = cfg.grad_clip > 0 and cfg.grad_clip_mode == "global"
    groups = same_groups([m.run for m in candidates], [m.rows for m in candidates],
                         global_clip)
    for group in groups:
        rep = candidates[group[0]]
        for k in group[1:]:
            candidates[k].follows, candidates[k].follows_from = rep, epoch + 1
        if not quiet:
            tqdm.write(f"epoch {epoch}: {len(group)} members trained the same updates; "
                       f"{rep.run.out.name} trains on for all of them")


def _finish_epoch(member: Member, epoch: int, train_loss: float,
                  clipping: dict[str, dict[str, Any]], quiet: bool) -> None:
    """Evaluate, log, checkpoint and report the member's epoch; a report that stops the run
    (or any failure of this member's alone) ends this member only."""
    try:
        end_epoch(member.run, epoch, train_loss, clipping, *member.opened(), member.report,
                  quiet)
    except Exception as exc:  # the member's own outcome, returned to the caller
        member.outcome = detached(exc)


def _train_epoch(stack: StackedModels, active: list[Member], epoch: int, bar: Any, quiet: bool
                 ) -> list[tuple[Member, tuple[float, dict[str, dict[str, Any]]]]]:
    """One pass over the epoch's plan for the active members; each member that finished the
    epoch, with its mean training loss and clipping. Followers log the updates their
    representatives take, and end the epoch with a copy of their state where every update was
    the same treatment (else they are released)."""
    lead = active[0].run
    for member in active:
        member.run.model.train()
    stack.lead.train()
    plan = lead.plans[epoch]
    started = time.perf_counter()
    finished = []
    with contextlib.ExitStack() as files:
        logs = {id(m): EpochLog(m.run, *m.opened(),
                                files.enter_context((m.run.out / STEPS).open("a")))
                for m in active}
        for step, (task, indices) in enumerate(plan):
            training = [m for m in active if m.training and m.follows is None]
            if not training:
                break
            _step_members(stack, active, training, logs, epoch, step, task, indices)
            bar.update(1)
            if len(logs[id(training[0])].pending) >= lead.cfg.log_every or \
                    step == len(plan) - 1:
                for member in training:
                    try:
                        logs[id(member)].flush()
                    except TrainingDiverged as exc:
                        member.outcome = detached(exc)
        if lead.runtime.device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - started
        for member in active:  # the members that trained first: their followers copy them
            if member.training and member.follows is not None:
                _end_following(member, logs[id(member)], logs[id(member.follows)], epoch)
        for member in active:
            if member.training:
                member.opened()[0].train_time += elapsed
                member.rows = logs[id(member)].logged
                finished.append((member, logs[id(member)].finish(epoch, quiet)))
    return finished


def _step_members(stack: StackedModels, active: list[Member], training: list[Member],
                  logs: dict[int, EpochLog], epoch: int, step: int, task: str,
                  indices: Any) -> None:
    """One batch: the training members' stacked step, then their followers' records of it."""
    taken = {}
    for member, (record, readings) in zip(
            training, _fused_step(stack, training, epoch, step, task, indices), strict=True):
        logs[id(member)].add(record, readings)
        taken[id(member)] = (record, readings)
    for member in active:
        if member.training and member.follows is not None:
            _follow_step(member, taken, logs[id(member)], epoch, step, task, len(indices))


def _follow_step(member: Member, taken: dict[int, tuple[dict[str, Any], torch.Tensor]],
                 log: EpochLog, epoch: int, step: int, task: str, size: int) -> None:
    """A follower's record of the update its representative took: its own weight, rate and
    schedule, the readings derived from the representative's (checked at the epoch's end)."""
    run, rep = member.run, member.follows
    assert rep is not None
    if id(rep) not in taken:  # the representative stopped within the epoch
        member.outcome = Released(f"its representative stopped in epoch {epoch}")
        return
    rep_record, rep_readings = taken[id(rep)]
    weight = run.scheme.weight(task, epoch, step)
    rate = current_lr(run.scheduler)
    step_scheduler(run)
    log.add(step_record(run, epoch, step, task, size, weight, rate, weight == 0),
            follower_readings(rep_readings, rep_record["weight"], weight, weight == 0,
                              run.cfg.grad_clip, run.cfg.grad_clip_mode))


def _end_following(member: Member, log: EpochLog, rep_log: EpochLog, epoch: int) -> None:
    """At the epoch's end: a follower whose every update was its representative's treatment
    writes its log and takes its state; otherwise it is released (its log of the epoch
    dropped: it trains the epoch again from its checkpoint)."""
    rep = member.follows
    assert rep is not None
    cfg = member.run.cfg
    rows = step_rows(log.pending, weighted_task_gradient=not cfg.adversarial.enabled)
    global_clip = cfg.grad_clip > 0 and cfg.grad_clip_mode == "global"
    if not rep.training or not same_epoch(rep_log.logged, rows, global_clip):
        member.outcome = Released(f"epoch {epoch} was not its representative's treatment")
        log.pending = []
        return
    try:
        log.flush()
    except TrainingDiverged as exc:
        member.outcome = detached(exc)
        return
    take_state(rep.run, member.run)


def _fused_step(stack: StackedModels, training: list[Member], epoch: int, step: int, task: str,
                indices: Any) -> list[tuple[dict[str, Any], torch.Tensor]]:
    """One batch for every training member: each member's weighted loss and its own update
    unless its weight is 0. Each member's log record and readings, as `step.train_step`."""
    from weightsearch.trainer.clipping import step_readings

    lead = training[0].run
    batch = step_batch(lead, task, indices)
    weights = [m.run.scheme.weight(task, epoch, step) for m in training]
    rates = [current_lr(m.run.scheduler) for m in training]
    updating = [k for k, w in enumerate(weights) if w != 0]
    slots = [m.slot for m in training]
    with torch.set_grad_enabled(bool(updating)):
        with lead.runtime.autocast():
            outputs = stack.forward(task, batch)
        losses = [task_loss(m.run, task, outputs[slot], batch)
                  for m, slot in zip(training, slots, strict=True)]
    readings: list[tuple[torch.Tensor | None, torch.Tensor | None]] = [(None, None)] * len(training)
    if updating:
        for k in updating:
            training[k].run.optimizer.zero_grad(set_to_none=True)
        stack.clear_gradients()
        total = sum(weighted_total(training[k].run, task, batch, outputs[slots[k]], losses[k],
                                   weights[k]) for k in updating)
        with lead.runtime.backward():
            total.backward()  # type: ignore[union-attr]
        stepped = step_members(stack, [(slots[k], training[k].run, weights[k])
                                       for k in updating])
        for k, reading in zip(updating, stepped, strict=True):
            readings[k] = reading
        stack.clear_gradients()  # no member keeps the step's stacked gradients alive
    for member in training:
        step_scheduler(member.run)
    return [(step_record(m.run, epoch, step, task, len(indices), weights[k], rates[k],
                         k not in updating),
             step_readings(*readings[k], losses[k]))
            for k, m in enumerate(training)]


def detached(exc: BaseException) -> BaseException:
    """`exc` without its traceback, whose frames would keep every member's model alive for as
    long as the caller keeps the outcome; the traceback's text stays in its notes."""
    import traceback

    text = "".join(traceback.format_tb(exc.__traceback__))
    if text and hasattr(exc, "add_note"):  # Python 3.11+
        exc.add_note(f"raised in a fused unit's member:\n{text.rstrip()}")
    return exc.with_traceback(None)


def _member_result(member: Member, size: int) -> RunResult | BaseException:
    if member.outcome is not None:
        return member.outcome
    assert member.progress is not None
    result = stage_result(member.run, member.progress)
    extra = {**result.extra, "fused_members": size}
    if member.follows is not None:  # its updates from that epoch on were trained once, for both
        extra["same_treatment"] = {"trained_by": str(member.follows.run.out),
                                   "from_epoch": member.follows_from,
                                   "weights": set_weights(member.follows.run.scheme)}
    return dataclasses.replace(result, extra=extra)


__all__ = ["MEMBER_SETTINGS", "CannotFuse", "Released", "StackedModels", "detached",
           "fusion_problems", "train_fused_stage"]
