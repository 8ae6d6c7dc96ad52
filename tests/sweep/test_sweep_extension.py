"""Growing a stored grid study with more seeds, weights or ladder sizes, and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers import ray_temp_dir, two_cell_study_file
from weightsearch.sweep.extension import extension_problem
from weightsearch.sweep.spec import load_study_spec


@pytest.fixture
def ladder(sample_data_dir: Path) -> dict:
    return {
        "study": "grow",
        "train": {"data_dir": str(sample_data_dir), "epochs": 1, "max_train_examples": 40,
                  "subsample": "nested",
                  "tasks": [{"name": "rte_50", "preset": "rte", "max_train_examples": 50},
                            "mrpc", "stsb"]},
        "central_tasks": ["rte_50"],
        "aux_tasks": ["mrpc", "stsb"],
        "weights": [1, 9],
        "seeds": [1, 2],
    }


def _problem(old: dict, new: dict, central: str = "rte_50") -> str | None:
    return extension_problem(load_study_spec(old), load_study_spec(new), central)


def _with(raw: dict, **changes) -> dict:
    return {**raw, **changes}


def _train(raw: dict, **changes) -> dict:
    return {**raw, "train": {**raw["train"], **changes}}


def test_more_seeds_weights_and_sizes_extend_a_study(ladder: dict) -> None:
    bigger = _train(ladder, tasks=[*ladder["train"]["tasks"],
                                   {"name": "rte_200", "preset": "rte",
                                    "max_train_examples": 200}])
    grown = _with(bigger, central_tasks=["rte_50", "rte_200"], weights=[1, 6, 9],
                  seeds=[1, 2, 3])
    assert _problem(ladder, grown) is None
    # Where and how fast a trial runs is not what it learns.
    assert _problem(ladder, _train(ladder, num_threads=4, device="cpu", log_every=7)) is None


@pytest.mark.parametrize(("change", "needle"), [
    (lambda r: _train(r, lr=1e-3), "cell w=1 would train differently (changed: lr)"),
    # A checkpoint does not resume under another eval batch size: not an execution setting.
    (lambda r: _train(r, eval_batch_size=64), "changed: eval_batch_size"),
    (lambda r: _with(r, seeds=[2, 3]), "it drops seeds 1"),
    (lambda r: _with(r, weights=[9, 12]), "drops weighting.central_weight value(s) 1.0"),
    (lambda r: _with(r, aux_tasks=["mrpc"]), "would train differently (changed: tasks)"),
    (lambda r: _train(r, max_train_examples=41), "changed: max_train_examples"),
    (lambda r: _with(r, weights={"low": 1, "high": 15, "n_trials": 4}),
     "only a grid search can be extended"),
    (lambda r: _with(r, scheduler="asha"), "its scheduler changed"),
])
def test_changes_to_what_old_cells_learn_are_not_extensions(ladder: dict, change,
                                                            needle: str) -> None:
    problem = _problem(ladder, change(ladder))
    assert problem is not None and needle in problem


@pytest.mark.integration
def test_a_launch_with_more_seeds_trains_only_the_new_cells(
    tiny_encoder: str, sample_data_dir: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    import optuna
    import ray

    from weightsearch.studies import schema as S
    from weightsearch.studies.reading import open_quiet
    from weightsearch.sweep.launch import launch, resume

    url = f"sqlite:///{tmp_path / 'studies.db'}"
    path = two_cell_study_file(tmp_path, "grow", tiny_encoder, sample_data_dir)
    raw = yaml.safe_load(path.read_text())
    monkeypatch.setenv("RAY_TMPDIR", ray_temp_dir())
    try:
        first = launch(load_study_spec({**raw, "central_tasks": ["rte"]}), url, progress=False)
        assert first.ran == 2 and first.finished
        grown = load_study_spec({**raw, "central_tasks": ["rte"], "seeds": [1, 2]})
        second = launch(grown, url, progress=False)
        assert second.ran == 2 and second.finished and second.complete == 4
        assert "study grow/rte extended (changed: seeds)" in capsys.readouterr().err
        study = optuna.load_study(study_name="grow/rte", storage=open_quiet(url))
        assert study.user_attrs[S.A_DIGEST] == grown.digest()
        assert sorted((t.params[S.PARAM], t.user_attrs[S.T_SEED])
                      for t in study.get_trials()) == [(1, 1), (1, 2), (9, 1), (9, 2)]
        again = resume("grow", url, progress=False)  # the stored file is the grown one
        assert again.ran == 0 and again.complete == again.total == 4
        with pytest.raises(Exception, match="does not extend it: cell w=1 would train"):
            launch(load_study_spec({**raw, "central_tasks": ["rte"], "seeds": [1, 2],
                                    "train": {**raw["train"], "lr": 1e-3}}), url,
                   progress=False)
    finally:
        ray.shutdown()


def test_a_refused_launch_leaves_the_stored_files_alone(tmp_path: Path,
                                                        sample_data_dir: Path) -> None:
    """A launch that would grow one study but is refused on another writes nothing: the grown
    file is stored only once every study of the launch is accepted."""
    import optuna

    from weightsearch.core.errors import ConfigError
    from weightsearch.studies import schema as S
    from weightsearch.studies.storage import open_storage
    from weightsearch.sweep.study_db import Central, create_studies

    url = f"sqlite:///{tmp_path / 's.db'}"
    storage = open_storage(url)
    train = {"data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc"], "epochs": 1}
    base = {"study": "grow", "train": train, "weights": [1, 9]}
    v1 = load_study_spec({**base, "central_tasks": ["rte"]})
    other = load_study_spec({**base, "central_tasks": ["mrpc"], "weights": [3]})
    grown = load_study_spec({**base, "central_tasks": ["rte", "mrpc"], "weights": [1, 9, 12]})

    def centrals(spec, names):
        attrs = {S.A_PRIMARY: "accuracy", S.A_DIGEST: spec.digest(), S.A_SPEC: spec.to_dict(),
                 S.A_SOURCE: S.SOURCE_SWEEP}
        return [Central(c, None, {}, dict(attrs, **{S.A_CENTRAL: c})) for c in names]

    existing = create_studies(v1, storage, url, centrals(v1, ["rte"]), {})
    create_studies(other, storage, url, centrals(other, ["mrpc"]), {})
    with pytest.raises(ConfigError, match="grow/mrpc"):  # mrpc's weight 3 would be dropped
        create_studies(grown, storage, url, centrals(grown, ["rte", "mrpc"]), existing)
    rte = optuna.load_study(study_name="grow/rte", storage=storage)
    assert rte.user_attrs[S.A_DIGEST] == v1.digest()
    # Accepted, the grown file is stored.
    create_studies(grown, storage, url, centrals(grown, ["rte"]), existing)
    assert optuna.load_study(study_name="grow/rte", storage=storage).user_attrs[
        S.A_DIGEST] == grown.digest()
