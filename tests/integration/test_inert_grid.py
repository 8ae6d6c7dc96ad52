"""A grid that global clipping makes one treatment: refused before anything is written, from a
probe of the central task's first updates (unless the study sets allow_inert: true); judged
again from the first finished cell, which stops a study whose stored cells show it."""

from __future__ import annotations

from pathlib import Path

import pytest

from weightsearch.core.errors import ConfigError

pytestmark = pytest.mark.integration


def _spec(tmp_path: Path, encoder: str, data: Path, grad_clip: float, weights: list,
          **extra) -> object:
    from weightsearch.sweep.spec import load_study_spec

    return load_study_spec({
        "study": "inert",
        "storage": f"sqlite:///{tmp_path / 'inert.db'}",
        "train": {"encoder": encoder, "data_dir": str(data), "tasks": ["rte", "mrpc"],
                  "epochs": 1, "batch_size": 16, "max_train_examples": 32,
                  "max_eval_examples": 32, "num_threads": 1, "grad_clip": grad_clip,
                  "cache_dir": str(tmp_path / "cache")},
        "central_tasks": ["rte"], "weights": weights, "seeds": [1],
        "resources": {"cpu": 1, "gpu": 0}, "max_concurrent": 1,
        "workdir": str(tmp_path / "runs"), **extra,
    })


def _trials(url: str) -> list:
    import optuna

    return optuna.load_study(study_name="inert/rte", storage=url).get_trials()


def test_a_grid_clipping_makes_one_treatment_is_refused_before_anything_is_written(
        local_ray: None, tiny_encoder: str, sample_data_dir: Path, tmp_path: Path) -> None:
    """Clipped at 1e-4, every update of any weight from far below 1 is clipped: weights 1, 9
    and 15 are one treatment. The probe finds it before the database or a run folder is
    made."""
    from weightsearch.sweep.launch import launch

    spec = _spec(tmp_path, tiny_encoder, sample_data_dir, 1e-4, [1, 9, 15])
    assert "allow_inert" not in spec.to_dict()  # the default: refuse
    with pytest.raises(ConfigError) as caught:
        launch(spec, progress=False)
    text = caught.value.problems[0]
    assert text.startswith("weights: rte: in a probe of "), text
    assert "every weight of the grid (1, 9, 15) would train the same treatment" in text
    assert "grad_clip_mode: unweighted" in text and "allow_inert: true" in text
    assert "raise train.grad_clip well above 0.0001" in text  # no weight of 1 or more acts
    assert not (tmp_path / "inert.db").exists() and not (tmp_path / "runs").exists()


def test_a_stored_cell_that_shows_it_stops_the_study(
        local_ray: None, tiny_encoder: str, sample_data_dir: Path, tmp_path: Path) -> None:
    """A study whose finished cell shows every weight of the grid clipped alike stops before
    training anything more (the probe is for studies without one)."""
    from weightsearch.sweep.launch import launch

    one = _spec(tmp_path, tiny_encoder, sample_data_dir, 1e-4, [1], allow_inert=True)
    assert launch(one, progress=False).ran == 1
    grown = _spec(tmp_path, tiny_encoder, sample_data_dir, 1e-4, [1, 9, 15])
    with pytest.raises(ConfigError) as caught:
        launch(grown, progress=False)
    text = str(caught.value)
    assert "in a finished cell (w=1 seed 1) every central update was clipped" in text, text
    assert "weights 1, 9, 15 will train the same treatment" in text
    assert len(_trials(grown.storage)) == 1
    # With allow_inert (how the study trains, not what it learns: the same study), it goes on.
    allowed = _spec(tmp_path, tiny_encoder, sample_data_dir, 1e-4, [1, 9, 15],
                    allow_inert=True)
    assert launch(allowed, progress=False).ran == 2


def test_allow_inert_trains_the_grid_and_a_partly_inert_grid_gets_a_note(
        local_ray: None, tiny_encoder: str, sample_data_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture) -> None:
    from weightsearch.sweep.launch import launch

    spec = _spec(tmp_path, tiny_encoder, sample_data_dir, 1e-4, [1, 15], allow_inert=True)
    summary = launch(spec, progress=False)
    assert summary.ran == 2 and summary.failed == 0
    assert spec.to_dict()["allow_inert"] is True  # written where it is not the default
    # Where every update saturates scales with the clip: set the clip so that it lies near 3,
    # inside the grid 1, 9, 15 (the tiny encoder's norms, read off the run just made).
    record = _trials(spec.storage)[0].user_attrs["clipping"]["tasks"]["rte"]
    clip = 1e-4 * 3 / record["saturates_at"]
    other = tmp_path / "second"
    other.mkdir()
    capsys.readouterr()
    spec = _spec(other, tiny_encoder, sample_data_dir, clip, [1, 9, 15])
    summary = launch(spec, progress=True)
    assert summary.ran == 3
    err = capsys.readouterr().err
    # The probe says it first (from the first updates), the first finished cell again.
    assert "note: rte: in a probe of " in err, err[-2000:]
    assert "note: rte: in a finished cell (w=1 seed 1) every central update" in err, err[-2000:]
    assert "weights 9, 15 will train the same treatment" in err
