"""`resources.gpu: auto`: the share of a GPU from measured memory (`sweep.gpu_share`), the study
file's rule, and the gate that hands trials their share and records it (`sweep.gpu_gate`), on a
real SQLite study database."""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import Any

import pytest

optuna = pytest.importorskip("optuna")

from optuna.trial import TrialState  # noqa: E402

from weightsearch.core.errors import ConfigError  # noqa: E402
from weightsearch.studies import schema as S  # noqa: E402
from weightsearch.studies.storage import open_storage  # noqa: E402
from weightsearch.sweep.gpu_share import (  # noqa: E402
    CACHE_S,
    CUDA_CONTEXT_MIB,
    GPU_SHARE,
    SAFETY_MARGIN,
    GpuShares,
    TrialResources,
    gpu_fraction,
    measured,
    measurements,
)
from weightsearch.sweep.spec import load_study_spec  # noqa: E402


def _card_for(peak: float, k: float) -> float:
    """The card size on which exactly k trials of `peak` MiB fit."""
    return (peak + CUDA_CONTEXT_MIB) * (1 + SAFETY_MARGIN) * k


# --- the pure fraction --------------------------------------------------------------------
def test_no_measurement_asks_for_a_whole_gpu() -> None:
    assert gpu_fraction([], []) == 1.0
    assert gpu_fraction([], [81_559]) == 1.0
    assert gpu_fraction([3_000], []) == 1.0  # no card size: nothing to divide
    assert gpu_fraction([math.nan, -1, True], [81_559]) == 1.0  # none of them is a peak


@pytest.mark.parametrize(("peak", "card", "share"), [
    (3_400, 18_400, 0.25),      # (3400 + 600) * 1.15 = 4600: four fit exactly
    (3_400, 18_399, 0.3333),    # just short of four: three, 1/3 floored to Ray's 1e-4 step
    (3_400, 9_200, 0.5),
    (3_400, 9_199, 1.0),        # not two: a whole GPU
    (3_400, 4_000, 1.0),        # not even one fits: at most a whole GPU
    (10_000, 81_559, 0.1666),   # an 80 GB card, 10 GiB reserved: six (1/6 floored)
    (400, 46_000, 0.025),       # 1,150 MiB per trial: forty
])
def test_the_share_rounds_up_to_one_kth(peak: float, card: float, share: float) -> None:
    assert gpu_fraction([peak], [card]) == share


def test_the_largest_peak_and_the_smallest_card_decide() -> None:
    assert gpu_fraction([1_000, 3_400, 2_000], [18_400]) == 0.25
    assert gpu_fraction([3_400], [40_000, 18_400, 81_559]) == 0.25  # mixed cards


def test_k_shares_never_add_up_to_more_than_one_gpu() -> None:
    for k in range(1, 200):
        share = gpu_fraction([1_000], [_card_for(1_000, k) + 1e-6])
        assert share == (1.0 if k == 1 else math.floor(10_000 / k) / 10_000)
        assert k * share <= 1.0 and (k + 1) * share > 1.0 - k * 1e-4


def test_measurements_take_the_most_of_a_runs_stages() -> None:
    summary = {"peak_rss_mib": 900.0, "peak_gpu_mib": 2_000.0, "peak_gpu_reserved_mib": 2_500.0,
               "gpu_total_mib": 81_559.0,
               "finetuned": {"rte": {"peak_gpu_mib": 2_100.0, "peak_gpu_reserved_mib": 3_000.0,
                                     "gpu_total_mib": 81_559.0}}}
    assert measurements(summary) == {S.T_PEAK_GPU: 2_100.0, S.T_PEAK_GPU_RESERVED: 3_000.0,
                                     S.T_GPU_TOTAL: 81_559.0}
    assert measurements({"peak_rss_mib": 900.0, "finetuned": {}}) == {}  # a CPU run


def test_trial_resources_read_the_share_from_the_config_and_pickle_plainly() -> None:
    from ray import cloudpickle

    resources = pickle.loads(cloudpickle.dumps(TrialResources(2.0)))
    assert resources({GPU_SHARE: 0.25, "cell": "9|1"}) == {"cpu": 2.0, "gpu": 0.25}
    assert resources({"cell": "9|1"}) == {"cpu": 2.0, "gpu": 0.0}  # a CPU study


# --- the study file -----------------------------------------------------------------------
@pytest.fixture
def base(sample_data_dir: Path, tmp_path: Path) -> dict:
    return {"study": "unit", "workdir": str(tmp_path / "runs"),
            "train": {"data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc"], "epochs": 1}}


def test_gpu_auto_is_accepted_and_stored_as_written(base: dict) -> None:
    spec = load_study_spec({**base, "resources": {"cpu": 2, "gpu": "auto"}})
    assert spec.resources.auto_gpu and spec.resources.cpu == 2
    assert spec.to_dict()["resources"] == {"cpu": 2.0, "gpu": "auto"}
    assert load_study_spec(spec.to_dict()).digest() == spec.digest()
    plain = load_study_spec({**base, "resources": {"cpu": 1, "gpu": 0.5}})
    assert plain.resources.gpu == 0.5 and not plain.resources.auto_gpu
    assert load_study_spec(base).resources.gpu == 0  # the default: CPUs only


@pytest.mark.parametrize("gpu", ["half", "", True, [1]])
def test_anything_else_not_a_number_is_refused_with_the_fix(base: dict, gpu: Any) -> None:
    with pytest.raises(ConfigError) as info:
        load_study_spec({**base, "resources": {"gpu": gpu}})
    (problem,) = info.value.problems
    assert problem.startswith(f"resources.gpu: {gpu!r} is not a number of GPUs; write auto")


# --- the study database -------------------------------------------------------------------
@pytest.fixture
def storage(tmp_path: Path):
    return open_storage(f"sqlite:///{tmp_path / 'gpu.db'}")


def _trial(storage, name: str, state: TrialState = TrialState.COMPLETE, **attrs: Any) -> None:
    study = optuna.create_study(study_name=name, storage=storage, load_if_exists=True)
    study.add_trial(optuna.trial.create_trial(
        state=state, value=0.5 if state == TrialState.COMPLETE else None,
        user_attrs=attrs))


def test_measured_reads_the_finished_trials_of_every_central_task(storage) -> None:
    _trial(storage, "s_1/rte", peak_gpu_reserved_mib=3_400.0, gpu_total_mib=18_400.0)
    _trial(storage, "s_1/mrpc", TrialState.FAIL, peak_gpu_reserved_mib=4_000.0,
           gpu_total_mib=40_000.0)
    _trial(storage, "s_1/mrpc", seed=1)  # a CPU trial: nothing measured
    # Not this study's: another study, one whose name `s_1` matches as a LIKE pattern
    # (`_` is a wildcard there), and a trial still running.
    _trial(storage, "other/rte", peak_gpu_reserved_mib=70_000.0, gpu_total_mib=16_000.0)
    _trial(storage, "sx1/rte", peak_gpu_reserved_mib=70_000.0, gpu_total_mib=16_000.0)
    _trial(storage, "s_1/rte", TrialState.RUNNING, peak_gpu_reserved_mib=70_000.0)
    peaks, totals = measured(storage.engine, "s_1")
    assert sorted(peaks) == [3_400.0, 4_000.0] and sorted(totals) == [18_400.0, 40_000.0]
    assert gpu_fraction(peaks, totals) == 0.3333  # 4,000 MiB on the 18,400 MiB card


def test_shares_are_cached_forgotten_and_never_crash(storage, tmp_path: Path) -> None:
    told: list[str] = []
    shares = GpuShares(storage.engine, "s", told.append)
    assert shares.current() == 1.0  # nothing measured: the first trial measures alone
    _trial(storage, "s/rte", peak_gpu_reserved_mib=3_400.0, gpu_total_mib=18_400.0)
    assert shares.current() == 1.0  # read less than CACHE_S ago
    assert CACHE_S >= 1
    shares.forget()  # a trial ended
    assert shares.current() == 0.25
    from sqlalchemy import create_engine

    broken = GpuShares(create_engine(f"sqlite:///{tmp_path / 'no-such-dir' / 'x.db'}"), "s",
                       told.append)
    assert broken.current() == 1.0 and broken.current() == 1.0
    broken.forget()
    assert broken.current() == 1.0
    assert len(told) == 1 and "resources.gpu: auto could not read" in told[0]


# --- on a CUDA GPU: what a run reports ----------------------------------------------------
def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
def test_a_cuda_run_reports_what_packing_needs(sample_data_dir, tiny_encoder, tmp_path) -> None:
    """A tiny run on CUDA: its result carries the reserved peak and the card's size, and the
    share they give fits the card (the trainer never imports the sweep: read here)."""
    import torch

    from tests.helpers import train_tiny_run

    run = train_tiny_run(sample_data_dir, tiny_encoder, tmp_path / "run", device="cuda")
    extra = run.result.extra
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / 2**20
    assert 0 < extra["peak_gpu_mib"] <= extra["peak_gpu_reserved_mib"] < total
    assert extra["gpu_total_mib"] == total
    got = measurements(run.result.to_dict())
    assert got[S.T_PEAK_GPU_RESERVED] == extra["peak_gpu_reserved_mib"]
    share = gpu_fraction([got[S.T_PEAK_GPU_RESERVED]], [got[S.T_GPU_TOTAL]])
    needed = (got[S.T_PEAK_GPU_RESERVED] + CUDA_CONTEXT_MIB) * (1 + SAFETY_MARGIN)
    assert share < 1.0 and math.floor(1 / share) * needed <= total  # several tiny runs fit
