"""Study-file validation: every problem at once, no Ray, no model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import SAMPLE
from weightsearch.core.errors import ConfigError
from weightsearch.sweep.space import CENTRAL_WEIGHT
from weightsearch.sweep.spec import load_study_spec


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
    assert spec.search.strategy == "grid" and spec.space.paths == (CENTRAL_WEIGHT,)
    assert spec.space.dims[0].values == (1.0, 2.0, 4.0, 8.0, 15.0)  # log-spaced
    assert spec.seeds == (1,)
    assert spec.resources.cpu == 1 and spec.resources.gpu == 0
    assert spec.scheduler.name == "fifo" and spec.max_failures == 1
    assert Path(spec.workdir).is_absolute() and Path(spec.train["data_dir"]).is_absolute()


def test_canonical_form_round_trips(base: dict) -> None:
    spec = load_study_spec({**base, "weights": [9, 1], "seeds": [2, 1], "scheduler": "asha"})
    again = load_study_spec(spec.to_dict())
    assert again.digest() == spec.digest()
    assert spec.digest() != load_study_spec(base).digest()


def test_for_cell_builds_the_cell(base: dict) -> None:
    spec = load_study_spec(base)
    point = {CENTRAL_WEIGHT: 9.0}
    raw = spec.cell_mapping("mrpc", point, 3, "/tmp/x")
    assert raw["central_task"] == "mrpc" and raw["seed"] == 3 and raw["output_dir"] == "/tmp/x"
    assert raw["weighting"] == {"scheme": "siwlm", "central_weight": 9.0}
    cfg = spec.for_cell("mrpc", point, 3, "/tmp/x")
    assert cfg.central_task == "mrpc" and cfg.weighting.central_weight == 9.0 and cfg.seed == 3
    assert spec.trial_dir("mrpc", point, 3).endswith("unit/mrpc/w9_s3")


def test_yaml_text_and_overrides(sample_data_dir: Path) -> None:
    text = f"study: t\ntrain:\n  data_dir: {sample_data_dir}\n  tasks: [rte, mrpc]\n"
    spec = load_study_spec(text, overrides=("weights=[3, 12]", "train.epochs=2", "seeds=[4]"))
    assert spec.space.dims[0].values == (3.0, 12.0) and spec.seeds == (4,)
    assert spec.train["epochs"] == 2


def test_guided_search(base: dict) -> None:
    spec = load_study_spec({**base, "weights": {"low": 1, "high": 15, "n_trials": 4, "step": 1},
                            "warm_start": [9]})
    dim = spec.space.dims[0]
    assert spec.search.strategy == "guided" and spec.search.settings.n_trials == 4
    assert (dim.low, dim.high, dim.step, spec.search.settings.sampler) == (1.0, 15.0, 1.0, "tpe")
    assert spec.warm_start == ({CENTRAL_WEIGHT: 9.0},)
    assert spec.to_dict()["weights"] == {"low": 1.0, "high": 15.0, "n_trials": 4,
                                         "sampler": "tpe", "step": 1.0}
    assert spec.to_dict()["warm_start"] == [9.0]


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


@pytest.mark.parametrize(("change", "expected"), [
    ({"encoder": "bert-base-uncased"}, "train.encoder: 'bert-base-uncased' is neither a local "
                                       "folder nor a model in this machine's Hugging Face cache"),
    ({"lr": 1e39}, "train.lr: 1e+39 is beyond what a float32"),
    ({"batch_size": 2**64}, "train.batch_size: 18446744073709551616 is beyond what a 64-bit"),
    ({"epochs": 10**400}, "train.epochs: a 401-digit number is beyond what a 64-bit"),
])
def test_what_would_fail_every_trial_is_refused_up_front(base: dict, change: dict,
                                                         expected: str) -> None:
    """Found before Ray starts, not as every trial failing inside it."""
    found = problems_of({**base, "train": {**base["train"], **change}})
    assert any(expected in p for p in found), found


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
        (["--ray-address", "Ray://127.0.0.1:10001"], "is a Ray Client address"),
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
    from weightsearch.studies import schema as S
    from weightsearch.sweep.launch import first_points
    from weightsearch.sweep.study_db import Central

    train = {"data_dir": str(sample_data_dir), "tasks": ["rte", "sst2"], "epochs": 1}
    spec = load_study_spec({
        "study": "warm", "train": train, "central_tasks": ["rte", "sst2"],
        "weights": {"low": 1, "high": 15, "n_trials": 3, "step": 1}, "warm_start": "recommend",
    })
    assert spec.warm_recommend and spec.to_dict()["warm_start"] == "recommend"
    centrals = [
        Central(name, None, {}, {S.A_TRAIN_SIZE: size, S.A_TASK_TYPE: "classification"})
        for name, size in (("rte", 2490), ("sst2", 67349))
    ]
    warm = first_points(spec, centrals, f"sqlite:///{tmp_path / 'empty.db'}")
    weights = {c: points[0][CENTRAL_WEIGHT] for c, points in warm.items()}
    # The paper's prior: small tasks want 9 or more, large ones less; snapped to the step.
    assert weights["rte"] >= 9 and weights["sst2"] < weights["rte"]
    assert all(w == int(w) and 1 <= w <= 15 for w in weights.values())
    with pytest.raises(ConfigError, match="warm_start"):
        load_study_spec({"study": "warm", "train": train, "warm_start": "recommend"})


def test_finetuned_objective_reads_the_train_preset(base: dict) -> None:
    # The siwlm-paper preset turns fine-tuning on; `finetune: null` turns it off again.
    paper = {**base, "train": {**base["train"], "preset": "siwlm-paper"},
             "objective": {"stage": "finetuned"}}
    assert load_study_spec(paper).objective.stage == "finetuned"
    off = {**paper, "train": {**paper["train"], "finetune": None}}
    assert any("turn it on with train.finetune" in p for p in problems_of(off))


@pytest.mark.parametrize(("change", "stopper"), [
    ({"scheduler": "asha"}, "scheduler: asha"),
    ({"search": {"strategy": "halving", "space": {CENTRAL_WEIGHT: [1, 9]}}}, "strategy: halving"),
])
def test_finetuned_objective_refuses_early_stopping(base: dict, change: dict,
                                                    stopper: str) -> None:
    # Early stopping would rank trials by multi-task epoch scores, not the fine-tuned objective.
    raw = {**base, **change, "train": {**base["train"], "epochs": 2, "finetune": {"epochs": 1}},
           "objective": {"stage": "finetuned"}}
    assert any(f"objective.stage: finetuned cannot be combined with {stopper}" in p
               for p in problems_of(raw))
    assert load_study_spec({**raw, "objective": None}).objective.stage == "multitask"


GUIDED_LR = {"strategy": "guided", "n_trials": 2, "space": {"lr": {"low": 1.0e-4,
                                                                  "high": 1.0e-3}}}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"search": {"strategy": "annealing"}}, "search.strategy: 'annealing' is not one of"),
        ({"search": {"space": {"lr": 3}}}, "search.space.lr: expected a list of values"),
        ({"search": {"space": {"seed": [1, 2]}}}, "search.space.seed: seed is set per cell"),
        ({"search": {"space": {"bad path!": [1]}}}, "not a run-config path"),
        ({"search": {"space": {"weighting": [1], CENTRAL_WEIGHT: [1]}}}, "lies inside weighting"),
        ({"search": {"space": {"lr": []}}}, "search.space.lr: the list is empty"),
        ({"search": {"space": {"lr": [None]}}}, "a searched value must be a number"),
        ({"search": {"space": {"lr": [1.0e-4, 1.0e-4]}}}, "search.space.lr[1]: 0.0001 is listed"),
        ({"search": {"space": {"lr": {"low": 1.0e-3, "high": 1.0e-4, "step": 1.0e-4}}}},
         "low (0.001) must be below high"),
        ({"search": {**GUIDED_LR, "space": {"lr": {"low": 0, "high": 1, "log": True}}}},
         "a log range needs low > 0"),
        ({"search": {"space": {"batch_size": {"low": 8, "high": 32.5, "int": True}}}},
         "must be whole numbers"),
        ({"search": {"space": {"lr": {"low": 1.0e-5, "high": 1.0e-3}}}},
         "strategy grid enumerates the space"),
        ({"search": {"strategy": "guided", "n_trials": 9,
                     "space": {"pooling": {"choices": ["mean", "cls"]}}}},
         "holds only 2 distinct points"),
        ({"search": {"strategy": "guided", "n_trials": 2, "sampler": "cmaes",
                     "space": {"pooling": {"choices": ["mean", "cls"]}}}},
         "cmaes samples numbers only"),
        ({"search": {"strategy": "guided", "n_trials": 2, "sampler": "bayes"}},
         "search.sampler: 'bayes' is not one of tpe, gp, random, cmaes"),
        ({"search": {"strategy": "halving", "min_epochs": 1}}, "leaves no epoch to halve over"),
        ({"search": {"strategy": "halving", "reduction_factor": 1}}, "expected a number > 1"),
        ({"search": {"strategy": "halving"}, "scheduler": "asha"}, "asha and strategy halving"),
        ({"search": {"strategy": "forward"}}, "forward selects auxiliary tasks"),
        ({"search": {"space": {"tasks": {"subsets_of": ["qnli"]}}}},
         "subsets_of[0]: 'qnli' is not among train.tasks"),
        ({"search": {"space": {"tasks": {"subsets_of": ["mrpc", "mrpc"]}}}}, "listed twice"),
        ({"search": {"space": {"tasks": ["rte"]}}}, "the task grouping space is written"),
        ({"search": {"space": {"lrr": [1.0e-4]}}}, "train.lrr: unknown setting"),
        ({"search": {"space": {"optimizer": ["adamax", "sgd"]}}},
         "train.optimizer: 'sgd' is not one of adamax, adamw, radam "
         "(at search point optimizer=sgd)"),
        ({"search": {"space": {"sampling.weights.rte": [0.5]}}}, "train.sampling"),
        ({"search": {"space": {"lr": [1.0e-4]}, "n_trials": 3}},
         "search.n_trials: not a setting of strategy grid"),
        ({"weights": [1], "search": {}}, "give either weights"),
        ({"search": {"space": {"pooling": {"choices": ["mean"], "extra": 1}}}},
         "not a setting of a choice"),
        ({"search": GUIDED_LR, "warm_start": "recommend"},
         "does not search weighting.central_weight"),
        ({"search": GUIDED_LR, "warm_start": [{"lr": 5}]}, "warm_start[0]: 5 lies outside"),
        ({"search": GUIDED_LR, "warm_start": [{"pooling": "mean"}]},
         "warm_start[0]: give a value for every searched path"),
        ({"weights": {"low": 1, "high": 4, "n_trials": 5, "step": 1}},
         "weights.n_trials: 5 trials per seed, but the space holds only 4 distinct points"),
    ],
)
def test_hostile_search_settings_are_named(base: dict, change: dict, expected: str) -> None:
    found = problems_of({**base, **change})
    assert any(expected in p for p in found), found


def test_cli_refuses_a_bad_search_with_exit_2_and_writes_nothing(tmp_path: Path,
                                                                 sample_data_dir: Path) -> None:
    study = tmp_path / "study.yaml"
    db = tmp_path / "s.db"
    study.write_text(f"study: t\nstorage: sqlite:///{db}\ntrain:\n  data_dir: {sample_data_dir}\n"
                     "  tasks: [rte, mrpc]\nsearch:\n  strategy: guided\n  n_trials: 3\n"
                     "  space: {tasks: {subsets_of: [mrpc]}}\n")
    proc = subprocess.run([sys.executable, "-m", "weightsearch.cli", "launch", str(study)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "holds only 2 distinct points" in proc.stderr
    assert not db.exists() and not (tmp_path / "weightsearch_runs").exists()


def test_paths_resolve_against_the_study_file(tmp_path: Path, sample_data_dir: Path,
                                              monkeypatch) -> None:
    folder = tmp_path / "studies"
    folder.mkdir()
    (tmp_path / "data").symlink_to(sample_data_dir)
    path = folder / "s.yaml"
    path.write_text("study: rel\ntrain:\n  data_dir: ../data\n  tasks: [rte, mrpc]\n"
                    "workdir: runs\n")
    monkeypatch.chdir("/")
    spec = load_study_spec(path)
    assert spec.train["data_dir"] == str((tmp_path / "data").resolve())
    assert spec.workdir == str(folder / "runs")
    # --set values are typed where the command runs.
    monkeypatch.chdir(tmp_path)
    spec = load_study_spec(path, overrides=["workdir=elsewhere"])
    assert spec.workdir == str(tmp_path / "elsewhere")
    # An MLflow folder too (a server URI stays as it is), whether the file or --set gives it.
    monkeypatch.chdir("/")
    path.write_text("study: rel\ntrain:\n  data_dir: ../data\n  tasks: [rte, mrpc]\n"
                    "  tracking: {mlflow: mlruns}\nworkdir: runs\n")
    assert load_study_spec(path).train["tracking"]["mlflow"] == str(folder / "mlruns")
    monkeypatch.chdir(tmp_path)
    spec = load_study_spec(path, overrides=["train.tracking={mlflow: here}"])
    assert spec.train["tracking"]["mlflow"] == str(tmp_path / "here")
    spec = load_study_spec(path, overrides=["train.tracking={mlflow: 'http://127.0.0.1:5000'}"])
    assert spec.train["tracking"]["mlflow"] == "http://127.0.0.1:5000"


def test_aux_tasks_choose_what_trains_beside_each_central_task(base: dict) -> None:
    tasks = [{"name": "rte_small", "preset": "rte", "max_train_examples": 20}, "rte", "mrpc",
             "stsb"]
    raw = {**base, "train": {**base["train"], "tasks": tasks},
           "central_tasks": ["rte_small", "rte"], "aux_tasks": ["mrpc", "stsb"]}
    spec = load_study_spec(raw)
    assert spec.aux_of("rte_small") == ["mrpc", "stsb"]
    cfg = spec.for_cell("rte_small", {CENTRAL_WEIGHT: 9}, 1, "/tmp/unused")
    assert [t.name for t in cfg.tasks] == ["rte_small", "mrpc", "stsb"]
    assert cfg.task("rte_small").max_train_examples == 20
    # A preset with a cap of its own is still the preset's data (one task to the recommender).
    from weightsearch.trainer.tasks import dataset_name
    assert [dataset_name(t) for t in cfg.tasks] == ["rte", "mrpc", "stsb"]
    assert spec.to_dict()["aux_tasks"] == ["mrpc", "stsb"]
    assert load_study_spec({**spec.to_dict(), "storage": spec.storage}).digest() == spec.digest()
    # Left out: every task trains with every central task, as before.
    assert load_study_spec(base).to_dict()["aux_tasks"] is None
    assert [t.name for t in load_study_spec(base).for_cell(
        "mrpc", {CENTRAL_WEIGHT: 1}, 1, "/tmp/unused").tasks] == ["mrpc", "rte", "stsb"]


@pytest.mark.parametrize(("aux", "needle"), [
    (["qqp"], "aux_tasks[0]: 'qqp' is not among train.tasks"),
    (["mrpc", "mrpc"], "aux_tasks[1]: 'mrpc' is listed twice"),
    ({"a": 1}, "aux_tasks: expected a list of task names"),
    ([3], "aux_tasks: expected a list of task names"),
])
def test_bad_aux_tasks_are_named(base: dict, aux, needle: str) -> None:
    assert any(needle in p for p in problems_of({**base, "aux_tasks": aux}))


def test_aux_tasks_and_a_task_group_exclude_each_other(base: dict) -> None:
    raw = {**base, "aux_tasks": ["mrpc"],
           "search": {"space": {"tasks": {"subsets_of": ["mrpc", "stsb"]}}}}
    assert any("already chooses the auxiliary tasks" in p for p in problems_of(raw))


def test_a_new_study_over_another_databases_runs_is_refused_before_ray(
        tmp_path: Path, sample_data_dir: Path, tiny_encoder: str, capsys) -> None:
    """The same study file launched against a fresh database, its workdir still holding the
    runs the first database knew: refused by name, nothing written, Ray never started."""
    import optuna

    from tests.helpers import two_cell_study_file
    from weightsearch.cli import main

    study = two_cell_study_file(tmp_path, "again", tiny_encoder, sample_data_dir)
    spec = load_study_spec(str(study))
    old_run = Path(spec.trial_dir("rte", {CENTRAL_WEIGHT: 9.0}, 1))  # where a trial trains
    old_run.mkdir(parents=True)
    (old_run / "config.yaml").write_text("lr: 0.1\n")
    db = tmp_path / "fresh.db"
    assert main(["launch", str(study), "--storage", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err
    assert f"workdir: {old_run.parent} already holds 1 run folder(s) (e.g. w9_s1)" in err
    assert "Traceback" not in err and "ray" not in err.lower()
    assert not db.exists() or optuna.get_all_study_names(f"sqlite:///{db}") == []


@pytest.mark.parametrize(("value", "expected"), [
    (0, "fuse_cells: 0: give how many cells one trial trains together"),
    (65, "fuse_cells: 65: give how many cells one trial trains together, a number from 1 to 64"),
    (True, "fuse_cells: True: give how many cells"),
    ("autox", "fuse_cells: 'autox': give how many cells"),
    (2.5, "fuse_cells: 2.5: give how many cells"),
])
def test_fuse_cells_is_a_count_of_cells(base: dict, value, expected: str) -> None:
    assert any(p.startswith(expected) for p in problems_of({**base, "fuse_cells": value}))


def fp32(raw: dict) -> dict:
    return {**raw, "train": {**raw["train"], "precision": "fp32"}}


def test_fuse_cells_with_asha_is_refused(base: dict) -> None:
    [problem] = problems_of({**fp32(base), "fuse_cells": 3, "scheduler": "asha"})
    assert problem.startswith("fuse_cells: ASHA stops whole trials")


@pytest.mark.parametrize("precision", ["bf16", "auto", "fp32", None])
def test_fuse_cells_fuses_at_any_precision(base: dict, precision) -> None:
    """Fused units run bf16 autocast as a trial alone does (the wide model's batched kernels)."""
    train = {**base["train"], **({"precision": precision} if precision else {})}
    assert load_study_spec({**base, "train": train, "fuse_cells": 3}).fuse_cells == 3


def test_fuse_cells_is_how_a_study_trains_not_what_it_learns(base: dict) -> None:
    alone = load_study_spec({**fp32(base), "fuse_cells": False})
    fused = load_study_spec({**fp32(base), "fuse_cells": 6})
    assert alone.fuse_cells == 1 and fused.fuse_cells == 6
    # A study launched before fuse_cells existed keeps its digest; a fused launch records it.
    assert alone.digest() == load_study_spec(fp32(base)).digest()
    assert "fuse_cells" not in alone.to_dict() and fused.to_dict()["fuse_cells"] == 6
    assert load_study_spec(fused.to_dict()).fuse_cells == 6


def test_a_fused_launch_joins_a_study_launched_without(base: dict, tmp_path: Path) -> None:
    """A guided study (which cannot be grown) launched one cell per trial is the same study
    to a launch with fuse_cells: the cells learn the same either way."""
    from weightsearch.studies.storage import open_storage
    from weightsearch.sweep import study_db

    url = f"sqlite:///{tmp_path / 'studies.db'}"
    guided = {**fp32(base), "central_tasks": ["rte"], "workdir": str(tmp_path / "runs"),
              "weights": {"low": 1, "high": 15, "n_trials": 4, "sampler": "tpe", "step": 1}}
    first = load_study_spec(guided)
    centrals = [study_db.describe(first, "rte")]
    study_db.create_studies(first, open_storage(url), url, centrals, {})
    fused = load_study_spec({**guided, "fuse_cells": 4})
    assert list(study_db.existing_studies(fused, open_storage(url), url, centrals)) == ["rte"]
    with pytest.raises(ConfigError, match="different configuration"):  # not any change
        study_db.existing_studies(load_study_spec({**guided, "seeds": [1, 2]}),
                                  open_storage(url), url, centrals)


def test_a_fused_members_end_file_speaks_for_its_own_attempt(tmp_path: Path) -> None:
    """A later attempt starts as a copy of the earlier one's folder: the copied end of a
    failed or stopped member must not end the new attempt before it trains."""
    import json

    from weightsearch.sweep import trainable as T

    (tmp_path / T.MEMBER_END_FILE).write_text(json.dumps({"end": "error", "attempt": 0,
                                                          "error": "x"}))
    assert isinstance(T._earlier_end(str(tmp_path), {"attempt": 0}), T._EarlierError)
    assert T._earlier_end(str(tmp_path), {"attempt": 1}) is None
    (tmp_path / T.MEMBER_END_FILE).write_text(json.dumps({"end": "stint", "attempt": 0}))
    assert isinstance(T._earlier_end(str(tmp_path), {"attempt": 0, "budget": 1}),
                      T._BudgetReached)
    assert T._earlier_end(str(tmp_path), {"attempt": 1, "budget": 2}) is None
    (tmp_path / T.MEMBER_END_FILE).write_text("{not json")
    assert T._earlier_end(str(tmp_path), {"attempt": 0}) is None


@pytest.mark.parametrize("version", ["4", 4.5, None, True])
def test_a_stored_version_that_is_no_format_number_is_named(version, tmp_path):
    """An edited database's stored study file with `version: "4"` raised a TypeError on
    resume; it is the study file's own check now, naming the field."""
    from weightsearch.core.errors import ConfigError
    from weightsearch.sweep.spec import as_launched, load_study_spec

    raw = {"study": "v", "version": version, "train": {"data_dir": str(SAMPLE),
                                                       "tasks": ["rte", "mrpc"], "epochs": 1},
           "central_tasks": ["rte"], "weights": [1, 9], "workdir": str(tmp_path / "runs")}
    with pytest.raises(ConfigError, match="version: "):
        load_study_spec(as_launched(raw))


@pytest.mark.parametrize(("change", "needle"), [
    ({"train": {"tasks": ["rte"]}},
     "central_tasks: rte would train with no auxiliary task, where every searched weight is "
     "one treatment (a loss weight scales the whole loss"),
    ({"aux_tasks": []}, "central_tasks: rte, mrpc, stsb would train with no auxiliary task"),
    ({"train": {"tasks": ["rte"]}, "weight_acts_on": "sampling"},
     "a sampling rate has no other task to share the batches with"),
    ({"train": {"weighting": {"scheme": "siwlm", "variant": "paper", "off_focus": 0}}},
     "off_focus: 0 gives every other batch weight 0, so the central weight reaches no batch"),
])
def test_a_search_of_one_treatment_by_its_settings_is_refused(base: dict, change: dict,
                                                              needle: str) -> None:
    raw = {**base, **change, "train": {**base["train"], **change.get("train", {})}}
    found = problems_of(raw)
    assert any(needle in p and "allow_inert: true" in p for p in found), found
    # The study that means it trains it; and a search of more than the weight is not judged.
    assert load_study_spec({**raw, "allow_inert": True}).allow_inert
    if "weight_acts_on" not in change:
        load_study_spec({**raw, "search": {"space": {"weighting.central_weight": [1, 9],
                                                     "lr": [1e-4, 2e-4]}}})


def test_a_study_stored_before_format_8_keeps_training_on(base: dict) -> None:
    """Before format 8 a grid of one treatment trained with a note: a stored study keeps that
    (its remaining cells train as its first ones), today's studies refuse it by default."""
    from weightsearch.sweep.spec import SPEC_VERSION, as_launched

    stored = load_study_spec(base).to_dict()
    assert stored["version"] == SPEC_VERSION == 8 and "allow_inert" not in stored
    assert load_study_spec(as_launched(stored)).allow_inert is False
    before = load_study_spec(as_launched({**stored, "version": 7}))
    assert before.allow_inert is True
    said = load_study_spec(as_launched({**stored, "version": 7, "allow_inert": False}))
    assert said.allow_inert is False  # a study that said so keeps what it said


def test_the_tasks_a_preset_lists_are_auxiliaries_too(sample_data_dir: Path) -> None:
    """`siwlm-paper` lists the eight GLUE tasks: a study that names none of its own trains each
    central task beside the other seven, so it is no search without auxiliaries."""
    spec = load_study_spec({"study": "paper", "train": {"preset": "siwlm-paper",
                                                       "data_dir": str(sample_data_dir)},
                            "central_tasks": ["rte"], "weights": [1, 9]})
    assert spec.allow_inert is False
    assert len(spec.for_cell("rte", {CENTRAL_WEIGHT: 1.0}, 1, "/tmp/unused").tasks) > 1
