"""Schemathesis over the service's OpenAPI schema: generated requests get documented answers
that match the declared models, and never a 500."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402

from tests.helpers import TABLE2  # noqa: E402
from weightsearch.service.app import create_app  # noqa: E402
from weightsearch.studies.importer import import_file  # noqa: E402

ECHO = [sys.executable, "-c", "print('launched')"]


def _app(tmp: Path):
    url = f"sqlite:///{tmp / 'studies.db'}"
    import_file(TABLE2, "siwlm-paper", url)
    return create_app(url, log_dir=tmp / "runs", command=ECHO)


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    return _app(tmp_path_factory.mktemp("schemathesis"))


@pytest.mark.slow
def test_every_route_conforms_to_its_schema(app):
    from schemathesis.specs.openapi.checks import ignored_auth, positive_data_acceptance

    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 10
    for operation in operations:
        # A study file's rules (tasks known, data folder present) go beyond what a schema can
        # say, so a schema-valid body may rightly get 400 there.
        lax = operation.method.upper() == "POST" and operation.path == "/studies"
        excluded = [positive_data_acceptance] if lax else []
        # This server has no token set, so its write routes rightly answer without one; the
        # bearer check itself is tested with a token in test_service_hostile.py.
        excluded.append(ignored_auth)

        _explore(operation.as_strategy(), excluded)


def _explore(strategy, excluded) -> None:
    from hypothesis import given

    @given(case=strategy)
    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
    def check(case):
        case.call_and_validate(excluded_checks=excluded)

    check()


def test_the_study_file_body_schema_is_the_settings_declarations(app):
    """POST /studies publishes the study file's JSON Schema, made from the same declarations
    the parser checks: a body the schema refuses, the parser refuses with the field's path."""
    import jsonschema

    from weightsearch.core.errors import ConfigError
    from weightsearch.sweep.spec import KEYS, load_study_spec
    from weightsearch.trainer.config import PRECISIONS

    content = app.openapi()["paths"]["/studies"]["post"]["requestBody"]["content"]
    body = content["application/json"]["schema"]
    assert set(body["properties"]) == set(KEYS) and body["required"] == ["study"]
    train = body["properties"]["train"]["properties"]
    assert train["epochs"] == {"type": "integer", "minimum": 1,
                               "description": "epochs of the multi-task stage"}
    assert train["precision"]["enum"] == list(PRECISIONS)
    validator = jsonschema.Draft202012Validator(body)
    for bad, problem in (({"study": "s", "train": {"tasks": ["rte"], "epochs": 0}},
                          "train.epochs: 0 is out of range"),
                         ({"study": ".hidden"}, "study: '.hidden' is not a valid name"),
                         ({"study": "s", "max_failures": -1}, "max_failures: -1 is out of")):
        assert not validator.is_valid(bad)
        with pytest.raises(ConfigError) as info:
            load_study_spec(bad)
        assert any(p.startswith(problem) for p in info.value.problems), info.value.problems
