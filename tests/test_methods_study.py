"""The method as a search dimension: SIWLM's central weight beside schemes that take none, in one
study, and the compute-fair comparison `inspect` prints of it (`studies.methods`)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
import yaml
from scipy import stats

from studies import schema as S
from sweep.space import CENTRAL_WEIGHT
from weightsearch.cli import main
from weightsearch.errors import ConfigError

TASKS = ["rte", "mrpc", "stsb"]
SCHEMES = {"choices": ["siwlm", "uncertainty", "dwa", "equal"]}


def _study(sample_data_dir: Path, space: dict, **extra) -> dict:
    raw = {"study": "methods", "central_tasks": ["rte"], "seeds": [1, 2],
           "train": {"data_dir": str(sample_data_dir), "tasks": list(TASKS)},
           "search": {"strategy": "grid", "space": space}}
    raw.update(extra)
    return raw


def _spec(raw: dict):
    from sweep.spec import load_study_spec

    return load_study_spec(raw)


# --- the space ------------------------------------------------------------------------------
def test_the_central_weight_applies_only_to_siwlm(sample_data_dir):
    spec = _spec(_study(sample_data_dir, {"weighting.scheme": SCHEMES,
                                          CENTRAL_WEIGHT: [1, 5, 9]}))
    space = spec.space
    points = space.grid("rte")
    assert points == [
        {"weighting.scheme": "siwlm", CENTRAL_WEIGHT: 1.0},
        {"weighting.scheme": "siwlm", CENTRAL_WEIGHT: 5.0},
        {"weighting.scheme": "siwlm", CENTRAL_WEIGHT: 9.0},
        {"weighting.scheme": "uncertainty"},
        {"weighting.scheme": "dwa"},
        {"weighting.scheme": "equal"},
    ]
    assert space.size("rte") == 6
    # Optuna params: a scheme without a central weight has no central_weight param.
    assert space.params(points[0], "rte") == {"weighting.scheme": "siwlm", S.PARAM: 1.0}
    assert space.params(points[3], "rte") == {"weighting.scheme": "uncertainty"}
    assert space.point_from_params({"weighting.scheme": "dwa", S.PARAM: 9.0}, "rte") == \
        {"weighting.scheme": "dwa"}
    assert space.contains({"weighting.scheme": "dwa"}, "rte")
    assert not space.contains({"weighting.scheme": "dwa", CENTRAL_WEIGHT: 1.0}, "rte")
    assert not space.contains({"weighting.scheme": "siwlm"}, "rte")
    # every cell has its own folder and key
    assert len({space.folder(p, 1) for p in points}) == 6
    assert len({space.cell_key(p, 1) for p in points}) == 6


@pytest.mark.parametrize(("schemes", "weights", "sampling", "expected"), [
    (["siwlm", "dwa"], [1, 9], None, 3),
    (["dwa", "siwlm", "equal"], [1, 3, 6, 9, 12, 15], None, 8),
    (["siwlm", "uncertainty", "dwa", "equal"], [1, 9], ["shuffle", "sqrt"], 10),
    (["siwlm"], [1, 9], ["shuffle", "proportional", "sqrt"], 6),
])
def test_the_size_counts_the_points_of_the_grid(schemes, weights, sampling, expected,
                                                sample_data_dir):
    space = {"weighting.scheme": {"choices": schemes}, CENTRAL_WEIGHT: weights}
    if sampling:
        space["sampling.scheme"] = {"choices": sampling}
    spec = _spec(_study(sample_data_dir, space))
    grid = spec.space.grid("rte")
    assert len(grid) == spec.space.size("rte") == expected
    # by hand: each scheme with a central weight once per weight, every other scheme once
    per_sampling = sum(len(weights) if s == "siwlm" else 1 for s in schemes)
    assert expected == per_sampling * len(sampling or [None])


def test_each_point_keeps_the_settings_its_scheme_takes(sample_data_dir):
    raw = _study(sample_data_dir, {"weighting.scheme": SCHEMES, CENTRAL_WEIGHT: [1, 9]})
    raw["train"]["weighting"] = {"scheme": "siwlm", "variant": "paper", "focus_span": 3,
                                 "temperature": 4, "lr": 1.0e-3}
    spec = _spec(raw)
    got = {}
    for point in spec.space.grid("rte"):
        cfg = spec.for_cell("rte", point, 2, "/tmp/unused")
        got[cfg.weighting.scheme, point.get(CENTRAL_WEIGHT)] = cfg.weighting
        assert cfg.seed == 2
    assert got["siwlm", 9.0].central_weight == 9.0
    assert (got["siwlm", 1.0].variant, got["siwlm", 1.0].focus_span) == ("paper", 3)
    assert got["dwa", None].temperature == 4
    assert got["uncertainty", None].lr == 1.0e-3
    assert set(got) == {("siwlm", 1.0), ("siwlm", 9.0), ("uncertainty", None), ("dwa", None),
                        ("equal", None)}


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"space": {"weighting.scheme": {"choices": ["dwa", "equal"]}, CENTRAL_WEIGHT: [1, 9]}},
     "search.space.weighting.central_weight", "no scheme of search.space.weighting.scheme "
     "takes a central weight; add siwlm"),
    ({"weighting": {"scheme": "siwlm", "temprature": 2}}, "train.weighting.temprature",
     "no scheme of search.space.weighting.scheme (siwlm, uncertainty, dwa, equal) takes this "
     "setting"),
    ({"weighting": {"scheme": "siwlm", "central_weight": 9}}, "train.weighting.central_weight",
     "set per trial by the sweep"),
    ({"strategy": "guided"}, "search.strategy", "use strategy: grid"),
    ({"sampling": {"scheme": "shuffle", "Tee": 2},
      "space": {"weighting.scheme": SCHEMES, CENTRAL_WEIGHT: [1, 9],
                "sampling.scheme": {"choices": ["shuffle", "temperature"]}}},
     "train.sampling.Tee", "correct its name or remove it"),
])
def test_bad_methods_studies_name_the_field(change, field, words, sample_data_dir, tmp_path,
                                            capsys):
    raw = _study(sample_data_dir, change.get("space", {"weighting.scheme": SCHEMES,
                                                       CENTRAL_WEIGHT: [1, 9]}))
    for key in ("weighting", "sampling"):
        if key in change:
            raw["train"][key] = change[key]
    if "strategy" in change:
        raw["search"]["strategy"] = change["strategy"]
    with pytest.raises(ConfigError) as info:
        _spec(raw)
    assert any(p.startswith(f"{field}:") and words in p for p in info.value.problems), \
        info.value.problems
    # the command line: exit 2, one message naming the field, no database written
    db = tmp_path / "s.db"
    raw.update(storage=f"sqlite:///{db}", workdir=str(tmp_path / "runs"))
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["launch", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{field}:" in err and "Traceback" not in err
    assert not db.exists() and not (tmp_path / "runs").exists()


# --- the comparison -----------------------------------------------------------------------------
# seed -> score; siwlm per weight. Chosen so that the in-sample best (w=9) and the weights the
# other seeds choose (9, 9, 1) differ, and DWA beats the fair search.
SIWLM = {1.0: {1: 0.60, 2: 0.70, 3: 0.50}, 9.0: {1: 0.65, 2: 0.62, 3: 0.70}}
OTHERS = {"dwa": {1: 0.66, 2: 0.61, 3: 0.64}, "equal": {1: 0.55, 2: 0.56, 3: 0.57}}
EPOCHS = 3


def _stored_methods_study(url: str) -> None:
    """An Optuna study as the sweep writes one for a methods space (params only where the point
    sets them; the point, seed, epochs and wall time as trial attributes)."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution
    from optuna.trial import create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=S.study_name("methods", "rte"), storage=url,
                                direction="maximize")
    for k, v in {S.A_STUDY: "methods", S.A_CENTRAL: "rte", S.A_SOURCE: S.SOURCE_SWEEP,
                 S.A_PRIMARY: "accuracy", S.A_TRAIN_SIZE: 2490, S.A_STAGE: "multitask",
                 S.A_ENCODER: "all-MiniLM-L6-v2"}.items():
        study.set_user_attr(k, v)
    scheme = CategoricalDistribution(["siwlm", "dwa", "equal"])
    weight = FloatDistribution(1.0, 15.0)

    def add(point: dict, seed: int, value: float) -> None:
        params = {"weighting.scheme": point["weighting.scheme"]}
        dists = {"weighting.scheme": scheme}
        if CENTRAL_WEIGHT in point:
            params[S.PARAM], dists[S.PARAM] = point[CENTRAL_WEIGHT], weight
        study.add_trial(create_trial(value=value, params=params, distributions=dists,
                                     user_attrs={S.T_SEED: seed, S.T_POINT: point,
                                                 S.T_EPOCHS: EPOCHS, S.T_WALL_TIME: 10.0}))

    for w, by_seed in SIWLM.items():
        for seed, v in by_seed.items():
            add({"weighting.scheme": "siwlm", CENTRAL_WEIGHT: w}, seed, v)
    for name, by_seed in OTHERS.items():
        for seed, v in by_seed.items():
            add({"weighting.scheme": name}, seed, v)


def _t_half(values: list[float]) -> float:
    return stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def test_the_comparison_against_a_restatement_by_hand(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    _stored_methods_study(url)
    assert main(["inspect", "methods", "--storage", url, "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)["central_tasks"][0]
    rows = {(r["method"], (r["choice"] or "").split(" ")[0]): r for r in got["methods"]}
    # The weight search chosen on the other seeds: seed 1 <- seeds 2, 3 (w1 0.60, w9 0.66: 9),
    # seed 2 <- 1, 3 (w1 0.55, w9 0.675: 9), seed 3 <- 1, 2 (w1 0.65, w9 0.635: 1).
    fair = [SIWLM[9.0][1], SIWLM[9.0][2], SIWLM[1.0][3]]
    search = rows["scheme=siwlm", "search"]
    assert search["mean"] == pytest.approx(statistics.fmean(fair))
    assert search["choice"] == "search (w per seed: 9,9,1)"
    in_sample = rows["scheme=siwlm", "best"]
    assert in_sample["choice"] == "best w=9 (in-sample)"
    assert in_sample["mean"] == pytest.approx(statistics.fmean(SIWLM[9.0].values()))
    # DWA is the best fair method: the reference of every difference.
    dwa = rows["scheme=dwa", ""]
    assert dwa["best"] and dwa["diff"] is None
    assert dwa["low"] == pytest.approx(statistics.fmean(OTHERS["dwa"].values())
                                       - _t_half(list(OTHERS["dwa"].values())))
    diffs = [f - OTHERS["dwa"][s] for s, f in zip((1, 2, 3), fair, strict=True)]
    assert search["diff"] == pytest.approx(statistics.fmean(diffs))
    assert search["diff_low"] == pytest.approx(statistics.fmean(diffs) - _t_half(diffs))
    assert search["paired_seeds"] == 3
    equal_diffs = [OTHERS["equal"][s] - OTHERS["dwa"][s] for s in (1, 2, 3)]
    assert rows["scheme=equal", ""]["diff_high"] == pytest.approx(
        statistics.fmean(equal_diffs) + _t_half(equal_diffs))
    # compute: the search pays for both weights, each other method for one run per seed
    assert (search["trial_epochs"], search["per_seed"]) == (6 * EPOCHS, 2 * EPOCHS)
    assert (dwa["trial_epochs"], dwa["per_seed"], dwa["wall_s"]) == (3 * EPOCHS, EPOCHS, 30.0)
    # equal is clearly behind dwa (every seed 0.07-0.11 lower); the search is not separated
    assert "clearly behind it (95% seed-paired interval): scheme=equal" in \
        got["methods_conclusion"]
    assert "not separated from it by these seeds: scheme=siwlm (search)" in \
        got["methods_conclusion"]

    assert main(["inspect", "methods", "--storage", url]) == 0
    table = capsys.readouterr().out
    assert "methods for rte, compute-fair" in table and "search (w per seed: 9,9,1)" in table
    assert main(["inspect", "methods", "--storage", url, "--format", "csv"]) == 0
    csv = capsys.readouterr().out.splitlines()
    assert csv[0].startswith("central_task,method,choice,primary_metric,mean,low,high")
    assert len(csv) == 1 + 4  # siwlm in-sample and search, dwa, equal
    plot = tmp_path / "methods.svg"
    assert main(["inspect", "methods", "--storage", url, "--plot", str(plot)]) == 0
    svg = plot.read_text()
    assert "scheme=dwa" in svg and "ep/seed" in svg


def test_the_recommender_reads_only_the_siwlm_trials(tmp_path):
    from recommender.recommend import study_evidence
    from studies.reading import open_quiet, read_all

    url = f"sqlite:///{tmp_path / 'm.db'}"
    _stored_methods_study(url)
    (study,) = read_all(open_quiet(url))
    assert study.values_by_weight() == {w: list(v.values()) for w, v in SIWLM.items()}
    (point,) = study_evidence([study])
    assert (point.task, point.train_size, point.best_weight, point.n_seeds) == ("rte", 2490,
                                                                                9.0, 3)
