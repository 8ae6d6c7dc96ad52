"""`inspect` shows the GPU share each trial had and the peak it measured, and nothing of the
kind for a study trained on CPUs (a real SQLite study database, written as a launch writes it)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest

optuna = pytest.importorskip("optuna")

from optuna.distributions import FloatDistribution  # noqa: E402
from optuna.trial import TrialState, create_trial  # noqa: E402

from weightsearch.cli import main  # noqa: E402
from weightsearch.studies import schema as S  # noqa: E402
from weightsearch.studies.storage import open_storage  # noqa: E402


def _study(storage, name: str, trials: list[tuple[float, int, dict]]) -> None:
    study = optuna.create_study(study_name=f"{name}/rte", storage=storage, direction="maximize")
    for key, value in {S.A_STUDY: name, S.A_CENTRAL: "rte", S.A_SOURCE: S.SOURCE_SWEEP,
                       S.A_PRIMARY: "accuracy", S.A_TASK_TYPE: "classification"}.items():
        study.set_user_attr(key, value)
    for weight, seed, attrs in trials:
        study.add_trial(create_trial(
            state=TrialState.COMPLETE, value=0.6 + weight / 100,
            params={S.PARAM: weight}, distributions={S.PARAM: FloatDistribution(1, 15)},
            user_attrs={S.T_SEED: seed, S.T_CELL: S.cell_key(weight, seed),
                        S.T_METRICS: {"rte": {"accuracy": 0.6 + weight / 100}}, **attrs}))


@pytest.fixture(scope="module")
def url(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('gpu') / 'studies.db'}"
    storage = open_storage(url)
    _study(storage, "packed", [
        (1.0, 1, {S.T_GPU_SHARE: 1.0, S.T_PEAK_GPU: 3_000.0, S.T_PEAK_GPU_RESERVED: 3_400.0,
                  S.T_GPU_TOTAL: 18_400.0}),
        (9.0, 1, {S.T_GPU_SHARE: 0.25, S.T_PEAK_GPU_RESERVED: 3_350.5}),
        (15.0, 1, {}),  # launched before the share was recorded
    ])
    _study(storage, "cpu", [(1.0, 1, {}), (9.0, 1, {})])
    return url


def test_the_share_and_peak_of_each_trial(url: str, capsys) -> None:
    assert main(["inspect", "packed", "--storage", url, "--format", "csv"]) == 0
    cells = pd.read_csv(io.StringIO(capsys.readouterr().out))
    got = {r.central_weight: (r.gpu_share, r.gpu_peak_mib) for r in cells.itertuples()}
    assert got[1.0] == (1.0, 3_400.0) and got[9.0] == (0.25, 3_350.5)
    assert pd.isna(got[15.0][0]) and pd.isna(got[15.0][1])

    assert main(["inspect", "packed", "--storage", url]) == 0
    table = capsys.readouterr().out
    header, *rows = table.split("best weight")[0].splitlines()[1:5]
    assert "gpu_share" in header and "gpu_peak_mib" in header
    assert "0.25" in rows[1] and "3350.5" in rows[1]

    assert main(["inspect", "packed", "--storage", url, "--format", "json"]) == 0
    (rte,) = json.loads(capsys.readouterr().out)["central_tasks"]
    assert [(c["gpu_share"], c["gpu_peak_mib"]) for c in rte["cells"]] == [
        (1.0, 3_400.0), (0.25, 3_350.5), (None, None)]


def test_a_cpu_study_has_no_gpu_columns(url: str, capsys, tmp_path: Path) -> None:
    for fmt in ("csv", "table", "json"):
        assert main(["inspect", "cpu", "--storage", url, "--format", fmt]) == 0
        assert "gpu_" not in capsys.readouterr().out
