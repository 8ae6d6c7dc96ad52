"""Weights that trained the same updates: found from the trials' clipping records, compared as
one in verdicts, and said in `inspect` (table, JSON), the HTTP study view and on a real study."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import SAMPLE
from weightsearch.studies import schema


def _clipping(clip_share: float, grad_clip: float = 1.0, mode: str = "global") -> dict:
    updates = 12
    return {"grad_clip": grad_clip, "grad_clip_mode": mode,
            "tasks": {"rte": {"updates": updates, "clipped": round(clip_share * updates),
                              "clip_share": clip_share, "median_norm": 0.5,
                              "acts_below": grad_clip / 0.5 if mode == "global" else None}}}


def _study(url: str, name: str, cells: list[tuple[float, int, float, dict | None]]) -> None:
    """A launched-looking study of central task rte with COMPLETE trials (weight, seed,
    value, clipping record or None)."""
    import optuna
    from optuna.distributions import FloatDistribution

    from weightsearch.studies.reading import open_quiet

    study = optuna.create_study(study_name=f"{name}/rte", storage=open_quiet(url),
                                direction="maximize")
    for key, value in {schema.A_SOURCE: schema.SOURCE_SWEEP, schema.A_CENTRAL: "rte",
                       schema.A_PRIMARY: "accuracy", schema.A_TASK_TYPE: "classification",
                       schema.A_TRAIN_SIZE: 64}.items():
        study.set_user_attr(key, value)
    for weight, seed, value, clipping in cells:
        attrs = {schema.T_SEED: seed, schema.T_METRICS: {"rte": {"accuracy": value}}}
        if clipping is not None:
            attrs[schema.T_CLIPPING] = clipping
        study.add_trial(optuna.trial.create_trial(
            params={schema.PARAM: weight},
            distributions={schema.PARAM: FloatDistribution(1, 15)},
            value=value, user_attrs=attrs))


def _read(url: str, name: str):
    from weightsearch.studies.reading import open_quiet, read_central

    return read_central(open_quiet(url), f"{name}/rte")


# Weight 1 unclipped; 6 and 15 clipped at every central update, so one run per seed.
SCORES = {1: (0.50, 0.55, 0.52), 6: (0.60, 0.58, 0.61)}


def _cells(clipped_weights=(6, 15), record=_clipping):
    out = []
    for seed in (1, 2, 3):
        out.append((1.0, seed, SCORES[1][seed - 1], record(0.4)))
        for w in clipped_weights:
            out.append((float(w), seed, SCORES[6][seed - 1], record(1.0)))
    return out


def _grouped(clip_share: float) -> dict:
    """A record as runs now write it: the live range per focus group, differing by seed."""
    record = _clipping(clip_share)
    record["tasks"]["rte"].update(saturates_in_focus=2.0, saturates_off_focus=20.0)
    return record


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'studies.db'}"


def test_an_arm_states_its_live_range_per_focus_group(url):
    """Where the records give it, the arm says where each group of central updates saturates
    (not the median of the two groups' mix), and carries both numbers in its JSON."""
    _study(url, "grouped", _cells(record=_grouped))
    [arm] = _read(url, "grouped").arms
    assert (arm.saturates_in_focus, arm.saturates_off_focus) == (2.0, 20.0)
    assert "(every in-focus update from about 2 and every off-focus update from about 20)" \
        in arm.text()
    assert arm.to_dict()["saturates_off_focus"] == 20.0


def test_weights_clipped_away_are_one_arm_and_one_verdict_key(url):
    _study(url, "arm", _cells())
    s = _read(url, "arm")
    [arm] = s.arms
    assert (arm.weights, arm.grad_clip, arm.acts_below, arm.whole_grid) == ((6.0, 15.0), 1.0,
                                                                            2.0, False)
    assert arm.text() == ("weights 6, 15 trained the same treatment: every central update was "
                          "clipped at norm 1 (the median update from about 2), so the runs are "
                          "identical in exact arithmetic and differ by float rounding, which "
                          "grows over training (bf16 from the first update)")
    verdict = s.verdict
    # Compared once: two weights, not three (15's scores are 6's, counted under 6).
    assert verdict.best == 6.0 and verdict.rival == 1.0 and verdict.seeds == 3
    assert verdict.names == {6.0: "6=15"}
    assert "6=15 leads 1" in verdict.text("accuracy")
    summary = s.summary()
    assert summary["same_updates"][0]["weights"] == [6.0, 15.0]
    shares = {r["central_weight"]: r["clip_share"] for r in summary["clipping"]}
    assert shares == {1.0: pytest.approx(5 / 12), 6.0: 1.0, 15.0: 1.0}


def test_a_whole_inert_grid_says_so_with_the_fix(url):
    _study(url, "inert", [c for c in _cells() if c[0] != 1.0])
    [arm] = _read(url, "inert").arms
    assert arm.whole_grid
    text = arm.text()
    assert "every weight of the grid (6, 15) trained the same treatment" in text
    assert "grad_clip_mode: unweighted" in text and "live range" in text
    # Its verdict does not read as if one weight had finished.
    verdict = _read(url, "inert").verdict.text()
    assert verdict.startswith("every weight finished (6=15) trained the same treatment"), verdict


@pytest.mark.parametrize("record", [
    lambda share: None,  # not recorded: nothing says what the cells trained
    lambda share: _clipping(share, mode="unweighted"),  # the weight scales the step
    lambda share: _clipping(share, grad_clip=0.0),  # nothing clipped
])
def test_no_arm_without_a_record_of_global_clipping(url, record):
    _study(url, "none", _cells(record=record))
    s = _read(url, "none")
    assert s.arms == [] and s.verdict.names == {}


def test_one_weight_clipped_away_is_no_arm(url):
    _study(url, "one", _cells(clipped_weights=(6,)))
    assert _read(url, "one").arms == []


def test_inspect_and_the_service_report_the_arm(url, capsys):
    from fastapi.testclient import TestClient

    from weightsearch.cli import main
    from weightsearch.service.app import create_app

    _study(url, "shown", _cells())
    assert main(["inspect", "shown", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert "rte: weights 6, 15 trained the same treatment" in out
    assert "gradient clipping of the central task" in out and "6=15" in out
    assert main(["inspect", "shown", "--storage", url, "--format", "json"]) == 0
    [central] = json.loads(capsys.readouterr().out)["central_tasks"]
    assert central["same_updates"][0]["weights"] == [6.0, 15.0]
    detail = TestClient(create_app(url)).get("/studies/shown").json()
    assert detail["central_tasks"][0]["same_updates"][0]["text"].startswith("weights 6, 15")


def test_ties_and_weights_not_separated_are_named(url):
    """Weight 9 ties 6 exactly; weight 3 is within noise of them; 1 is clearly behind."""
    scores = {1: (0.40, 0.41, 0.42), 3: (0.58, 0.62, 0.59), 6: (0.60, 0.61, 0.60),
              9: (0.61, 0.60, 0.60)}
    _study(url, "ties", [(float(w), seed + 1, v[seed], None)
                         for w, v in scores.items() for seed in range(3)])
    verdict = _read(url, "ties").verdict
    assert verdict.best == 6.0 and verdict.ties == (9.0,)
    assert set(verdict.not_separated) == {9.0, 3.0}
    text = verdict.text("accuracy")
    assert "tied exactly with 6: 9" in text and "not separated from 6 at 95%: 3" in text


@pytest.mark.integration
def test_a_real_study_with_every_central_update_clipped(tiny_encoder, tmp_path):
    """On Ray, central weights 6 and 15 at a clip every update exceeds: the trials record
    their clipping, score the same, and the launch summary and inspect call them one."""
    import ray

    from weightsearch.studies.inspection import inspect
    from weightsearch.sweep.launch import launch
    from weightsearch.sweep.spec import load_study_spec

    spec = load_study_spec({
        "study": "clipped", "allow_inert": True, "storage": f"sqlite:///{tmp_path / 'studies.db'}",
        "train": {"encoder": tiny_encoder, "data_dir": str(SAMPLE),
                  "tasks": ["rte", "mrpc"], "epochs": 1, "batch_size": 16,
                  "max_train_examples": 32, "max_eval_examples": 32, "grad_clip": 1e-4,
                  "precision": "fp32"},
        "central_tasks": ["rte"], "weights": [6, 15], "seeds": [1],
        "workdir": str(tmp_path / "runs"),
    })
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        summary = launch(spec, progress=False)
    finally:
        ray.shutdown()
    assert summary.finished and summary.failed == 0
    lines = "\n".join(summary.lines())
    assert "every weight of the grid (6, 15) trained the same treatment" in lines
    assert "every weight finished (6=15) trained the same treatment" in lines
    s = _read(spec.storage, "clipped")
    values = [c.value for c in s.cells]
    assert values[0] == pytest.approx(values[1], abs=1e-9)
    assert all(c.task_clipping()["clip_share"] == 1.0 for c in s.cells)
    assert "trained the same treatment" in inspect(spec.storage, "clipped")
    assert Path(spec.workdir).is_dir()


def test_a_study_searching_the_clipping_exports_one_task_per_regime(url):
    """Cells of grad_clip 1 and 0 (a searched dimension): per regime, its own arms, and in
    the export its own task, named after the regime."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    from weightsearch.studies.exporter import export_rows
    from weightsearch.studies.reading import open_quiet

    study = optuna.create_study(study_name="grid/rte", storage=open_quiet(url),
                                direction="maximize")
    for key, value in {schema.A_SOURCE: schema.SOURCE_SWEEP, schema.A_CENTRAL: "rte",
                       schema.A_PRIMARY: "accuracy", schema.A_TASK_TYPE: "classification",
                       schema.A_TRAIN_SIZE: 64}.items():
        study.set_user_attr(key, value)
    for clip in (1.0, 0.0):
        for w in (6.0, 15.0):
            for seed in (1, 2):
                value = 0.6 + seed / 100 + (w / 1000 if clip == 0 else 0)
                study.add_trial(optuna.trial.create_trial(
                    params={schema.PARAM: w, "grad_clip": clip},
                    distributions={schema.PARAM: FloatDistribution(1, 15),
                                   "grad_clip": CategoricalDistribution([1.0, 0.0])},
                    value=value, user_attrs={
                        schema.T_SEED: seed,
                        schema.T_POINT: {schema.T_CENTRAL_WEIGHT_PATH: w, "grad_clip": clip},
                        schema.T_CLIPPING: _clipping(1.0 if clip else 0.0, grad_clip=clip)}))
    s = _read(url, "grid")
    [arm] = s.arms
    assert arm.rest == "grad_clip=1" and arm.weights == (6.0, 15.0)
    rows = export_rows([s])
    assert {r["central_task"] for r in rows} == {"rte-clip1", "rte-noclip"}
    assert {(r["central_task"], r["grad_clip"]) for r in rows} == {("rte-clip1", 1.0),
                                                                   ("rte-noclip", 0.0)}


def test_the_plot_shows_the_live_range(url, tmp_path):
    from weightsearch.studies.inspection import plot

    _study(url, "band", _cells())
    path = plot([_read(url, "band")], "band", tmp_path / "band.svg")
    svg = path.read_text()
    assert "live range" in svg
    _study(url, "plain", _cells(record=lambda share: None))
    assert "live range" not in plot([_read(url, "plain")], "plain",
                                    tmp_path / "plain.svg").read_text()


def test_the_service_answers_for_a_clipping_regime(url):
    from fastapi.testclient import TestClient

    from weightsearch.service.app import create_app

    _study(url, "svc", _cells())
    client = TestClient(create_app(url))
    answer = client.get("/recommend", params={"train_size": 700, "clipping": "noclip"})
    assert answer.status_code == 200 and answer.json()["regime"]["clipping"] == "noclip"
    assert client.get("/recommend", params={"train_size": 700,
                                            "clipping": "clip1;x"}).status_code in (400, 422)


def test_an_arm_keeps_every_seed_any_member_finished(url):
    """Seed 4 finished at 15 only: the arm 6=15 still counts it, paired with weight 1."""
    cells = [*_cells(), (1.0, 4, 0.51, _clipping(0.4)), (15.0, 4, 0.62, _clipping(1.0))]
    _study(url, "seeds", cells)
    verdict = _read(url, "seeds").verdict
    assert verdict.paired and verdict.seeds == 4 and verdict.names == {6.0: "6=15"}


@pytest.mark.parametrize("spoil", [
    {"adversarial": True},  # SMART's unweighted term: the direction depends on the weight
    {"tasks": {"rte": {"updates": 12, "clipped": 12, "clip_share": 1.0, "unrecorded": 30}}},
])
def test_no_arm_from_a_record_that_cannot_vouch_for_it(url, spoil):
    def record(share):
        return {**_clipping(share), **spoil} if share == 1.0 else _clipping(share)

    _study(url, "spoilt", _cells(record=record))
    assert _read(url, "spoilt").arms == []


def test_a_weight_still_running_keeps_the_grid_from_being_whole(url):
    import optuna
    from optuna.distributions import FloatDistribution

    from weightsearch.studies.reading import open_quiet

    _study(url, "running", [c for c in _cells() if c[0] != 1.0])
    study = optuna.load_study(study_name="running/rte", storage=open_quiet(url))
    study.add_trial(optuna.trial.create_trial(
        params={schema.PARAM: 1.0}, distributions={schema.PARAM: FloatDistribution(1, 15)},
        state=optuna.trial.TrialState.RUNNING, user_attrs={schema.T_SEED: 1}))
    [arm] = _read(url, "running").arms
    assert not arm.whole_grid


def test_a_wholly_inert_study_is_no_evidence_for_the_recommender(url):
    from weightsearch.recommender.evidence import study_evidence
    from weightsearch.studies.reading import open_quiet, read_all

    _study(url, "inert", [c for c in _cells() if c[0] != 1.0])
    found = study_evidence(read_all(open_quiet(url)))
    assert found == [] and "trained the same treatment" in found.skipped[0]


def test_odd_clipping_records_in_a_shared_database_read_as_unknown(url):
    _study(url, "odd", [(1.0, 1, 0.5, {"grad_clip": "x", "grad_clip_mode": "global"}),
                        (6.0, 1, 0.6, {"grad_clip": 1.0, "grad_clip_mode": "foo"}),
                        (9.0, 1, 0.6, {"grad_clip": float("inf"), "grad_clip_mode": "global"}),
                        (15.0, 1, 0.6, {"grad_clip": 1.0, "grad_clip_mode": "global",
                                        "tasks": {"rte": {"clip_share": float("nan"),
                                                          "acts_below": -3}}})])
    s = _read(url, "odd")
    assert [c.clipping for c in s.cells][:3] == [{}, {}, {}]
    assert s.cells[3].task_clipping() == {} and s.arms == []
