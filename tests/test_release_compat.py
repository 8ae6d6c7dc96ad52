"""What release 0.1.0 wrote still opens, inspects, resumes and answers `recommend` as it did.

`tests/compat/release-0.1.0/` holds a study database (a two-task sweep and the imported paper
table) and a run folder cut back to its first of two epochs, both written by that release
(`tests/compat/make_fixture.py`), with the release's own answers in `expected.json`.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent / "compat"
FIXTURE = HERE / "release-0.1.0"
sys.path.insert(0, str(HERE))

from layout import ROOT, STUDY, lay_out, run_config  # noqa: E402

from weightsearch.recommender.shipped import SHIPPED  # noqa: E402

# Measured, not computed: they differ from one run of the same code to the next.
TIMINGS = {"wall_time_s", "train_time_s", "train_examples_per_s"}


@pytest.fixture(scope="module")
def expected() -> dict:
    return json.loads((FIXTURE / "expected.json").read_text())


@pytest.fixture
def release(tmp_path_factory) -> Path:
    """The fixture where the release left it (a run's settings record absolute paths)."""
    lay_out()
    shutil.copy(FIXTURE / "studies.db", ROOT / "studies.db")
    shutil.copytree(FIXTURE / "run", ROOT / "run")
    yield ROOT
    shutil.rmtree(ROOT, ignore_errors=True)


def _json(argv: list[str]) -> dict:
    from weightsearch.cli import main

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(argv) == 0
    return json.loads(buffer.getvalue())


def test_inspect_and_recommend_answer_as_the_release_did(release: Path, expected: dict) -> None:
    url = f"sqlite:///{release / 'studies.db'}"
    before = (release / "studies.db").read_bytes()
    # Everything the release printed is printed the same; today's output may add to it.
    _holds(_json(["inspect", "--format", "json", "--storage", url]), expected["inspect"])
    _holds(_json(["inspect", STUDY, "--format", "json", "--storage", url]),
           expected["inspect_study"])
    # The recommender's law changed after the release (a trend in log size, hyperparameters
    # from the data): the evidence it reads from the release's database is the same, the
    # weights it answers are today's.
    for argv, key in ((["--train-size", "2490"], "recommend"),
                      (["--train-size", "300", "--task-type", "regression"], "recommend_small")):
        now = _json(["recommend", *argv, "--format", "json", "--storage", url])
        assert _data(now["evidence"]) == _data(expected[key]["evidence"])
        assert now["train_size"] == expected[key]["train_size"]
        # The release answered in the imported table's regime (encoder "unknown"); today the
        # regime answered by default is that of the studies launched where they locate a best
        # weight, else the default encoder's (docs/recommender.md). The release's studies (a
        # tiny random encoder, flat curves) locate none: passed over, and said so.
        then = {**expected[key]["regime"], "encoder": "all-minilm-l6-v2"}
        assert {k: now["regime"][k] for k in ("encoder", "stage")} == \
            {k: then[k] for k in ("encoder", "stage")}
        assert any("passed over as the regime" in n and str(release / "encoder").lower() in n
                   for n in now["notes"]), now["notes"]
        low, high = now["interval"]
        assert 1 <= low <= now["central_weight"] <= high <= 15
    evaluated = _json(["recommend", "--evaluate", "--format", "json", "--storage", url])
    assert sorted((r["task"], r["best_weight"], r["top2"]) for r in evaluated["tasks"]) == \
        sorted((r["task"], r["best_weight"], r["top2"]) for r in expected["evaluate"]["tasks"])
    assert (release / "studies.db").read_bytes() == before  # reading writes nothing


def _data(evidence: list[dict]) -> list[tuple]:
    """What a recommendation read from the database and the paper's table, in a fixed order
    (the studies shipped since the release are left out)."""
    return sorted((e["task"], e["study"], e["train_size"], e["best_weight"], e["n_seeds"],
                   e["source"], e["encoder"], e["stage"]) for e in evidence
                  if e["study"] not in SHIPPED_SINCE)


SHIPPED_SINCE = {s.study for s in SHIPPED}


def _holds(now: object, then: object, where: str = "") -> None:
    """`now` says everything `then` said: the same values, and maybe more keys."""
    if isinstance(then, dict):
        assert isinstance(now, dict), where
        for key, value in then.items():
            assert key in now, f"{where}.{key} is gone"
            _holds(now[key], value, f"{where}.{key}")
    elif isinstance(then, list):
        assert isinstance(now, list) and len(now) == len(then), where
        for i, (a, b) in enumerate(zip(now, then, strict=True)):
            _holds(a, b, f"{where}[{i}]")
    else:
        assert now == then, f"{where}: {now!r} != {then!r}"


def test_an_interrupted_run_resumes_to_the_release_result(release: Path, expected: dict) -> None:
    from weightsearch.trainer import train

    # The release ran `precision: auto` on a CPU without native bf16 (so in fp32); on a CPU with
    # it, auto means bf16 and the resume is refused, so the precision is named, as the refusal
    # asks.
    result = train({**run_config(), "precision": "fp32"}, resume=True, quiet=True).to_dict()
    old = expected["run_result"]
    # The release recorded no gradient clipping nor constant-prediction scores: the resumed run
    # adds both (majority: every task's), and the resumed epoch its clipping record (the
    # release's epoch logged no norms, so only the resumed updates count).
    assert set(result) - set(old) == {"clipping", "majority"} and set(old) <= set(result)
    assert "clipping" not in result["history"][0] and "clipping" in result["history"][1]
    resumed = [r for r in _steps(release) if r["epoch"] == 2]
    counted = sum(t["updates"] for t in result["clipping"]["tasks"].values())
    assert counted == len([r for r in resumed if not r["skipped"]])
    for h in result["history"]:
        h.pop("clipping", None)
    for key in sorted(set(old) - TIMINGS):
        if not key.startswith("peak_"):  # memory: measured too
            assert result[key] == _rounding(old[key]), key
    assert [h["epoch"] for h in result["history"]] == [1, 2]
    assert json.loads((release / "run" / "result.json").read_text())["best"] == \
        _rounding(old["best"])


def _steps(release: Path) -> list[dict]:
    return [json.loads(line) for line in (release / "run" / "steps.jsonl").read_text().splitlines()]


def _rounding(value: object) -> object:
    """`value` with every float compared to 1e-3 relative: another CPU's float kernels (AVX-512
    or not) round the same fp32 training differently in the last digits."""
    if isinstance(value, float):
        return pytest.approx(value, rel=1e-3, abs=1e-6)
    if isinstance(value, dict):
        return {k: _rounding(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounding(v) for v in value]
    return value


@pytest.mark.integration
def test_a_finished_release_study_resumes_with_nothing_to_train(release: Path,
                                                                 expected: dict) -> None:
    import ray

    from weightsearch.sweep.launch import resume

    url = f"sqlite:///{release / 'studies.db'}"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        summary = resume(STUDY, url, progress=False)
    finally:
        ray.shutdown()
    assert summary.ran == 0 and summary.finished and summary.complete == summary.total == 8
    _holds(_json(["inspect", STUDY, "--format", "json", "--storage", url]),
           expected["inspect_study"])


def test_a_release_study_is_the_same_study_in_todays_format(release: Path) -> None:
    """A 0.1.0 study's stored spec (format 1, no `version`) is compared by content: the same
    study file is the same study, one with more seeds extends it, a changed one is refused and
    its change named."""
    import optuna

    from weightsearch.studies import schema
    from weightsearch.studies.storage import open_storage
    from weightsearch.sweep import study_db
    from weightsearch.sweep.spec import SPEC_VERSION, load_study_spec

    url = f"sqlite:///{release / 'studies.db'}"
    storage = open_storage(url)
    stored = study_db.stored_spec(STUDY, storage, url)
    assert "version" not in stored and "objective" not in stored  # as 0.1.0 wrote it
    spec = load_study_spec(stored)
    study = optuna.load_study(study_name=f"{STUDY}/rte", storage=storage)
    assert spec.to_dict()["version"] == SPEC_VERSION
    assert spec.digest() != study.user_attrs[schema.A_DIGEST]  # digests of two formats
    assert study_db._mismatch(spec, study, url) is None
    more_seeds = load_study_spec({**stored, "seeds": [1, 2, 3]})
    assert study_db._mismatch(more_seeds, study, url) is None  # more cells: an extension
    other_lr = load_study_spec({**stored, "train": {**stored["train"], "lr": 0.123}})
    assert "(changed: train) that does not extend it: cell w=1 would train differently " \
        "(changed: lr)" in study_db._mismatch(other_lr, study, url)


def test_a_release_study_keeps_training_as_it_was_launched(release: Path) -> None:
    """Trainer defaults that changed since a release are written into its stored study file
    when it is read back: its cells truncate over-long examples, as that release did, while
    the same file launched afresh means today's default, which trains differently and is
    refused under the old name."""
    import optuna

    from weightsearch.studies.storage import open_storage
    from weightsearch.sweep import study_db
    from weightsearch.sweep.spec import load_study_spec

    url = f"sqlite:///{release / 'studies.db'}"
    storage = open_storage(url)
    stored = study_db.stored_spec(STUDY, storage, url)
    assert stored["train"]["overlong"] == "truncate"
    # Its encoder's default rate is 5e-5 then and now: nothing written in for it.
    assert "lr" not in stored["train"]
    cell = load_study_spec(stored).for_cell("rte", {"weighting.central_weight": 1.0}, 1, "x")
    assert cell.overlong == "truncate" and cell.learning_rate == 5e-5
    study = optuna.load_study(study_name=f"{STUDY}/rte", storage=storage)
    as_written = {**stored, "train": {k: v for k, v in stored["train"].items()
                                      if k != "overlong"}}
    problem = study_db._mismatch(load_study_spec(as_written), study, url)
    assert "would train differently (changed: overlong)" in problem
