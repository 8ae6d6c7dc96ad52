"""`weight_acts_on: sampling`: the searched central weight becomes the central task's sampling
rate. Each cell's run config must say so (He 2019's weighted selection, the central task at w,
each auxiliary at 1, the epoch ending with the central task; SIWLM's loss weight 1), the study
file must refuse what cannot combine with it, and readers must not judge its weights one
treatment from clipping records."""

from __future__ import annotations

from pathlib import Path

import pytest

from weightsearch.core.errors import ConfigError
from weightsearch.studies import schema
from weightsearch.sweep.space import CENTRAL_WEIGHT
from weightsearch.sweep.spec import load_study_spec


@pytest.fixture
def base(sample_data_dir: Path) -> dict:
    return {"study": "rate", "weight_acts_on": "sampling", "weights": [1, 4, 15],
            "train": {"data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc", "stsb"],
                      "epochs": 1}}


def _problems(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_study_spec(raw)
    return info.value.problems


def test_each_cell_draws_its_central_task_at_the_searched_rate(base: dict,
                                                               tmp_path: Path) -> None:
    spec = load_study_spec(base)
    assert spec.to_dict()["weight_acts_on"] == "sampling"
    for central, weight in (("rte", 4.0), ("mrpc", 15.0)):
        cfg = spec.for_cell(central, {CENTRAL_WEIGHT: weight}, 1, str(tmp_path))
        assert cfg.weighting.scheme == "siwlm" and cfg.weighting.central_weight == 1.0
        assert cfg.sampling.scheme == "weighted"
        assert dict(cfg.sampling.weights) == {central: weight}
        assert cfg.sampling.others == 1.0 and cfg.sampling.epoch_ends_with == central
        assert cfg.central_task == central


def test_the_default_leaves_stored_studies_as_they_were(base: dict) -> None:
    """A study file without the key is the loss weight, and its canonical form (its digest)
    does not change."""
    del base["weight_acts_on"]
    spec = load_study_spec(base)
    assert spec.weight_acts_on == "loss" and "weight_acts_on" not in spec.to_dict()
    cfg = spec.for_cell("rte", {CENTRAL_WEIGHT: 4.0}, 1, "/tmp/unused")
    assert cfg.weighting.central_weight == 4.0 and cfg.sampling.scheme == "shuffle"
    assert spec.digest() == load_study_spec({**base, "weight_acts_on": "loss"}).digest()


@pytest.mark.parametrize(("change", "says"), [
    ({"weight_acts_on": "samplin"}, "weight_acts_on: 'samplin' is not one of loss, sampling"),
    ({"train.sampling": {"scheme": "sqrt"}}, "train.sampling: weight_acts_on: sampling sets"),
    ({"train.batches": "fixed"}, "train.batches: fixed cannot be combined with weight_acts_on"),
    ({"fuse_cells": 2}, "fuse_cells: cells fuse only when they differ in the loss weighting"),
    ({"fuse_cells": "auto"}, "fuse_cells: cells fuse only when they differ in the loss "
                             "weighting"),
    ({"search": {"space": {CENTRAL_WEIGHT: [1, 9], "lr": [1e-4, 2e-4]}}},
     "the study must search the central weight alone"),
])
def test_what_cannot_combine_with_it_is_refused_naming_the_field(
        base: dict, change: dict, says: str) -> None:
    raw = {**base, "train": dict(base["train"])}
    for key, value in change.items():
        if key.startswith("train."):
            raw["train"][key[len("train."):]] = value
        else:
            raw[key] = value
    if "search" in change:
        del raw["weights"]
    found = _problems(raw)
    assert any(says in p for p in found), found


def test_a_sampling_rate_is_never_judged_one_treatment_by_its_clip_record() -> None:
    """A cell whose every central update was clipped is an arm member under the loss weight;
    the same record from a sampling-rate study is not (the clip cut the loss weight 1, not w)."""
    from weightsearch.studies.central import Cell, weight_acts_on
    from weightsearch.studies.treatments import clipped_away

    record = {"grad_clip": 1.0, "grad_clip_mode": "global",
              "tasks": {"rte": {"clip_share": 1.0, "updates": 12}}}

    def cell(clipping: dict) -> Cell:
        return Cell(study="rate/rte", central_task="rte", number=0, weight=15.0, seed=1,
                    state="complete", value=0.5, metrics={}, clipping=clipping)

    assert clipped_away(cell(record))
    rate = {**record, schema.WEIGHT_ACTS_ON: "sampling"}
    assert not clipped_away(cell(rate))
    assert weight_acts_on(rate) == "sampling" and weight_acts_on(record) == "loss"
    assert schema.clipping_label(1.0, "global", "sampling") == "rate-clip1"
    assert schema.clipping_label(0.0, None, "sampling") == "rate-noclip"


@pytest.mark.parametrize(("asked", "label"), [
    ("rate-clip1.0", "rate-clip1"), ("rate-uclip2", "rate-uclip2"), ("rate-noclip", "rate-noclip"),
    ("clip1", "clip1"),
])
def test_the_recommender_asks_for_a_sampling_rate_regime(asked: str, label: str) -> None:
    from weightsearch.recommender.asking import normalize_clipping

    assert normalize_clipping(asked) == label


@pytest.mark.parametrize("asked", ["rate-", "rate-clip0", "rateclip1", "rate-rate-clip1"])
def test_a_malformed_sampling_rate_regime_is_refused(asked: str) -> None:
    from weightsearch.recommender.asking import normalize_clipping

    with pytest.raises(ConfigError, match="led by rate-"):
        normalize_clipping(asked)
