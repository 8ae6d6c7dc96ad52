"""One concise line on stderr per trial event: done / running / pending, best weights, ETA."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from sweep.searcher import CentralPlan


class Progress:
    def __init__(self, study: str, total: int, concurrency: int, enabled: bool = True,
                 stream: TextIO | None = None) -> None:
        self.study = study
        self.total = total
        self.concurrency = max(1, concurrency)
        self.enabled = enabled
        self.stream = stream  # None: sys.stderr at print time (Tune pickles the searcher)
        self.started_at = time.time()
        self.running = 0
        self.finished_count = 0
        self.counts = {"COMPLETE": 0, "PRUNED": 0, "FAIL": 0}
        self.durations: list[float] = []
        self.best: dict[str, tuple[float, float]] = {}  # central -> (value, weight)

    def started(self, central: str, weight: float, seed: int) -> None:
        self.running += 1
        self._line(f"start {central} w={weight:g} seed={seed}")

    def finished(self, plan: CentralPlan, weight: float, seed: int, state: str, elapsed: float,
                 value: float | None, reason: str | None = None) -> None:
        self.running = max(0, self.running - 1)
        self.finished_count += 1
        self.counts[state] = self.counts.get(state, 0) + 1
        if state != "FAIL":
            self.durations.append(elapsed)
        if value is not None:
            best = self.best.get(plan.central)
            if best is None or value > best[0]:
                self.best[plan.central] = (value, weight)
        shown = f" {plan.primary_metric}={value:.4f}" if value is not None else ""
        why = f" ({reason})" if reason else ""
        self._line(f"{state.lower()} {plan.central} w={weight:g} seed={seed}{shown} "
                   f"in {_duration(elapsed)}{why}")

    def _line(self, event: str) -> None:
        if not self.enabled:
            return
        pending = max(0, self.total - self.finished_count - self.running)
        best = ", ".join(f"{c} w={w:g} ({v:.4f})" for c, (v, w) in sorted(self.best.items()))
        parts = [f"[{self.study}] {event}",
                 f"{self.finished_count}/{self.total} done, {self.running} running, "
                 f"{pending} pending"]
        if best:
            parts.append(f"best {best}")
        eta = self.eta(pending)
        if eta is not None:
            parts.append(f"ETA {_duration(eta)}")
        print(" | ".join(parts), file=self.stream or sys.stderr, flush=True)

    def eta(self, pending: int) -> float | None:
        """Mean trial time times the waves still to run; None before the first trial ends."""
        if not self.durations:
            return None
        mean = sum(self.durations) / len(self.durations)
        return mean * (pending + self.running) / self.concurrency


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
