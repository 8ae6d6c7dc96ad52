"""What `launch` shows while it runs, on stderr.

On a terminal (with `rich` installed): a table of the running trials, refreshed at every epoch
report, with each trial's stage, epoch and current metric, under a line with the study's counts,
its top trial so far (all drivers', read from the database at each trial end) and ETA.
Elsewhere (logs, pipes, CI): one line per event (trial started, epoch reported, trial finished)
with the same counts.

A trial is named the same way in every row, line and top-trial mention: its central task and
`trial_label` (its search point's short description and its seed, e.g. `rte w=9 seed 1`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO


def trial_label(point: str, seed: int | None) -> str:
    """A trial's name in the display: its point's short label (`Space.label`) and its seed,
    e.g. `w=9 seed 1`."""
    return " ".join(part for part in (point, "" if seed is None else f"seed {seed}") if part)


def say(text: str, enabled: bool = True) -> None:
    """One line on stderr (Ray starting, rounds waiting for other drivers)."""
    if enabled:
        print(text, file=sys.stderr, flush=True)


@dataclass
class _Running:
    central: str
    label: str  # trial_label: the point and the seed
    seed: int
    epochs: int
    started: float
    epoch: int = 0
    value: float | None = None
    stage: str = "multitask"  # or "fine-tune TASK" once the trial fine-tunes


class Progress:
    def __init__(self, study: str, total: int, concurrency: int, enabled: bool = True,
                 stream: TextIO | None = None, metric: str | dict[str, str] = "metric",
                 live: bool | None = None) -> None:
        self.study = study
        self.total = total
        self.concurrency = max(1, concurrency)
        self._trials = self.concurrency  # trials at once: `cells_per_trial` scales it
        self.enabled = enabled
        self.stream = stream  # None: sys.stderr at print time (Tune pickles the searcher)
        # one metric name, or each central task's (a study may score rte by accuracy and
        # stsb by correlation)
        self.metric = metric
        self.started_at = time.time()
        self.finished_count = 0
        self.counts = {"COMPLETE": 0, "PRUNED": 0, "FAIL": 0, "LOST": 0}
        self.durations: list[float] = []
        # the cells this driver finished with a result ("rte w=9 seed 1"): what a lost study
        # file would lose, named when that happens
        self.finished_cells: list[str] = []
        # central -> (value, which trial) of the study's best single trial, all drivers' (the
        # searcher reads it at each trial end); a trial, not a weight: the summary's verdict
        # compares weights over seeds
        self.best: dict[str, tuple[float, str]] = {}
        self.running: dict[str, _Running] = {}
        self._live: Any = None
        want_live = live if live is not None else _is_tty(stream or sys.stderr)
        if enabled and want_live:
            self._live = _start_live(stream or sys.stderr)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_live": None, "stream": None}

    # --- events ---------------------------------------------------------------------------
    def started(self, trial_id: str, central: str, label: str, seed: int, epochs: int) -> None:
        """A trial of the point whose short label (`Space.label`) is `label` started."""
        run = _Running(central, trial_label(label, seed), seed, epochs, time.time())
        self.running[trial_id] = run
        self._event(f"start {central} {run.label}")

    def cells_per_trial(self, cells: int) -> None:
        """`fuse_cells: auto` sized a trial to `cells` cells: the time left counts them."""
        self.concurrency = max(self.concurrency, self._trials * cells)

    def fused(self, central: str, labels: list[str], seed: int) -> None:
        """The trials just started train together, as one stacked model (`fuse_cells`)."""
        self._event(f"fused {central} {', '.join(labels)} seed {seed}: one trial trains them")

    def epoch(self, trial_id: str, epoch: int, value: float) -> None:
        run = self.running.get(trial_id)
        if run is None:
            return
        run.epoch, run.value = epoch, value
        self._event(f"epoch {epoch}/{run.epochs} {run.central} {run.label} "
                    f"{self._metric(run.central)}={value:.4f}")

    def finetune(self, trial_id: str, task: str, epoch: int, value: float | None) -> None:
        """An epoch of the trial's fine-tuning stage (its multi-task epochs are done)."""
        run = self.running.get(trial_id)
        if run is None:
            return
        run.stage, run.epoch, run.value = f"fine-tune {task}", epoch, value
        shown = "" if value is None else f" {value:.4f}"
        self._event(f"fine-tuning {task} epoch {epoch} ({run.central} {run.label}){shown}")

    def finished(self, trial_id: str, state: str, elapsed: float, value: float | None,
                 reason: str | None = None) -> None:
        run = self.running.pop(trial_id, None)
        self.finished_count += 1
        self.counts[state] = self.counts.get(state, 0) + 1
        what = f"{run.central} {run.label}" if run else trial_id
        if state not in ("FAIL", "LOST"):
            self.durations.append(elapsed)
            self.finished_cells.append(what)
        if value is not None and run is not None and state == "COMPLETE":
            best = self.best.get(run.central)
            if best is None or value > best[0]:
                self.best[run.central] = (value, run.label)
        shown = (f" {self._metric(run.central if run else '')}={value:.4f}"
                 if value is not None else "")
        why = f" ({reason})" if reason else ""
        self._event(f"{state.lower()} {what}{shown} in {_duration(elapsed)}{why}")

    def study_best(self, central: str, value: float, which: str) -> None:
        """The study's top trial so far, all drivers' (replaces what this driver saw); `which`
        is its `trial_label`, as `searcher.study_best` gives it."""
        self.best[central] = (value, which)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _metric(self, central: str) -> str:
        if isinstance(self.metric, dict):
            return self.metric.get(central, "score")
        return self.metric

    # --- output ---------------------------------------------------------------------------
    def status(self) -> str:
        return f"[{self.study}] {self._counts()}"

    def _counts(self) -> str:
        pending = max(0, self.total - self.finished_count - len(self.running))
        best = ", ".join(f"{c} {p} ({v:.4f})" for c, (v, p) in sorted(self.best.items()))
        parts = [f"{self.finished_count}/{self.total} done, {len(self.running)} running, "
                 f"{pending} pending"]
        if best:
            parts.append(f"top trial {best}")
        eta = self.eta(pending)
        if eta is not None:
            parts.append(f"ETA {_duration(eta)}")
        return " | ".join(parts)

    def _event(self, event: str) -> None:
        if not self.enabled:
            return
        if self._live is not None:
            self._live.update(self._table(), refresh=True)
            return
        print(f"[{self.study}] {event} | {self._counts()}", file=self.stream or sys.stderr,
              flush=True)

    def _table(self) -> Any:
        from rich.console import Group
        from rich.table import Table

        table = Table(box=None, header_style="bold", pad_edge=False)
        for col in ("central", "trial", "stage", "epoch", "score", "time"):
            table.add_column(col, justify="left" if col in ("central", "trial", "stage")
                             else "right")
        now = time.time()
        for run in self.running.values():
            epoch = f"{run.epoch}/{run.epochs}" if run.stage == "multitask" else str(run.epoch)
            table.add_row(run.central, run.label, run.stage, epoch,
                          "-" if run.value is None else f"{run.value:.4f}",
                          _duration(now - run.started))
        return Group(self.status(), table)

    def eta(self, pending: int, now: float | None = None) -> float | None:
        """Mean trial time times the waves still to run. Before the first trial ends, a trial's
        time is estimated from the running trials' epochs so far (None before any epoch)."""
        if self.durations:
            mean = sum(self.durations) / len(self.durations)
        else:
            now = time.time() if now is None else now
            guesses = [(now - r.started) / r.epoch * r.epochs for r in self.running.values()
                       if r.epoch > 0]
            if not guesses:
                return None
            mean = sum(guesses) / len(guesses)
        return mean * (pending + len(self.running)) / self.concurrency


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _start_live(stream: TextIO) -> Any:
    try:
        from rich.console import Console
        from rich.live import Live
    except ImportError:  # rich is optional: plain lines then
        return None
    live = Live(console=Console(file=stream), auto_refresh=False, transient=False)
    live.start()
    return live


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
