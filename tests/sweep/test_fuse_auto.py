"""`fuse_cells: auto` in the study file and the study database: the value is accepted and
stored as a number is, a misspelling is refused naming the fix, and a card's measurement is
stored in a central task's study where every driver finds it (`weightsearch.sweep.fuse_auto`)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from weightsearch.core.errors import ConfigError
from weightsearch.sweep.fuse_auto import memory_attr, remember, stored
from weightsearch.sweep.spec import load_study_spec
from weightsearch.sweep.study_file import AUTO_FUSE, MAX_FUSED, study_file_schema
from weightsearch.trainer.fuse_size import FuseMemory

H200 = FuseMemory("NVIDIA H200", 140_000.0, 143_771.0, 1_600.0, 3_100.0)
H100 = FuseMemory("NVIDIA H100 80GB HBM3", 80_000.0, 81_559.0, 1_600.0, 3_100.0)


@pytest.fixture
def base(sample_data_dir: Path) -> dict:
    return {"study": "unit", "train": {"data_dir": str(sample_data_dir),
                                       "tasks": ["rte", "mrpc", "stsb"], "epochs": 1}}


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_study_spec(raw)
    return info.value.problems


@pytest.mark.parametrize("value", ["auto", "Auto", " AUTO "])
def test_auto_is_stored_and_read_back_as_a_number_is(base: dict, value: str) -> None:
    spec = load_study_spec({**base, "fuse_cells": value})
    assert spec.fuse_cells == AUTO_FUSE and spec.fuse_auto and spec.fuse_cap == MAX_FUSED
    assert spec.to_dict()["fuse_cells"] == AUTO_FUSE
    assert load_study_spec(spec.to_dict()).fuse_cells == AUTO_FUSE
    alone = load_study_spec(base)
    assert not alone.fuse_auto and alone.fuse_cap == 1
    # how the study trains, not what it learns: the same study to a launch without it
    from weightsearch.sweep.study_db import HOW_KEYS

    assert "fuse_cells" in HOW_KEYS
    assert {k: v for k, v in spec.to_dict().items() if k not in HOW_KEYS} == \
        {k: v for k, v in alone.to_dict().items() if k not in HOW_KEYS}


def test_the_schema_takes_auto() -> None:
    import jsonschema

    schema = study_file_schema()
    jsonschema.validate({"study": "s", "fuse_cells": "auto"}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"study": "s", "fuse_cells": "autox"}, schema)


@pytest.mark.parametrize("value", ["autox", 0, "", "max"])
def test_a_value_that_is_neither_is_refused_with_the_fix(base: dict, value) -> None:
    [problem] = problems_of({**base, "fuse_cells": value})
    assert problem.startswith(f"fuse_cells: {value!r}: give how many cells one trial trains "
                              f"together, a number from 1 to {MAX_FUSED}")
    assert "auto (as many as the trial's GPU memory holds, measured)" in problem


def test_auto_with_asha_is_refused(base: dict) -> None:
    [problem] = problems_of({**base, "fuse_cells": "auto", "scheduler": "asha"})
    assert problem.startswith("fuse_cells: ASHA stops whole trials")


def test_a_cards_measurement_is_found_by_key_and_card(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    rte = optuna.create_study(study_name="s/rte", storage=url)
    mrpc = optuna.create_study(study_name="s/mrpc", storage=url)
    key = "/models/minilm|128|32|auto"
    remember(rte, key, H200)
    remember(mrpc, key, H100)
    remember(mrpc, "/models/bert|128|32|auto", H200)  # another key: not this one's
    rte.set_user_attr("fuse_memory/foreign", "not a measurement")
    again = [optuna.load_study(study_name=n, storage=url) for n in ("s/rte", "s/mrpc")]
    found = stored(again, key)
    assert sorted(found) == [H100.device, H200.device]
    assert FuseMemory.from_plain(found[H200.device]) == H200
    assert FuseMemory.from_plain(found[H100.device]) == H100
    # one attribute per key and card: two drivers measuring two cards never overwrite
    assert memory_attr(key, H200.device) != memory_attr(key, H100.device)
    assert len(memory_attr("/a/very/long/path" * 100, H200.device)) < 40
