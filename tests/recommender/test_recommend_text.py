"""The text of `weightsearch recommend`: it leads with what decides the answer (the nearest
evidence in the asked regime, and a plain sentence when the weight hardly matters at that size),
in plain words, with hints that name the command's flags; and `--evaluate` says plainly whether
the recommender beats the best simple rule."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from weightsearch.cli import main
from weightsearch.recommender.evaluation import CLEAR_GAIN, evaluation_summary, leave_one_task_out
from weightsearch.recommender.evidence import builtin_evidence, point_from_scores, prior_evidence
from weightsearch.recommender.recommend import recommend_from
from weightsearch.recommender.report import evaluation_text, recommendation_text
from weightsearch.studies.importer import import_file

GRID = (1, 3, 6, 9, 12, 15)
ENCODER = "my-lab/encoder"
HARDLY = "the choice hardly matters"


# Seed-to-seed noise, sd 0.01, drawn once for each weight and seed.
_NOISE = dict(zip([(w, s) for w in GRID for s in (1, 2, 3)],
                  np.random.default_rng(0).normal(0.0, 0.01, 3 * len(GRID)).round(4),
                  strict=True))


def _noise(weight: float, seed: int) -> float:
    return float(_NOISE[int(weight), seed])


def flat(weight: float, seed: int) -> float:
    return 0.80 + _noise(weight, seed)  # no weight better than another


def peaked(weight: float, seed: int) -> float:
    return 0.70 + 0.1 * (1 - ((weight - 9) / 8) ** 2) + _noise(weight, seed) / 5  # best at 9


def point(curve, size: int = 3000, task: str = "mytask"):
    values = {float(w): [curve(w, s) for s in (1, 2, 3)] for w in GRID}
    return point_from_scores(task, f"mine/{task}", size, "classification", "studies", values, True,
                             ENCODER, "multitask", None)


def import_study(tmp_path: Path, curve, size: int = 3000) -> str:
    """A study of the central task `mytask` imported into a fresh database, three seeds."""
    csv = tmp_path / "study.csv"
    csv.write_text("central_task,task_type,train_size,central_weight,seed,metric,encoder\n"
                   + "".join(f"mytask,classification,{size},{w},{s},{curve(w, s):.4f},{ENCODER}\n"
                             for w in GRID for s in (1, 2, 3)))
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    import_file(csv, "mine", url)
    return url


def _before_table(text: str) -> list[str]:
    lines = text.splitlines()
    return lines[:lines.index("")]


def test_the_text_leads_with_the_equivalent_weights_then_the_nearest_evidence():
    """At 4,000 examples (MiniLM, the default regime) the evidence nearest the size is the
    shipped ladder's sst2_4000, whose curve is flat: the first line says which weights cannot
    be told apart from the best and that the choice hardly matters, the second gives the point
    and a range that includes them, the third names the evidence, all before the notes and the
    table; the JSON carries the same."""
    evidence = builtin_evidence()
    rec = recommend_from(evidence, 4000)
    sst2 = next(p for p in evidence if p.task == "sst2_4000")
    low, high = min(sst2.within_noise), max(sst2.within_noise)
    text = recommendation_text(rec)
    first, second, third = text.splitlines()[:3]
    assert first.startswith(f"equivalent: weights {low:g}-{high:g} cannot be told apart from the "
                            f"best at sizes like yours (sst2_4000); ")
    assert first.endswith(HARDLY)
    assert second.startswith(f"recommended central weight: {rec.central_weight:g}  (plausible "
                             f"range {rec.interval[0]:g}-{rec.interval[1]:g}, never narrower")
    assert rec.interval[0] <= low and high <= rec.interval[1]
    assert third.startswith("nearest evidence in the asked regime: sst2_4000, 4,000 training "
                            "examples (built-in study sst2-ladder, 3 seeds per weight): best "
                            f"measured weight {sst2.best_weight:g}")
    # How flat: from the point's own verdict, not written in.
    assert f"every weight measured ({low:g}-{high:g}) is within seed noise" in third
    assert rec.summary == [first, third] and rec.notes[:2] == rec.summary
    assert rec.equivalent == [low, high] and rec.choice_matters is False
    assert rec.to_dict()["equivalent"] == [low, high]
    # The point has almost no influence on the answer, which is why it must be said first.
    row = next(e for e in rec.evidence if e["task"] == "sst2_4000")
    assert row["within_seed_noise"] == list(sst2.within_noise)
    assert text.index(third) < text.index("\ntask  ")


def test_a_flat_curve_near_the_size_says_the_weight_hardly_matters(tmp_path, capsys):
    url = import_study(tmp_path, flat)
    assert main(["recommend", "--train-size", "3000", "--encoder", ENCODER,
                 "--storage", url]) == 0
    head = _before_table(capsys.readouterr().out)
    assert head[0].startswith("equivalent: weights 1-15 cannot be told apart from the best at "
                              "sizes like yours (mytask); ") and head[0].endswith(HARDLY)
    assert head[1].startswith("recommended central weight: ") and "range 1-15" in head[1]
    assert head[2].startswith("nearest evidence in the asked regime: mytask, 3,000 training "
                              "examples (your study mine/mytask, 3 seeds per weight)")
    assert "its curve is flat: every weight measured (1-15) is within seed noise" in head[2]


def test_a_peaked_curve_near_the_size_says_the_choice_matters(tmp_path, capsys):
    url = import_study(tmp_path, peaked)
    assert main(["recommend", "--train-size", "3000", "--encoder", ENCODER,
                 "--storage", url, "--format", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["equivalent"] == [9.0, 9.0] and answer["choice_matters"] is True
    assert main(["recommend", "--train-size", "3000", "--encoder", ENCODER,
                 "--storage", url]) == 0
    text = capsys.readouterr().out
    head = _before_table(text)
    assert head[0].startswith("equivalent: weight 9 cannot be told apart from the best")
    assert "the choice matters" in head[0]
    assert head[2].startswith("nearest evidence in the asked regime: mytask, 3,000 training")
    assert "best measured weight 9, ahead of every other weight by more than seed noise: a " \
        "clear peak" in head[2]
    assert "hardly matters" not in text


def test_the_equivalent_weights_need_evidence_at_sizes_like_the_one_asked():
    """A flat curve 30x away is named as the nearest evidence, not as one like yours; a curve
    peaked on a plateau (6-12 within noise) makes the equivalent set that range only; one seed
    per weight says seed noise is unknown."""
    far = recommend_from([*prior_evidence(), point(flat)], 90_000, encoder=ENCODER)
    assert far.summary[0].startswith("equivalent: not measured here")
    assert far.equivalent is None and far.choice_matters is None
    assert far.summary[1].startswith("nearest evidence in the asked regime: mytask, 3,000 "
                                     "training examples, 30x fewer than yours")
    assert len(far.summary) == 2

    def plateau(weight: float, seed: int) -> float:
        return (0.80 if 6 <= weight <= 12 else 0.75) + _noise(weight, seed)

    rec = recommend_from([*prior_evidence(), point(plateau)], 3000, encoder=ENCODER)
    assert rec.summary[0].startswith("equivalent: weights 6-12 cannot be told apart from the "
                                     "best at sizes like yours (mytask); some weight measured "
                                     "there did worse")
    assert rec.equivalent == [6.0, 12.0] and rec.choice_matters is True
    assert rec.interval[0] <= 6 and rec.interval[1] >= 12
    assert "weights 6-12 are within seed noise of the best, weights 1, 3 and 15 do worse" \
        in rec.summary[1]
    one_seed = recommend_from(prior_evidence(), 2490, encoder="bert-base-uncased",
                              stage="finetuned")
    assert one_seed.summary[0].startswith("equivalent: not measured here")
    assert "rte, 2,490 training examples (the SIWLM paper's Table 2, 1 seed per weight)" in \
        one_seed.summary[1]
    assert "seed noise is unknown with one seed" in one_seed.summary[1]
    assert len(one_seed.summary) == 2


def test_plain_words_in_the_text_and_the_json_names_kept(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'none.db'}"
    assert main(["recommend", "--train-size", "4000", "--storage", url]) == 0
    text = capsys.readouterr().out
    for jargon in (r"\bsay\b", r"\blocated\b", r"effective points", r"\(disc\.\)"):
        assert not re.search(jargon, text), jargon
    header = next(line for line in text.splitlines() if line.startswith("task  "))
    assert re.search(r"best measured +best at +\+- sd +seeds +influence +regime", header)
    assert "tasks counted equally" in text and "more tasks with less influence" in text
    assert text.splitlines()[-1].startswith("key: best measured = ")
    assert "(discounted)" in text
    # The JSON keeps its field names.
    assert main(["recommend", "--train-size", "4000", "--storage", url, "--format",
                 "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"say", "location", "sd", "discounted"} <= set(out["evidence"][0])
    assert "effective_points" in out and out["summary"] == out["notes"][:len(out["summary"])]


def test_the_command_lines_hints_name_its_flags(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'none.db'}"
    assert main(["recommend", "--train-size", "4000", "--storage", url]) == 0
    text = capsys.readouterr().out
    assert "pass --encoder/--stage to answer for another" in text
    assert "query parameter" not in text
    assert main(["recommend", "--train-size", "4000", "--encoder", "robertta-base",
                 "--storage", url]) == 2
    assert "inspect shows each study's encoder" in capsys.readouterr().err
    http = recommend_from(builtin_evidence(), 4000, audience="http")
    assert any("set the `encoder`/`stage` query parameters to answer for another" in n
               for n in http.notes)
    assert not any("--" in n for n in http.notes)
    with pytest.raises(ValueError, match="audience"):
        recommend_from(builtin_evidence(), 4000, audience="email")


@pytest.fixture(scope="module")
def evaluated() -> tuple:
    """The built-in evidence's leave-one-task-out evaluation, computed once for the module
    (its rows are only read)."""
    return leave_one_task_out(builtin_evidence())


def _rows_with(rows: list[dict], edge: float) -> list[dict]:
    """The rows with the recommender's |error| set so that it leads the best simple rule by
    `edge` weight units on every task (no spread: the standard error is 0)."""
    rule = evaluation_summary(rows)["against_best_rule"]["rule"]
    return [{**r, "abs_error": r["baselines"][rule] - edge} for r in rows]


def test_evaluate_says_plainly_how_the_recommender_compares_with_the_best_rule(evaluated):
    rows, rate, over = evaluated
    summary = evaluation_summary(rows)
    versus = summary["against_best_rule"]
    means = summary["baselines"]
    best = min(means, key=means.get)
    assert versus["rule"] == best
    assert versus["rule_error"] == pytest.approx(means[best], abs=1e-3)
    assert versus["recommender_error"] == pytest.approx(summary["mean_abs_error"], abs=1e-3)
    diffs = [r["baselines"][best] - r["abs_error"] for r in rows]
    assert versus["edge"] == pytest.approx(sum(diffs) / len(diffs), abs=1e-3)
    # The shipped evidence: a lead smaller than twice its standard error.
    assert 0 < versus["edge"] < versus["clear_at"] and versus["verdict"] == "barely better"
    last = next(line for line in evaluation_text(rows, rate, over).splitlines()
                if line.startswith("the recommender is ") and "simple rule" in line)
    assert last.startswith("the recommender is barely better than the best simple rule, the "
                           f"paper's rule of thumb: mean |error| {versus['recommender_error']:.2f}"
                           f" against {versus['rule_error']:.2f} weight units, only "
                           f"{versus['edge']:.2f} closer per task")


@pytest.mark.parametrize(("edge", "verdict", "words"), [
    (2.0, "better", "closer per task on average, a clear gain"),
    (CLEAR_GAIN / 2, "barely better", "closer per task on average; a clear gain would be"),
    (0.0, "no better", "a difference of 0.00 per task"),
    (-CLEAR_GAIN / 2, "no better", "a difference of 0.25 per task"),
    (-2.0, "worse", "farther per task on average"),
])
def test_each_verdict_against_the_best_rule(evaluated, edge, verdict, words):
    rows, rate, over = evaluated
    moved = _rows_with(rows, edge)
    versus = evaluation_summary(moved)["against_best_rule"]
    assert versus["verdict"] == verdict and versus["edge"] == pytest.approx(edge, abs=1e-3)
    assert versus["clear_at"] == pytest.approx(CLEAR_GAIN)  # no spread: the margin decides
    last = next(line for line in evaluation_text(moved, rate, over).splitlines()
                if line.startswith("the recommender is ") and "simple rule" in line)
    assert last.startswith(f"the recommender is {verdict} than the best simple rule")
    assert words in last


def test_the_equivalent_weights_are_a_run_around_the_best_not_a_span_over_worse_ones():
    """Weights 1 and 15 both high, the middle ones worse: both ends are within noise of the
    best but 3-12 are not, so the equivalent range is the best end alone, not 1-15."""
    def ends_high(weight: float, seed: int) -> float:
        return (0.80 if weight in (1, 15) else 0.70) + _noise(weight, seed)

    rec = recommend_from([*prior_evidence(), point(ends_high)], 3000, encoder=ENCODER)
    mine = next(e for e in rec.evidence if e["task"] == "mytask")
    assert {1, 15} <= set(mine["within_seed_noise"]) and 6 not in mine["within_seed_noise"]
    assert rec.equivalent in ([1.0, 1.0], [15.0, 15.0]) and rec.choice_matters is True
