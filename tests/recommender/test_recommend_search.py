"""Searches that start from the recommendation: halving's `start: recommend`, the guided warm
start asked for the study's own regime, and the synthetic learning curves they are measured on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from weightsearch.core.errors import ConfigError
from weightsearch.recommender.recommend import start_weights
from weightsearch.recommender.synthetic import GRID, epoch_curves, make_task, world_task
from weightsearch.studies import schema as S
from weightsearch.studies.importer import import_file
from weightsearch.sweep.launch import first_points
from weightsearch.sweep.space import CENTRAL_WEIGHT
from weightsearch.sweep.spec import load_study_spec
from weightsearch.sweep.strategies import Record
from weightsearch.sweep.study_db import Central

PEAK_AT_3 = {1.0: 72.0, 3.0: 78.0, 6.0: 74.0, 9.0: 71.0, 12.0: 69.0, 15.0: 68.0}


def _spec(sample_data_dir: Path, search: dict, **extra):
    train = {"data_dir": str(sample_data_dir), "tasks": ["rte", "sst2"], "epochs": 4}
    return load_study_spec({"study": "seeded", "train": train, "central_tasks": ["rte", "sst2"],
                            "search": search, "seeds": [1], **extra})


def _central(name: str, size: int, **attrs) -> Central:
    return Central(name, None, {}, {S.A_TRAIN_SIZE: size, S.A_TASK_TYPE: "classification",
                                    **attrs})


HALVING = {"strategy": "halving", "start": "recommend",
           "space": {CENTRAL_WEIGHT: [1, 3, 6, 9, 12, 15]}}


def test_start_weights_are_the_interval_and_at_least_the_two_nearest() -> None:
    assert start_weights(GRID, 9.8, (5.4, 14.3)) == [9.0, 12.0, 6.0]
    assert start_weights(GRID, 2.4, (2.0, 2.8)) == [3.0, 1.0]  # nothing inside: the two nearest
    assert start_weights(GRID, 8.0, (1.0, 15.0)) == [9.0, 6.0, 12.0, 3.0, 1.0, 15.0]


def test_halving_started_from_the_recommendation_trains_only_weights_around_it(
        sample_data_dir: Path, tmp_path: Path) -> None:
    spec = _spec(sample_data_dir, HALVING)
    centrals = [_central("rte", 2490), _central("sst2", 67349)]
    first = first_points(spec, centrals, f"sqlite:///{tmp_path / 'empty.db'}")
    for c in centrals:
        answer = c.attrs[S.A_RECOMMENDATION]  # recorded with the study when it is created
        weights = [p[CENTRAL_WEIGHT] for p in first[c.name]]
        assert weights == start_weights(GRID, answer["central_weight"], answer["interval"])
        assert 2 <= len(weights) < len(GRID)
    # The prior: RTE's answer lies higher than SST-2's.
    rte, sst2 = (c.attrs[S.A_RECOMMENDATION]["central_weight"] for c in centrals)
    assert rte > sst2

    seeded, plain = spec.strategy("rte", first["rte"]), spec.strategy("rte")
    rung0 = seeded.units([])
    assert [u.point[CENTRAL_WEIGHT] for u in rung0] == [p[CENTRAL_WEIGHT] for p in first["rte"]]
    assert seeded.max_units() < plain.max_units()
    # Driven to its end on a curve peaking at 12, it finishes inside its start set.
    records: list[Record] = []
    for _ in range(seeded.max_units() + 1):
        units = seeded.units(records)
        if not units:
            break
        u = units[0]
        w = u.point[CENTRAL_WEIGHT]
        epochs = u.budget or seeded.epochs
        values = {e: 0.7 - 0.002 * (w - 12) ** 2 + 0.01 * e for e in range(1, epochs + 1)}
        records.append(Record(len(records), u.key, seeded.cell(u.point, u.seed), u.seed, u.point,
                              "pruned" if u.budget else "complete", values[epochs], values))
    assert not seeded.units(records)
    final = [r for r in records if r.state == "complete"]
    assert len(final) == 1 and final[0].point[CENTRAL_WEIGHT] in {p[CENTRAL_WEIGHT]
                                                                  for p in first["rte"]}
    assert len(records) == seeded.max_units()


def test_a_recorded_recommendation_is_reused(sample_data_dir: Path, tmp_path: Path) -> None:
    """A resumed study, or a second driver, starts from the answer its study recorded, though
    the evidence may have changed since."""
    import optuna

    url = f"sqlite:///{tmp_path / 'r.db'}"
    study = optuna.create_study(study_name="seeded/rte", storage=url)
    study.set_user_attr(S.A_RECOMMENDATION, {"central_weight": 3.0, "interval": [1.0, 4.0],
                                             "regime": {}})
    spec = _spec(sample_data_dir, HALVING)
    centrals = [_central("rte", 2490)]
    first = first_points(spec, centrals, url, {"rte": study})
    assert [p[CENTRAL_WEIGHT] for p in first["rte"]] == [3.0, 1.0]
    assert S.A_RECOMMENDATION not in centrals[0].attrs  # nothing new to record


def test_start_setting_is_checked_and_grid_by_default(sample_data_dir: Path) -> None:
    plain = _spec(sample_data_dir, {"strategy": "halving",
                                    "space": {CENTRAL_WEIGHT: [1, 3, 6, 9, 12, 15]}})
    # Written out since study-file format 2; a format-1 study (without it) is compared by
    # content, not by digest (tests/test_release_compat.py).
    assert plain.to_dict()["search"]["start"] == "grid"
    assert _spec(sample_data_dir, HALVING).to_dict()["search"]["start"] == "recommend"
    with pytest.raises(ConfigError, match=r"search\.start: expected grid"):
        _spec(sample_data_dir, {**HALVING, "start": "best"})
    with pytest.raises(ConfigError, match=r"search\.start: recommend narrows"):
        _spec(sample_data_dir, {"strategy": "halving", "start": "recommend",
                                "space": {"lr": [1e-4, 2e-4]}})


def test_warm_start_asks_for_the_studys_own_regime(sample_data_dir: Path,
                                                   tmp_path: Path) -> None:
    """MiniLM studies peak at 3; the paper's prior (BERT-base, fine-tuned) says 9 or more. A
    study's warm start follows the evidence of its own encoder and stage (asked without them,
    both would start at the strongest evidence's 3); the discounted MiniLM evidence still
    pulls the BERT answer down, being far more precise than the prior's single runs."""
    rows = ["central_task,task_type,train_size,central_weight,seed,metric,encoder,stage"]
    for task, size in (("a", 2000), ("b", 3000), ("c", 4500), ("d", 6000)):
        for w, m in PEAK_AT_3.items():
            rows += [f"{task},classification,{size},{w:g},{s},{m + 0.4 * (s - 1)},"
                     f"all-MiniLM-L6-v2,multitask" for s in range(3)]
    f = tmp_path / "minilm.csv"
    f.write_text("\n".join(rows) + "\n")
    url = f"sqlite:///{tmp_path / 'w.db'}"
    import_file(f, "minilm", url)
    spec = _spec(sample_data_dir, {"strategy": "guided", "n_trials": 3,
                                   "space": {CENTRAL_WEIGHT: {"low": 1, "high": 15, "step": 1}}},
                 warm_start="recommend")
    ours = _central("rte", 2490, **{S.A_ENCODER: "/models/all-MiniLM-L6-v2",
                                    S.A_STAGE: "multitask", S.A_VARIANT: "reference"})
    papers = _central("rte", 2490, **{S.A_ENCODER: "bert-base-uncased",
                                      S.A_STAGE: "finetuned", S.A_VARIANT: "reference"})
    mine = first_points(spec, [ours], url)["rte"][0][CENTRAL_WEIGHT]
    theirs = first_points(spec, [papers], url)["rte"][0][CENTRAL_WEIGHT]
    assert mine <= 4 and theirs >= mine + 2
    assert ours.attrs[S.A_RECOMMENDATION]["regime"]["encoder"] == "all-minilm-l6-v2"
    assert papers.attrs[S.A_RECOMMENDATION]["regime"]["stage"] == "finetuned"


def test_epoch_curves_end_at_the_trials_scores_and_grow_quieter() -> None:
    rng = np.random.default_rng(7)
    early, late = [], []
    for i in range(60):
        task = make_task(rng, f"t{i}", 5)
        curves = epoch_curves(task, rng)
        for w in GRID:
            runs = np.array(curves.scores[w])
            assert np.allclose(runs[:, -1], task.values[w])
            early.append(np.std(runs[:, 0] - task.true_score(w)) / task.noise)
            late.append(np.std(runs[:, -1] - task.true_score(w)) / task.noise)
        assert curves.mean_at(GRID[0], 1) < curves.mean_at(GRID[0], curves.epochs) + 2.0
    # First-epoch seed noise: sqrt(2) x the last epoch's (EARLY_NOISE = 1).
    assert 1.25 < np.mean(early) / np.mean(late) < 1.6


def test_paired_worlds_share_their_tasks_and_first_seeds() -> None:
    three, five = world_task(4, 0, 2, 3), world_task(4, 0, 2, 5)
    assert three.true_best == five.true_best and three.train_size == five.train_size
    assert all(five.values[w][:3] == three.values[w] for w in GRID)
    assert world_task(4, 1, 0, 3).train_size != world_task(4, 0, 0, 3).train_size


@pytest.mark.integration
def test_a_launched_halving_study_starts_from_the_recommendation(
        tiny_encoder: str, sample_data_dir: Path, tmp_path: Path) -> None:
    """Through Ray with the tiny encoder: the study records the answer it started from and its
    encoder's size, and its first rung trains only the weights around that answer."""
    import optuna
    import ray

    from weightsearch.sweep.launch import launch

    spec = load_study_spec({
        "study": "seeded", "allow_inert": True, "storage": f"sqlite:///{tmp_path / 'studies.db'}",
        "train": {"encoder": tiny_encoder, "data_dir": str(sample_data_dir),
                  "tasks": ["rte", "mrpc"], "weighting": {"scheme": "siwlm"}, "epochs": 2,
                  "batch_size": 16, "max_train_examples": 32, "max_eval_examples": 32,
                  "max_seq_len": 64},
        "central_tasks": ["rte"], "search": HALVING, "max_concurrent": 2,
        "workdir": str(tmp_path / "runs")})
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        summary = launch(spec, progress=False)
        assert summary.finished and summary.failed == 0, summary.lines()
        study = optuna.load_study(study_name="seeded/rte", storage=spec.storage)
        answer = study.user_attrs[S.A_RECOMMENDATION]
        assert study.user_attrs[S.A_ENCODER_SIZE] == "32x2"
        assert answer["regime"]["encoder_size"] == "32x2"  # asked for the study's own regime
        start = start_weights(GRID, answer["central_weight"], answer["interval"])
        rung0 = {t.params[S.PARAM] for t in study.get_trials()
                 if t.user_attrs.get(S.T_BUDGET) == 1}
        assert rung0 == set(start) and len(start) < len(GRID)
        # Launched again, it reads its recorded answer and finds nothing left to train.
        again = launch(spec, progress=False)
        assert again.finished and len(study.get_trials()) == len(start) + len(start) // 2
    finally:
        ray.shutdown()
