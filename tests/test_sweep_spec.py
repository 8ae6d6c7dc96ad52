"""Study-file validation: every problem at once, no Ray, no model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sweep.spec import GridSearch, GuidedSearch, load_study_spec
from weightsearch.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def base(sample_data_dir: Path) -> dict:
    return {
        "study": "unit",
        "train": {"data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc", "stsb"],
                  "epochs": 1},
    }


def problems_of(raw: dict, overrides: tuple[str, ...] = ()) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_study_spec(raw, overrides=overrides)
    return info.value.problems


def test_defaults(base: dict) -> None:
    spec = load_study_spec(base)
    assert spec.central_tasks == ("rte", "mrpc", "stsb")
    assert spec.search == GridSearch((1.0, 3.0, 6.0, 9.0, 12.0, 15.0))
    assert spec.seeds == (1,)
    assert spec.resources.cpu == 1 and spec.resources.gpu == 0
    assert spec.scheduler.name == "fifo" and spec.max_failures == 1
    assert Path(spec.workdir).is_absolute() and Path(spec.train["data_dir"]).is_absolute()


def test_canonical_form_round_trips(base: dict) -> None:
    spec = load_study_spec({**base, "weights": [9, 1], "seeds": [2, 1], "scheduler": "asha"})
    again = load_study_spec(spec.to_dict())
    assert again.digest() == spec.digest()
    assert spec.digest() != load_study_spec(base).digest()


def test_run_mapping_sets_the_cell(base: dict) -> None:
    spec = load_study_spec(base)
    raw = spec.run_mapping("mrpc", 9.0, 3, "/tmp/x")
    assert raw["central_task"] == "mrpc" and raw["seed"] == 3 and raw["output_dir"] == "/tmp/x"
    assert raw["weighting"] == {"scheme": "siwlm", "central_weight": 9.0}
    assert spec.trial_dir("mrpc", 9.0, 3).endswith("unit/mrpc/w9_s3")


def test_yaml_text_and_overrides(sample_data_dir: Path) -> None:
    text = f"study: t\ntrain:\n  data_dir: {sample_data_dir}\n  tasks: [rte, mrpc]\n"
    spec = load_study_spec(text, overrides=("weights=[3, 12]", "train.epochs=2", "seeds=[4]"))
    assert spec.search == GridSearch((3.0, 12.0)) and spec.seeds == (4,)
    assert spec.train["epochs"] == 2


def test_guided_search(base: dict) -> None:
    spec = load_study_spec({**base, "weights": {"low": 1, "high": 15, "n_trials": 4, "step": 1},
                            "warm_start": [9]})
    assert spec.search == GuidedSearch(1.0, 15.0, 4, "tpe", 1.0)
    assert spec.warm_start == (9.0,)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"weights": [0]}, "weights[0]: 0 is out of range"),
        ({"weights": [16]}, "weights[0]: 16 is out of range"),
        ({"weights": ["abc"]}, "weights[0]: 'abc' is not a number"),
        ({"weights": [float("nan")]}, "weights[0]: nan is not a number"),
        ({"weights": [True]}, "weights[0]: True is not a number"),
        ({"weights": []}, "weights: the grid is empty"),
        ({"weights": [3, 3]}, "weights[1]: 3 is listed twice"),
        ({"weights": {"low": 9, "high": 3, "n_trials": 2}}, "weights: low (9) must be below"),
        ({"weights": {"n_trials": 0}}, "weights.n_trials"),
        ({"central_tasks": ["cola"]}, "central_tasks[0]: 'cola' is not among train.tasks"),
        ({"study": "a/b"}, "study: 'a/b' is not a valid name"),
        ({"seeds": [1, 1]}, "seeds[1]: 1 is listed twice"),
        ({"seeds": [-1]}, "seeds[0]"),
        ({"resources": {"cpu": 0}}, "resources.cpu"),
        ({"resources": {"tpu": 1}}, "resources.tpu: unknown resource"),
        ({"scheduler": "hyperband"}, "scheduler: 'hyperband' is not one of fifo, asha"),
        ({"max_failures": -1}, "max_failures"),
        ({"max_concurrent": 0}, "max_concurrent"),
        ({"warm_start": [9]}, "warm_start: applies to a guided search"),
        ({"bogus": 1}, "bogus: unknown setting"),
    ],
)
def test_each_problem_is_named(base: dict, change: dict, expected: str) -> None:
    found = problems_of({**base, **change})
    assert any(expected in p for p in found), found


def test_all_problems_at_once(base: dict) -> None:
    raw = {**base, "weights": [0, "x"], "seeds": [], "bogus": True,
           "train": {**base["train"], "tasks": ["rte", "rtee"], "seed": 3, "epochs": 0}}
    found = problems_of(raw)
    for expected in ("weights[0]", "weights[1]", "seeds:", "bogus:", "train.seed:",
                     "train.tasks[1]", "train.epochs"):
        assert any(p.startswith(expected) for p in found), (expected, found)


def test_train_problems_are_prefixed(base: dict) -> None:
    found = problems_of({**base, "train": {**base["train"], "data_dir": "/no/such/dir",
                                            "weighting": {"scheme": "equal"}}})
    assert any(p.startswith("train.data_dir:") for p in found), found
    assert any(p.startswith("train.weighting:") for p in found), found


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_study_spec(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("study: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_study_spec(bad)


def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path: Path, sample_data_dir: Path) -> None:
    study = tmp_path / "study.yaml"
    db = tmp_path / "s.db"
    study.write_text(f"study: t\nstorage: sqlite:///{db}\ntrain:\n  data_dir: {sample_data_dir}\n"
                     "  tasks: [rte]\nweights: [0, 16]\n")
    proc = subprocess.run([sys.executable, "-m", "weightsearch.cli", "launch", str(study)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "weights[0]" in proc.stderr and "weights[1]" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not db.exists()
    assert "ray" not in proc.stderr.lower()


def _study_file(tmp_path: Path, sample_data_dir: Path) -> Path:
    study = tmp_path / "study.yaml"
    study.write_text(f"study: t\ntrain:\n  data_dir: {sample_data_dir}\n  tasks: [rte, mrpc]\n"
                     "weights: [1, 9]\n")
    return study


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--ray-address", "127.0.0.1:9"], "no Ray cluster answers at 127.0.0.1:9"),
        (["--ray-address", "nonsense"], "is not host:port"),
        (["--storage", "sqlite:////no/such/folder/x.db"], "folder /no/such/folder does not exist"),
    ],
)
def test_cli_environment_errors_exit_2(
    tmp_path: Path, sample_data_dir: Path, capsys: pytest.CaptureFixture, args: list[str],
    expected: str,
) -> None:
    from weightsearch.cli import main

    db = tmp_path / "s.db"
    argv = ["launch", str(_study_file(tmp_path, sample_data_dir)), "--storage", f"sqlite:///{db}"]
    assert main([*argv, *args]) == 2
    err = capsys.readouterr().err
    assert expected in err, err
    if db.exists():  # opened, but nothing written
        import optuna

        assert optuna.get_all_study_names(f"sqlite:///{db}") == []


def test_cli_resume_unknown_study(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from weightsearch.cli import main

    url = f"sqlite:///{tmp_path / 's.db'}"
    assert main(["resume", "ghost", "--storage", url]) == 2
    err = capsys.readouterr().err
    assert f"no study named 'ghost' in {url}" in err
    assert f"weightsearch inspect --storage {url}" in err


def test_warm_start_from_the_recommender(tmp_path, sample_data_dir):
    from studies import schema as S
    from sweep.launch import _Central, _warm_starts

    train = {"data_dir": str(sample_data_dir), "tasks": ["rte", "sst2"], "epochs": 1}
    spec = load_study_spec({
        "study": "warm", "train": train, "central_tasks": ["rte", "sst2"],
        "weights": {"low": 1, "high": 15, "n_trials": 3, "step": 1}, "warm_start": "recommend",
    })
    assert spec.warm_recommend and spec.to_dict()["warm_start"] == "recommend"
    centrals = [
        _Central(name, None, {}, {S.A_TRAIN_SIZE: size, S.A_TASK_TYPE: "classification"})
        for name, size in (("rte", 2490), ("sst2", 67349))
    ]
    warm = _warm_starts(spec, centrals, f"sqlite:///{tmp_path / 'empty.db'}")
    # The paper's prior: small tasks want 9 or more, large ones less; snapped to the step.
    assert warm["rte"][0] >= 9 and warm["sst2"][0] < warm["rte"][0]
    assert all(w[0] == int(w[0]) and 1 <= w[0] <= 15 for w in warm.values())
    with pytest.raises(ConfigError, match="warm_start"):
        load_study_spec({"study": "warm", "train": train, "warm_start": "recommend"})
