"""The searcher Tune sees: the study's searcher (`CellSearcher`) behind a concurrency limit,
which also gives each new trial its GPU share and records, in the study database, the share a
trial had and the GPU memory it measured.

Under `resources.gpu: auto` the limit follows the share (`sweep.gpu_share`): Tune creates a
trial, and fixes its resources, as soon as the limit lets the searcher hand one out, so before
any trial has measured only as many trials are created as the cluster has GPUs (each asks for
a whole one); once a trial's measurement is in the database, the next trials ask for the
smaller share and the limit grows to what fits. With a number (or 0: CPUs only) the limit is
the round's concurrency, as Tune's own limiter would keep it.

A trial's GPU figures reach the database while it is still RUNNING, before the searcher writes
its end: a cell's with its last result (which Tune hands to `on_trial_complete`), a fused
member's with the row that ends it (`on_trial_result`, before the searcher ends it there).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import optuna
from ray.tune.search import ConcurrencyLimiter, Searcher

from weightsearch.studies import schema as S
from weightsearch.sweep.gpu_share import GPU_SHARE, GpuShares, measurements
from weightsearch.sweep.trainable import MEMBER, MEMBERS, SUMMARY_JSON
from weightsearch.sweep.trial_end import add_running_attrs


class GpuGate(ConcurrencyLimiter):
    """At most `most` trials at once (and under `shares`, what the GPUs hold at the current
    share); each new trial's config carries its GPU share (`GPU_SHARE`, read by
    `gpu_share.TrialResources`), and the Optuna trials of `studies` ({central task: study})
    record it and what they measured."""

    def __init__(self, searcher: Searcher, most: int, gpu: float, gpus: float,
                 shares: GpuShares | None, studies: Mapping[str, optuna.Study],
                 tell: Callable[[str], None]) -> None:
        # Tune sizes its queue of pending trials by the limit it first sees: the most.
        super().__init__(searcher, max_concurrent=most)
        self.most = most
        self.gpu = gpu  # the fixed share (a number in the study file; 0: CPUs)
        self.gpus = gpus  # GPUs in the Ray cluster
        self.shares = shares  # `resources.gpu: auto`
        self.studies = dict(studies)
        self.tell = tell
        self._configs: dict[str, dict[str, Any]] = {}  # live trial id -> its config
        self._recorded: set[tuple[str, int]] = set()  # (trial id, member) measured
        self._told = False

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its search algorithm into the experiment folder (tuner.pkl, for its own
        # restore, which the sweep never uses: the study database is its state). The studies
        # stay out: their storage would write the database URL, password included.
        return {**self.__dict__, "studies": {}, "tell": print}

    def get_state(self) -> dict[str, Any]:
        """What Tune copies into its experiment state at each of its checkpoints: the counts,
        not the studies, whose copy would also open a new engine on the study database each
        time (a reconnect that fails, and stops the driver, while the server restarts)."""
        state = self.__getstate__()
        del state["searcher"]
        return copy.deepcopy(state)

    # Ray annotates dict | None, leaving out the Searcher.FINISHED string its docstring allows.
    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:  # type: ignore[override]
        share = self.gpu
        if self.shares is not None:
            share = self.shares.current()
            self.max_concurrent = max(1, min(self.most, math.floor(self.gpus / share + 1e-9)))
        config = super().suggest(trial_id)
        if isinstance(config, dict):
            self._configs[trial_id] = config
            if share > 0:
                config[GPU_SHARE] = share
                for cell in _cells(config):
                    self._record(cell, {S.T_GPU_SHARE: share})
        return config

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self._record_measured(trial_id, result)
        super().on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        if result:
            self._record_measured(trial_id, result)
        super().on_trial_complete(trial_id, result=result, error=error)
        self._configs.pop(trial_id, None)
        if self.shares is not None:
            self.shares.forget()  # its measurement sizes the next trial

    def _record_measured(self, trial_id: str, result: dict[str, Any]) -> None:
        """The GPU figures of a run's summary row, onto its cell's trial (once per cell)."""
        config = self._configs.get(trial_id)
        if config is None or SUMMARY_JSON not in result:
            return
        member = int(result.get(MEMBER) or 0)
        if (trial_id, member) in self._recorded:
            return
        self._recorded.add((trial_id, member))
        cells = _cells(config)
        try:
            measured = measurements(json.loads(result[SUMMARY_JSON]))
        except (TypeError, ValueError):  # no summary: nothing measured
            return
        if measured and member < len(cells):
            self._record(cells[member], measured)

    def _record(self, cell: dict[str, Any], attrs: dict[str, float]) -> None:
        """Attributes of a cell's RUNNING trial; a failure costs the record, never the study
        (the searcher meets a database that fails at its own next write, and says so)."""
        study = self.studies.get(str(cell.get("central_task")))
        number = cell.get("trial_number")
        if study is None or not isinstance(number, int):
            return
        try:
            add_running_attrs(study, number, attrs)
        except Exception as exc:
            if not self._told:
                self._told = True
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
                self.tell(f"note: could not record a trial's GPU share or memory ({first})")


def _cells(config: dict[str, Any]) -> list[dict[str, Any]]:
    """A trial config's cells: its fused unit's members, or itself."""
    return list(config[MEMBERS]) if MEMBERS in config else [config]
