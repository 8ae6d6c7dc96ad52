"""The Ray Tune function trainable: one trial = one trainer run (or stint) for one cell.

The driver builds each cell's validated RunConfig once and hands it over in the trial's
config (`RUN_CONFIG`); the worker only prepares the attempt folder and trains.

Checkpoints: the trainer writes an epoch checkpoint into the trial's own output folder in the
shared workdir, and `resume=True` continues from it. That folder is the single source of truth,
so no Ray checkpoint is reported: a Ray retry (FailureConfig) and a later `weightsearch resume`
both find the same folder and continue the interrupted cell instead of retraining it. A later
attempt starts as a copy of the earlier one; once it has trained, the earlier attempts'
checkpoints are removed, and the trainer's `checkpoints` policy (`none` for trials unless the
study's train section says otherwise) trims the finished run's own.

A stint with an epoch `budget` (successive halving) stops once that epoch is trained and
checkpointed: its report says so (`STINT_END`) and the run ends there; the next rung's stint
continues from that checkpoint, with the full run's learning-rate schedule.

Results cross the Ray boundary as flat scalars plus JSON strings, because Tune flattens nested
dicts (`metrics/rte/accuracy`) before the searcher sees them.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
import shutil
import statistics
from pathlib import Path
from typing import Any

from weightsearch.studies.schema import GROUP_MEAN

# Keys of the results this trainable reports (read by sweep.searcher).
OBJECTIVE = "objective"  # the central task's objective metric at this epoch (ASHA's metric)
EPOCH = "epoch"  # ASHA's time attribute
METRICS_JSON = "metrics_json"  # {task: {metric: value}} of this epoch
SUMMARY_JSON = "summary_json"  # only in the last report: the trainer's RunResult, as JSON
STINT_END = "stint_end"  # 1 in the report of the epoch a budgeted stint stops at
VALUE = "value"  # only in the last report: the trial's value in the study (the scored stage's best)
FINETUNE_TASK = "finetune_task"  # a fine-tuning epoch's report: the task it fine-tunes,
FINETUNE_EPOCH = "finetune_epoch"  # its epoch of fine-tuning,
FINETUNE_VALUE = "finetune_value"  # and that task's primary metric
DONE = "done"  # Tune's own key: true in a trial's last report, as its result files expect
MEMBER = "member"  # a fused unit's report: the member's place in the unit
MEMBER_END = "member_end"  # a member's last report: complete | stint | error
MEMBER_ERROR = "member_error"  # an ended member's error, one line
FUSE_NOTE = "fuse_note"  # why a fused unit's cells trained one after another after all
# Keys of the trial config the searcher hands over.
RUN_CONFIG = "run_config"
# Fault injection for tests: the path of a file. The first fused trial to report a member's end
# while the file exists deletes it and SIGKILLs its own worker, as a machine that loses the
# worker between a member's end and the trial's would: the retry must report the ended members
# again and train none of them twice.
KILL_AFTER_MEMBER_END = "WEIGHTSEARCH_TEST_KILL_AFTER_MEMBER_END"
MEMBERS = "members"  # a fused unit: each member cell's own trial config
SAME_TREATMENT_KEY = "same_treatment"  # a fused unit: train members of one treatment once?


class Carried:
    """The cell's RunConfig inside Tune's trial config. Tune writes trial configs into its
    result files as JSON, stringifying what it cannot encode: this keeps that string short."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg

    def __str__(self) -> str:
        return f"RunConfig({self.cfg.output_dir})"

    __repr__ = __str__


class _BudgetReached(Exception):
    """Raised from the report callback once a stint's last epoch is checkpointed."""


def run_trial(config: dict[str, Any]) -> None:
    """The Tune trainable: one cell (`run_cell`), or the cells of a fused unit (`run_fused`)."""
    if MEMBERS in config:
        run_fused(config)
    else:
        run_cell(config)


class CellReporter:
    """What one cell reports to Tune: every multi-task epoch, fine-tuning progress, and its end.
    A member of a fused unit (`member` set) tags its rows with its place in the unit and
    reports its end as a row of its own (`MEMBER_END`); a cell alone ends the trial (`DONE`)."""

    def __init__(self, config: dict[str, Any], member: int | None = None) -> None:
        self.cfg = config[RUN_CONFIG].cfg
        self.config = config
        self.member = member
        self.note: str | None = None  # sent once, with the next row (`FUSE_NOTE`)
        self.held: dict[str, Any] = {}  # the last epoch's report, sent with the run's summary
        self.last: dict[str, float] = {OBJECTIVE: math.nan}  # the latest objective reported

    def _send(self, row: dict[str, Any]) -> None:
        from ray import tune

        if self.note is not None:
            row, self.note = {**row, FUSE_NOTE: self.note}, None
        tune.report(row if self.member is None else {**row, MEMBER: self.member})

    def report(self, epoch_report: Any) -> None:
        cfg, metric = self.cfg, self.config["metric"]
        central, budget = cfg.central_task, self.config.get("budget")
        if epoch_report.stage != "multitask":
            # Fine-tuning epochs count from 1 again and their scores arrive in the summary;
            # this report only tells the driver's progress lines that the trial lives on.
            # (Early stopping, which would read it, is refused with a fine-tuned objective.)
            # Tune wants its metric in every report: the fine-tuned central task's score, or
            # the last multi-task one while another task fine-tunes.
            task, value = next(iter(epoch_report.primary.items()))
            if task == central:
                self.last[OBJECTIVE] = float(epoch_report.metrics[central][metric])
            self._send({EPOCH: int(cfg.epochs), **self.last, FINETUNE_TASK: task,
                        FINETUNE_EPOCH: int(epoch_report.epoch), FINETUNE_VALUE: _finite(value)})
            return
        end = budget is not None and epoch_report.epoch >= budget
        self.last[OBJECTIVE] = epoch_objective(epoch_report.metrics, epoch_report.primary,
                                               central, metric)
        row = {
            EPOCH: int(epoch_report.epoch),
            OBJECTIVE: self.last[OBJECTIVE],
            METRICS_JSON: json.dumps(epoch_report.metrics),
            **flat_metrics(epoch_report.metrics),
            "train_loss": _finite(epoch_report.train_loss),
            "elapsed_s": float(epoch_report.elapsed_s),
            STINT_END: int(end),
        }
        if end:
            # Before the report: Tune stops a trial at `done` and need not run what follows.
            drop_earlier_checkpoints(self.config["base_dir"], int(self.config.get("attempt", 0)))
            self._send({**row, DONE: True} if self.member is None else row)
            raise _BudgetReached
        if epoch_report.epoch == cfg.epochs and cfg.finetune is None:
            self.held.update(row)  # one Tune iteration per epoch: the summary rides on the last
            return
        self._send(row)

    def failed(self, exc: BaseException) -> None:
        """The run raised: the last epoch's scores belong to the failed trial's history."""
        if self.held:
            self._send(self.held)
        if self.member is not None:
            text = str(exc) if isinstance(exc, _EarlierError) else _one_line(exc)
            self._send({**self.last, MEMBER_END: "error", MEMBER_ERROR: text})

    def stint_ended(self) -> None:
        if self.member is not None:
            self._send({**self.last, MEMBER_END: "stint"})

    def finished(self, result: Any) -> None:
        """The run's summary and its value in the study: the trial's (or member's) last row."""
        drop_earlier_checkpoints(self.config["base_dir"], int(self.config.get("attempt", 0)))
        central, metric = self.cfg.central_task, self.config["metric"]
        last = max((h["epoch"] for h in result.history), default=0)
        if metric == GROUP_MEAN:  # one network, one epoch: the one where its tasks do best
            value = max(epoch_objective(h["metrics"], h["primary"], central, metric)
                        for h in result.history)
        else:
            value = float(result.stage_best(self.config["stage"])[central][metric])
        row = {EPOCH: int(last), OBJECTIVE: value, **self.held, VALUE: value,
               SUMMARY_JSON: json.dumps(result.to_dict(), default=str)}
        self._send({**row, DONE: True} if self.member is None else
                   {**row, MEMBER_END: "complete"})


def run_cell(config: dict[str, Any]) -> None:
    """Train the cell `config[RUN_CONFIG]`; report every multi-task epoch."""
    from weightsearch import trainer

    cfg = config[RUN_CONFIG].cfg
    prepare_attempt(config["base_dir"], int(config.get("attempt", 0)))
    reporter = CellReporter(config)
    try:
        result = trainer.train(cfg, report=reporter.report, resume=True, quiet=True)
    except _BudgetReached:
        return
    except Exception as exc:
        reporter.failed(exc)
        raise
    reporter.finished(result)


def run_fused(config: dict[str, Any]) -> None:
    """Train the cells of a fused unit (`config[MEMBERS]`, each a cell's trial config) as one
    stacked model (`weightsearch.trainer.fused`), each reporting as its own cell. A member that
    ended in an earlier try of this trial (its result, its stint, its error: `MEMBER_END_FILE`)
    reports that end again and is not retrained. If the unit cannot be fused after all (a layer
    that cannot be stacked, a forward pass that is not the members') or a member cannot start,
    its cells train one after another here, each with its own outcome."""
    from weightsearch import trainer
    from weightsearch.core.errors import ConfigError
    from weightsearch.trainer.fused import CannotFuse

    members = config[MEMBERS]
    reporters = [CellReporter(m, member=k) for k, m in enumerate(members)]
    outcomes: dict[int, Any] = {}
    for k, m in enumerate(members):
        ended = _earlier_end(prepare_attempt(m["base_dir"], int(m.get("attempt", 0))), m)
        if ended is not None:
            outcomes[k] = ended
    todo = [k for k in range(len(members)) if k not in outcomes]
    cfgs = [members[k][RUN_CONFIG].cfg for k in todo]
    trained: list[Any] = []
    if todo:
        try:
            trained = trainer.train_fused(cfgs, [reporters[k].report for k in todo],
                                          resume=True, quiet=True,
                                          same_treatment=config.get(SAME_TREATMENT_KEY, "once"))
        except ConfigError as exc:  # nothing written yet: one after another, each on its own
            if isinstance(exc, CannotFuse):  # the driver says why, once
                reporters[todo[0]].note = exc.problems[0]
            trained = [_train_alone(cfg, reporters[k].report)
                       for cfg, k in zip(cfgs, todo, strict=True)]
    outcomes.update(zip(todo, trained, strict=True))
    for k, reporter in enumerate(reporters):
        outcome = outcomes[k]
        attempt = int(members[k].get("attempt", 0))
        out = attempt_folder(members[k]["base_dir"], attempt)
        if isinstance(outcome, _BudgetReached):
            _write_end(out, attempt, "stint")
            reporter.stint_ended()
        elif isinstance(outcome, _EarlierError):
            reporter.failed(outcome)
        elif isinstance(outcome, BaseException):
            _write_end(out, attempt, "error", _one_line(outcome))
            reporter.failed(outcome)
        else:
            reporter.finished(outcome)
        _fault_after_member_end()


def _fault_after_member_end() -> None:
    marker = os.environ.get(KILL_AFTER_MEMBER_END)
    if not marker:
        return
    try:
        os.unlink(marker)  # atomic: one worker takes it
    except FileNotFoundError:
        return
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


class _EarlierError(Exception):
    """A member's error in an earlier try of its fused trial, read back from its end file."""


MEMBER_END_FILE = "member_end.json"  # in a fused member's attempt folder: how it ended


def _earlier_end(out: str, member: dict[str, Any]) -> Any:
    """How a member ended in an earlier try of its trial: its result, a stint at its budget
    (`_BudgetReached`), its error (`_EarlierError`); None: it has not ended."""
    from weightsearch.trainer.config.finetune_settings import FINETUNE_DIR
    from weightsearch.trainer.finetune import read_result

    if os.path.isfile(os.path.join(out, "result.json")):
        # A copy of an earlier attempt's finished folder: its result names this folder.
        result = read_result(Path(out) / "result.json")
        return dataclasses.replace(result, output_dir=Path(out), finetuned={
            task: dataclasses.replace(run, output_dir=Path(out) / FINETUNE_DIR / task)
            for task, run in result.finetuned.items()})
    try:
        ended = json.loads(Path(out, MEMBER_END_FILE).read_text())
    except (OSError, ValueError):
        return None
    # A later attempt starts as a copy of this folder: the file speaks for its own attempt only.
    if not isinstance(ended, dict) or ended.get("attempt") != int(member.get("attempt", 0)):
        return None
    if ended.get("end") == "stint" and member.get("budget") is not None:
        return _BudgetReached()
    if ended.get("end") == "error":
        return _EarlierError(str(ended.get("error") or "an earlier try failed"))
    return None


def _write_end(out: str, attempt: int, end: str, error: str | None = None) -> None:
    """Record how a member ended before it says so, so that a retry of its trial reports the
    same end and does not train it again (written whole or not at all)."""
    target = Path(out) / MEMBER_END_FILE
    if not target.parent.is_dir():
        return
    partial = target.with_name(f".{MEMBER_END_FILE}.{os.getpid()}")
    partial.write_text(json.dumps({"end": end, "attempt": attempt,
                                   **({"error": error} if error else {})}))
    os.replace(partial, target)


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:500]


def _train_alone(cfg: Any, report: Any) -> Any:
    from weightsearch import trainer

    try:
        return trainer.train(cfg, report=report, resume=True, quiet=True)
    except Exception as exc:  # this cell's own outcome, reported as its end
        return exc


def epoch_objective(metrics: dict[str, dict[str, float]], primary: dict[str, float],
                    central: str, metric: str) -> float:
    """An epoch's objective: the central task's `metric`, or in a budgeted grouping study
    (`GROUP_MEAN`) the mean of the primary metrics of every task the network trains."""
    if metric == GROUP_MEAN:
        return statistics.fmean(float(v) for v in primary.values())
    return float(metrics[central][metric])


def attempt_folder(base: str, attempt: int) -> str:
    return base if attempt == 0 else f"{base}-attempt{attempt}"


def prepare_attempt(base: str, attempt: int) -> str:
    """The folder of one attempt at a cell: no two attempts (or drivers) write the same folder.

    A later attempt starts as a copy of the newest earlier attempt's folder, so the trainer
    continues from that attempt's last epoch checkpoint. The copy is made under a temporary
    name and renamed, so a Ray retry of this attempt finds either nothing or the whole copy.
    """
    out = attempt_folder(base, attempt)
    if attempt == 0 or os.path.isdir(out):
        return out
    for stale in glob.glob(f"{glob.escape(out)}.copying-*"):  # a copy a crash interrupted
        shutil.rmtree(stale, ignore_errors=True)
    for earlier in range(attempt - 1, -1, -1):
        source = attempt_folder(base, earlier)
        if os.path.isdir(os.path.join(source, "checkpoints")):
            partial = f"{out}.copying-{os.getpid()}"
            shutil.rmtree(partial, ignore_errors=True)
            shutil.copytree(source, partial)
            os.replace(partial, out)
            break
    return out


def drop_earlier_checkpoints(base: str, attempt: int) -> None:
    """Once an attempt has trained (its stint or the whole run), the checkpoints of the cell's
    earlier attempts are copies it no longer needs: remove them, keep their logs."""
    for earlier in range(attempt):
        shutil.rmtree(os.path.join(attempt_folder(base, earlier), "checkpoints"),
                      ignore_errors=True)


def flat_metrics(metrics: dict[str, dict[str, float]]) -> dict[str, float | None]:
    """Every task's metrics as scalars named "<task>/<metric>", as Tune users read them
    (`ExperimentAnalysis.get_best_trial("rte/accuracy", "max")`)."""
    return {f"{task}/{name}": _finite(v) for task, values in metrics.items()
            for name, v in values.items() if isinstance(v, int | float)}


def _finite(value: float) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None
