"""Hostile strings in every path setting of a run config and a study file: each one is either
taken or refused with the one ConfigError/StorageError naming its setting, never a traceback
(a NUL byte, an over-long name, a lone surrogate once crashed `launch` and made the service
answer 500)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import SAMPLE
from weightsearch.core.errors import ConfigError, StorageError
from weightsearch.core.files import NAME_MAX, path_problem

RUN = {"tasks": ["rte", "mrpc"], "data_dir": str(SAMPLE), "epochs": 1}
STUDY = {"study": "hostile", "train": RUN, "central_tasks": ["rte"], "weights": [1, 9]}

# Where a run config and a study file hold paths (dotted; [0] is a list's first item).
RUN_FIELDS = ("data_dir", "output_dir", "cache_dir", "init_from", "encoder",
              "tasks[0].data_dir", "distill.teachers.rte[0]", "tracking.mlflow")
STUDY_FIELDS = ("workdir", "storage", *(f"train.{f}" for f in RUN_FIELDS))

HOSTILE = st.one_of(
    st.sampled_from(["a\x00b", "\x00", "x" * (NAME_MAX + 1), "d/" + "y" * 300 + "/z",
                     "/" + "/".join(["q" * 200] * 30), "\ud800", "a/\udfff/b"]),
    st.text(min_size=1, max_size=40).map(lambda t: t + "\x00" + t),
    st.integers(NAME_MAX + 1, 600).map(lambda n: "n" * n),
)


def _put_run(run: dict[str, Any], field: str, value: str) -> None:
    """Set one of RUN_FIELDS in a run config, in place."""
    if field == "tasks[0].data_dir":
        run["tasks"] = [{"name": run["tasks"][0], "data_dir": value}, *run["tasks"][1:]]
    elif field == "distill.teachers.rte[0]":
        run["distill"] = {"teachers": {"rte": [value]}}
    elif field == "tracking.mlflow":
        run["tracking"] = {"mlflow": value}
    else:
        run[field] = value


def _put(config: dict[str, Any], field: str, value: str) -> dict[str, Any]:
    """A copy of a run config or a study file with `field` (RUN_FIELDS, STUDY_FIELDS) set."""
    out = copy.deepcopy(config)
    if field.startswith("train."):
        _put_run(out["train"], field.removeprefix("train."), value)
    elif "train" in out:
        out[field] = value
    else:
        _put_run(out, field, value)
    return out


@pytest.mark.parametrize("field", RUN_FIELDS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=HOSTILE)
def test_a_hostile_run_config_path_is_refused_by_name(field: str, value: str) -> None:
    from weightsearch.trainer.config import parse_config

    raw = _put(RUN, field, value)
    with pytest.raises(ConfigError) as caught:
        parse_config(raw)
    name = field.replace(".0", "[0]")
    assert any(p.startswith(name.split("[")[0]) for p in caught.value.problems), \
        caught.value.problems


@pytest.mark.parametrize("field", STUDY_FIELDS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=HOSTILE)
def test_a_hostile_study_file_path_is_refused_by_name(field: str, value: str,
                                                      tmp_path_factory) -> None:
    from weightsearch.sweep.spec import load_study_spec

    folder = tmp_path_factory.mktemp("hostile")
    # A storage URL's hostile part is its SQLite file's path (the URL itself stays one).
    hostile = f"sqlite:///{folder}/{value}" if field == "storage" else value
    raw = _put({**STUDY, "workdir": str(folder / "runs"),
                "storage": f"sqlite:///{folder / 'studies.db'}"}, field, hostile)
    with pytest.raises((ConfigError, StorageError)) as caught:
        spec = load_study_spec(raw)
        from weightsearch.studies.url_checks import check_url

        check_url(spec.storage, write=True)
    text = str(caught.value)
    named = "storage (its SQLite file): " if field == "storage" else \
        field.split("[")[0].replace(".0", "") + ("" if "[" in field else ": ")
    assert named in text, text


def test_the_messages_name_the_cause(tmp_path: Path) -> None:
    assert "NUL byte" in path_problem("a\x00b", "workdir")
    assert "is 300 bytes long, over the 255" in path_problem("d/" + "y" * 300, "workdir")
    assert "cannot encode" in path_problem("\ud800", "workdir")
    assert path_problem(str(tmp_path / "fine"), "workdir") is None
    # From a file too: the YAML reader takes a NUL escape, the check refuses it.
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({**RUN, "cache_dir": "c\x00d"}))
    from weightsearch.trainer.config import load_config

    with pytest.raises(ConfigError, match=r"cache_dir: .* NUL byte"):
        load_config(config)
