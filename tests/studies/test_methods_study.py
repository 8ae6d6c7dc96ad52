"""The method as a search dimension: SIWLM's central weight beside schemes that take none, in one
study, and the compute-fair comparison `inspect` prints of it (`weightsearch.studies.methods`)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
import yaml
from scipy import stats

from weightsearch.cli import main
from weightsearch.core.errors import ConfigError
from weightsearch.studies import schema as S
from weightsearch.sweep.space import CENTRAL_WEIGHT

TASKS = ["rte", "mrpc", "stsb"]
SCHEMES = {"choices": ["siwlm", "uncertainty", "dwa", "equal"]}


def _study(sample_data_dir: Path, space: dict, **extra) -> dict:
    raw = {"study": "methods", "central_tasks": ["rte"], "seeds": [1, 2],
           "train": {"data_dir": str(sample_data_dir), "tasks": list(TASKS)},
           "search": {"strategy": "grid", "space": space}}
    raw.update(extra)
    return raw


def _spec(raw: dict):
    from weightsearch.sweep.spec import load_study_spec

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
     "(dwa, equal) takes a central weight; add siwlm"),
    ({"space": {"weighting.scheme": {"choices": ["siwlm", "equal"]}, CENTRAL_WEIGHT: [1, 9],
                "weighting.temperature": [1, 2]}},
     "search.space.weighting.temperature", "(siwlm, equal) takes temperature; add a scheme"),
    ({"scheduler": "asha"}, "scheduler", "a study that compares methods (weighting.scheme)"),
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
    if "scheduler" in change:
        raw["scheduler"] = change["scheduler"]
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


def _stored_methods_study(url: str, siwlm: dict | None = None, others: dict | None = None,
                          direction: str = "maximize") -> None:
    """An Optuna study as the sweep writes one for a methods space (params only where the point
    sets them; the point, seed, epochs and wall time as trial attributes)."""
    siwlm = SIWLM if siwlm is None else siwlm
    others = OTHERS if others is None else others
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution
    from optuna.trial import create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=S.study_name("methods", "rte"), storage=url,
                                direction=direction)
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

    for w, by_seed in siwlm.items():
        for seed, v in by_seed.items():
            add({"weighting.scheme": "siwlm", CENTRAL_WEIGHT: w}, seed, v)
    for name, by_seed in others.items():
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
    search = rows["weighting.scheme=siwlm", "search"]
    assert search["mean"] == pytest.approx(statistics.fmean(fair))
    assert search["choice"] == "search (w per seed: 9,9,1)"
    in_sample = rows["weighting.scheme=siwlm", "best"]
    assert in_sample["choice"] == "best w=9 (in-sample)"
    assert in_sample["mean"] == pytest.approx(statistics.fmean(SIWLM[9.0].values()))
    # DWA is the best fair method: the reference of every difference.
    dwa = rows["weighting.scheme=dwa", ""]
    assert dwa["best"] and dwa["diff"] is None
    assert dwa["low"] == pytest.approx(statistics.fmean(OTHERS["dwa"].values())
                                       - _t_half(list(OTHERS["dwa"].values())))
    diffs = [f - OTHERS["dwa"][s] for s, f in zip((1, 2, 3), fair, strict=True)]
    assert search["diff"] == pytest.approx(statistics.fmean(diffs))
    assert search["diff_low"] == pytest.approx(statistics.fmean(diffs) - _t_half(diffs))
    assert search["paired_seeds"] == 3
    equal_diffs = [OTHERS["equal"][s] - OTHERS["dwa"][s] for s in (1, 2, 3)]
    assert rows["weighting.scheme=equal", ""]["diff_high"] == pytest.approx(
        statistics.fmean(equal_diffs) + _t_half(equal_diffs))
    # compute: the search pays for both weights, each other method for one run per seed
    assert (search["trial_epochs"], search["per_seed"]) == (6 * EPOCHS, 2 * EPOCHS)
    assert (dwa["trial_epochs"], dwa["per_seed"], dwa["wall_s"]) == (3 * EPOCHS, EPOCHS, 30.0)
    # equal is clearly behind dwa (every seed 0.07-0.11 lower); the search is not separated
    assert "clearly behind it (95% seed-paired interval): weighting.scheme=equal" in \
        got["methods_conclusion"]
    assert "not separated from it by these seeds: weighting.scheme=siwlm (search)" in \
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
    assert "weighting.scheme=dwa" in svg and "ep/seed" in svg


def test_the_recommender_reads_only_the_siwlm_trials(tmp_path):
    from weightsearch.recommender.evidence import study_evidence
    from weightsearch.studies.reading import open_quiet, read_all

    url = f"sqlite:///{tmp_path / 'm.db'}"
    _stored_methods_study(url)
    (study,) = read_all(open_quiet(url))
    assert study.values_by_weight() == {w: list(v.values()) for w, v in SIWLM.items()}
    (point,) = study_evidence([study])
    assert (point.task, point.train_size, point.best_weight, point.n_seeds) == ("rte", 2490,
                                                                                9.0, 3)


def _rows(url: str) -> tuple[list[dict], str]:
    from weightsearch.studies.methods import conclusion, method_rows
    from weightsearch.studies.reading import open_quiet, read_all

    (study,) = read_all(open_quiet(url))
    rows = method_rows(study)
    return rows, conclusion(rows, study.maximize)


def test_a_loss_is_compared_the_other_way_round(tmp_path):
    """Minimized: the lowest mean is best, and `behind` means a higher loss at 95%."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    loss = {w: {k: 1 - v for k, v in by.items()} for w, by in SIWLM.items()}
    others = {"dwa": {k: 1 - v for k, v in OTHERS["dwa"].items()},
              "equal": {1: 0.25, 2: 0.55, 3: 0.40}}  # around dwa's loss: not separated
    _stored_methods_study(url, loss, others, direction="minimize")
    rows, text = _rows(url)
    best = next(r for r in rows if r["best"])
    assert best["method"] == "weighting.scheme=dwa"
    assert [r["mean"] for r in rows] == sorted(r["mean"] for r in rows)  # best (lowest) first
    assert "not separated from it by these seeds: weighting.scheme=equal, " \
        "weighting.scheme=siwlm (search)" in text and "clearly behind" not in text


def test_with_one_seed_the_in_sample_choice_never_sets_the_bar(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    _stored_methods_study(url, {1.0: {1: 0.5}, 9.0: {1: 0.9}}, {"dwa": {1: 0.7}})
    rows, text = _rows(url)
    (in_sample,) = [r for r in rows if (r["choice"] or "").startswith("best w")]
    assert in_sample["mean"] == 0.9 and not in_sample["best"]
    assert not any((r["choice"] or "").startswith("search") for r in rows)  # no other seed
    assert next(r for r in rows if r["best"])["method"] == "weighting.scheme=dwa"
    assert text.startswith("rte: weighting.scheme=dwa has the best accuracy (0.7000 over 1 seed)")
    assert "not comparable (fewer than two shared seeds): " not in text  # nothing left to compare


def test_a_seed_without_a_run_at_the_chosen_weight_has_no_search_score(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    siwlm = {1.0: {1: 0.60, 2: 0.55, 3: 0.90}, 9.0: {1: 0.65, 2: 0.62}}  # w=9, seed 3 failed
    _stored_methods_study(url, siwlm)
    rows, _ = _rows(url)
    (search,) = [r for r in rows if (r["choice"] or "").startswith("search")]
    # seed 1 <- seeds 2, 3 (w1 0.725 > w9 0.62): 1; seed 2 <- seeds 1, 3 (0.75 > 0.65): 1;
    # seed 3 <- seeds 1, 2 (w1 0.575 < w9 0.635): 9, which seed 3 did not finish: no score
    assert search["choice"] == "search (w per seed: 1,1)"
    assert search["seeds"] == 2
    assert search["mean"] == pytest.approx(statistics.fmean([0.60, 0.55]))


def test_a_searched_setting_applies_only_to_the_scheme_that_takes_it(sample_data_dir):
    spec = _spec(_study(sample_data_dir, {"weighting.scheme": {"choices": ["siwlm", "dwa"]},
                                          CENTRAL_WEIGHT: [1, 9],
                                          "weighting.temperature": [1, 2]}))
    points = spec.space.grid("rte")
    assert points == [
        {"weighting.scheme": "siwlm", CENTRAL_WEIGHT: 1.0},
        {"weighting.scheme": "siwlm", CENTRAL_WEIGHT: 9.0},
        {"weighting.scheme": "dwa", "weighting.temperature": 1},
        {"weighting.scheme": "dwa", "weighting.temperature": 2},
    ]
    assert spec.space.size("rte") == 4
    temperatures = {spec.for_cell("rte", p, 1, "/tmp/x").weighting.temperature
                    for p in points[2:]}
    assert temperatures == {1, 2}


def test_a_preset_keeps_its_weighting_for_siwlm_only(sample_data_dir):
    raw = _study(sample_data_dir, {"weighting.scheme": {"choices": ["siwlm", "dwa", "equal"]},
                                   CENTRAL_WEIGHT: [1, 9]})
    raw["train"].update(preset="siwlm-paper", tasks=list(TASKS))
    spec = _spec(raw)
    found = {}
    for point in spec.space.grid("rte"):
        found[point["weighting.scheme"], point.get(CENTRAL_WEIGHT)] = spec.for_cell(
            "rte", point, 1, "/tmp/x").weighting
    siwlm = found["siwlm", 9.0]
    assert (siwlm.variant, siwlm.focus_span, siwlm.off_focus) == ("reference", 20, 0.1)
    assert found["dwa", None].scheme == "dwa" and found["equal", None].scheme == "equal"


def test_the_service_shows_the_comparison(tmp_path):
    from fastapi.testclient import TestClient

    from weightsearch.service.app import create_app

    url = f"sqlite:///{tmp_path / 'm.db'}"
    _stored_methods_study(url)
    with TestClient(create_app(url, log_dir=tmp_path)) as client:
        body = client.get("/studies/methods").json()
    (task,) = body["central_tasks"]
    rows, text = _rows(url)
    assert task["methods"] == json.loads(json.dumps(rows)) and task["methods_conclusion"] == text
