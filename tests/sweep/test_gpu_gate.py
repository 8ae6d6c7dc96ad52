"""The gate between Tune and the study's searcher (`sweep.gpu_gate`): each new trial's GPU share
from what the study database holds, the limit that follows it, and the share and measured
memory recorded on the trials, on a real SQLite study database. The searcher behind the gate
is a small stand-in that creates and ends Optuna trials as the study's searcher does (one per
cell, or a fused unit's members, each config naming its trial)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

optuna = pytest.importorskip("optuna")

from optuna.trial import TrialState  # noqa: E402
from ray.tune.search import Searcher  # noqa: E402

from weightsearch.studies import schema as S  # noqa: E402
from weightsearch.studies.storage import open_storage  # noqa: E402
from weightsearch.sweep.gpu_gate import GpuGate  # noqa: E402
from weightsearch.sweep.gpu_share import GPU_SHARE, GpuShares, TrialResources  # noqa: E402
from weightsearch.sweep.trainable import MEMBER, MEMBER_END, MEMBERS, SUMMARY_JSON  # noqa: E402
from weightsearch.sweep.trial_end import add_running_attrs, finish_trial  # noqa: E402

# (3400 + 600 MiB of CUDA context) x 1.15 = 4,600 MiB a trial: four fit on 18,400 MiB.
MEASURED = {"peak_gpu_mib": 3_000.0, "peak_gpu_reserved_mib": 3_400.0, "gpu_total_mib": 18_400.0}


class Cells(Searcher):
    """Hands out cells of `<study>/rte` (`fused` per trial), each a RUNNING Optuna trial, and
    ends each as the study's searcher does: a member with the row that ends it, a cell with
    its last result."""

    def __init__(self, study: optuna.Study, fused: int = 1) -> None:
        super().__init__(metric="objective", mode="max")
        self.study, self.fused = study, fused
        self.live: dict[str, list[int]] = {}

    def suggest(self, trial_id: str) -> dict[str, Any]:
        cells = [{"central_task": "rte", "cell": f"{trial_id}#{k}",
                  "trial_number": self.study.ask().number} for k in range(self.fused)]
        self.live[trial_id] = [c["trial_number"] for c in cells]
        return cells[0] if self.fused == 1 else {"central_task": "rte", MEMBERS: cells}

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if MEMBER_END in result:
            self._end(self.live[trial_id][result[MEMBER]])

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        for number in self.live.pop(trial_id):
            if self._trial(number).state == TrialState.RUNNING:
                self._end(number)

    def _trial(self, number: int) -> optuna.trial.FrozenTrial:
        return self.study.get_trials()[number]

    def _end(self, number: int) -> None:
        finish_trial(self.study, self._trial(number)._trial_id, TrialState.COMPLETE, 0.7,
                     {"seed": 1})


@pytest.fixture
def storage(tmp_path: Path):
    return open_storage(f"sqlite:///{tmp_path / 'gate.db'}")


def _gate(storage, fused: int = 1, auto: bool = True, gpu: float = 0.0, gpus: float = 1.0,
          most: int = 8) -> tuple[GpuGate, optuna.Study, list[str]]:
    study = optuna.create_study(study_name="packed/rte", storage=storage, direction="maximize")
    told: list[str] = []
    shares = GpuShares(storage.engine, "packed", told.append) if auto else None
    gate = GpuGate(Cells(study, fused), most, gpu=gpu, gpus=gpus, shares=shares,
                   studies={"rte": study}, tell=told.append)
    return gate, study, told


def _summary(**extra: Any) -> str:
    return json.dumps({"best": {}, "history": [], "finetuned": {}, **extra})


def test_the_first_trial_measures_alone_and_the_next_ones_share(storage) -> None:
    gate, study, told = _gate(storage)
    first = gate.suggest("t1")
    assert first[GPU_SHARE] == 1.0 and TrialResources(1.0)(first) == {"cpu": 1.0, "gpu": 1.0}
    assert gate.suggest("t2") is None  # one GPU, held whole: nothing more is created
    gate.on_trial_complete("t1", {SUMMARY_JSON: _summary(**MEASURED), "objective": 0.7})
    (done,) = study.get_trials()
    assert done.state == TrialState.COMPLETE
    assert {k: done.user_attrs[k] for k in (S.T_GPU_SHARE, *S.GPU_MEASURES)} == {
        S.T_GPU_SHARE: 1.0, **MEASURED}
    # The measurement is in the database: the next trials ask for a quarter, four at once.
    shares = [gate.suggest(f"t{i}") for i in range(2, 7)]
    assert [s[GPU_SHARE] for s in shares[:4]] == [0.25] * 4 and shares[4] is None
    assert TrialResources(2.0)(shares[0]) == {"cpu": 2.0, "gpu": 0.25}
    running = [t for t in study.get_trials() if t.state == TrialState.RUNNING]
    assert [t.user_attrs[S.T_GPU_SHARE] for t in running] == [0.25] * 4
    assert told == []


def test_another_drivers_measurement_sizes_this_drivers_trials(storage) -> None:
    gate, _, _ = _gate(storage)
    other = optuna.load_study(study_name="packed/rte", storage=storage)
    other.add_trial(optuna.trial.create_trial(state=TrialState.COMPLETE, value=0.6,
                                              user_attrs=MEASURED))
    assert gate.suggest("t1")[GPU_SHARE] == 0.25


def test_a_fused_units_members_record_the_process_peak(storage) -> None:
    gate, study, _ = _gate(storage, fused=3)
    unit = gate.suggest("t1")
    assert unit[GPU_SHARE] == 1.0
    for member in range(3):  # each member's end row, before the searcher ends it
        gate.on_trial_result("t1", {MEMBER: member, MEMBER_END: "complete", "objective": 0.7,
                                    SUMMARY_JSON: _summary(**MEASURED, fused_members=3)})
    # Tune hands the last row again with the trial's end: nothing is written twice.
    gate.on_trial_complete("t1", {MEMBER: 2, MEMBER_END: "complete",
                                  SUMMARY_JSON: _summary(**MEASURED)})
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    assert all(t.user_attrs[S.T_PEAK_GPU_RESERVED] == 3_400.0 and
               t.user_attrs[S.T_GPU_SHARE] == 1.0 for t in trials)
    assert gate.suggest("t2")[GPU_SHARE] == 0.25  # the next unit of three cells


def test_a_fixed_share_keeps_its_number_and_the_rounds_limit(storage) -> None:
    gate, study, _ = _gate(storage, auto=False, gpu=0.5, gpus=1.0, most=2)
    assert [gate.suggest(f"t{i}")[GPU_SHARE] for i in (1, 2)] == [0.5, 0.5]
    assert gate.suggest("t3") is None  # the round's concurrency
    gate.on_trial_complete("t1", {SUMMARY_JSON: _summary(**MEASURED)})
    assert gate.suggest("t4")[GPU_SHARE] == 0.5  # a number stays that number
    assert study.get_trials()[0].user_attrs[S.T_PEAK_GPU_RESERVED] == 3_400.0


def test_a_cpu_study_gives_no_share_and_records_none(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 'cpu.db'}")
    gate, study, _ = _gate(storage, auto=False, gpu=0.0, gpus=0.0, most=2)
    config = gate.suggest("t1")
    assert GPU_SHARE not in config and TrialResources(1.0)(config) == {"cpu": 1.0, "gpu": 0.0}
    gate.on_trial_complete("t1", {SUMMARY_JSON: _summary(peak_rss_mib=800.0)})
    (trial,) = study.get_trials()
    assert not set(trial.user_attrs) & {S.T_GPU_SHARE, *S.GPU_MEASURES}


def test_attributes_go_only_onto_running_trials(storage) -> None:
    study = optuna.create_study(study_name="packed/rte", storage=storage)
    trial = study.ask()
    assert add_running_attrs(study, trial.number, {"gpu_share": 0.5, "peak_gpu_mib": 10.0})
    study.tell(trial, 0.5)
    assert not add_running_attrs(study, trial.number, {"gpu_share": 0.25})
    assert study.get_trials()[0].user_attrs == {"gpu_share": 0.5, "peak_gpu_mib": 10.0}


def test_tunes_checkpoint_copy_of_the_gate_opens_no_connection_and_holds_no_url(
        storage, tmp_path: Path) -> None:
    """Tune copies its search algorithm's state at each of its checkpoints and writes it into
    the experiment folder. A copy of the studies would reconnect to the study database each
    time (which stops the driver while the server restarts) and write the database's URL."""
    import pickle

    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    gate, _, _ = _gate(storage)
    gate.suggest("t1")
    connected: list[str] = []

    def count(dbapi_connection: Any, _record: object) -> None:
        # Any engine's new connection (a copy makes its own engine): this test's file only.
        files = [row[2] for row in dbapi_connection.execute("PRAGMA database_list")]
        connected.extend(f for f in files if f.startswith(str(tmp_path)))

    event.listen(Pool, "connect", count)
    try:
        state = gate.get_state()
    finally:
        event.remove(Pool, "connect", count)
    assert not connected
    written = pickle.dumps(state)
    assert str(tmp_path).encode() not in written and b"sqlite" not in written
    assert state["max_concurrent"] == 1 and "t1" in state["live_trials"]
