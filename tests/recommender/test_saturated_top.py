"""A saturated top: weights whose every central update was clipped (global clipping) are one
treatment, so the recommender must not read a best weight off their labels."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from weightsearch.recommender.recommend import recommend
from weightsearch.recommender.task_curve import locate_best, saturated_top
from weightsearch.studies.importer import import_file

CLIP_STUDY = Path(__file__).resolve().parents[2] / "recommender" / "data" / "sst2_clip_minilm.csv"


def test_saturated_top_is_where_every_weight_up_is_saturated() -> None:
    assert saturated_top({1: False, 3: False, 15: True}) == 15
    assert saturated_top({1: False, 6: True, 9: True, 15: True}) == 6
    assert saturated_top({1: False, 6: True, 9: False, 15: True}) == 15  # 9 still acted
    assert saturated_top({1: True, 15: False}) is None  # the top acted: no plateau
    assert saturated_top({1: True, 9: True}) == 1  # the whole grid: nothing acts
    assert saturated_top({}) is None


def _scores(top: float) -> dict[float, list[float]]:
    return {1: [0.70, 0.71, 0.69, 0.70], 3: [0.75, 0.76, 0.74, 0.75],
            top: [0.80, 0.81, 0.79, 0.80]}


@pytest.mark.parametrize("top", [6.0, 9.0, 15.0])
def test_a_winning_plateau_says_at_least_the_last_acting_weight(top: float) -> None:
    """The plateau scores 5 points above 3 on every seed: every draw is the plateau's, so the
    best is at least 3 (the last weight that acted), whatever the plateau is called."""
    located = locate_best(_scores(top), paired=True, train_size=700, plateau_from=top)
    assert located is not None
    assert located.at_least == 3.0 and located.at_most is None
    # Without the clip record the same numbers read as a curve still rising at the label.
    rising = locate_best(_scores(top), paired=True, train_size=700)
    assert rising.location > 3.0 + 0.5 * (top - 3.0) - 1e-9


def test_an_acting_winner_is_located_below_the_plateau() -> None:
    values = {1: [0.70, 0.71, 0.69], 3: [0.80, 0.81, 0.79], 6: [0.74, 0.75, 0.73],
              15: [0.60, 0.61, 0.59]}
    located = locate_best(values, paired=True, train_size=700, plateau_from=15)
    assert located is not None and located.at_least is None
    assert 2.0 <= located.location <= 4.5  # 3's cell among the acting weights 1, 3, 6
    relabelled = {**{w: v for w, v in values.items() if w != 15}, 9.0: values[15]}
    assert locate_best(relabelled, paired=True, train_size=700, plateau_from=9) == located


def test_no_acting_weight_locates_nothing() -> None:
    assert locate_best({6: [0.8, 0.81], 15: [0.8, 0.81]}, paired=True, plateau_from=6) is None


@pytest.fixture(scope="module")
def clip1_rows() -> pd.DataFrame:
    rows = pd.read_csv(CLIP_STUDY)
    rows = rows[rows["central_task"] == "sst2_700-clip1"].drop(columns=["encoder"])
    return rows.assign(central_task="relabel")


def test_relabelling_the_saturated_weight_does_not_move_the_answer(
        clip1_rows: pd.DataFrame, tmp_path: Path) -> None:
    """The clipping study's clip1 cells (weight 15 clipped every central update on every seed)
    imported under a new name, once as measured and once with 15 called 9 or 12, the scores and
    clip records unchanged: the answer at 700 rows may not follow the label (before the
    plateau it did: 10.1, 7.9 and 8.9)."""
    answers = {}
    for top in (15, 9, 12):
        folder = tmp_path / str(top)
        folder.mkdir()
        rows = clip1_rows.copy()
        rows.loc[rows["central_weight"] == 15, "central_weight"] = top
        rows.to_csv(folder / "rows.csv", index=False)
        url = f"sqlite:///{folder / 'studies.db'}"
        import_file(folder / "rows.csv", "relabelled", url)
        answers[top] = recommend(700, "classification", url, encoder="unknown")
    weights = [a.central_weight for a in answers.values()]
    assert max(weights) - min(weights) <= 1.0, weights
    # The evidence point itself says "at least 3": 3 is the last weight that acted.
    for answer in answers.values():
        mine = next(e for e in answer.evidence if e["task"] == "relabel")
        assert mine["at_least"] == 3.0, mine
