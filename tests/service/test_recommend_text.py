"""GET /recommend's notes: they begin with what decides the answer, as the command's text does,
and their hints name the route's query parameters, never the command's flags."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.recommender.test_recommend_text import ENCODER, flat, import_study
from weightsearch.service.app import create_app


@pytest.fixture
def client(tmp_path) -> TestClient:
    return TestClient(create_app(import_study(tmp_path, flat), log_dir=tmp_path))


def test_the_notes_name_query_parameters_not_flags(client):
    body = client.get("/recommend", params={"train_size": 3000}).json()
    [regime] = [n for n in body["notes"] if n.startswith("regime: ")]
    assert "set the `encoder`/`stage` query parameters to answer for another" in regime
    assert not any("--" in n for n in body["notes"]), body["notes"]
    typo = client.get("/recommend", params={"train_size": 3000, "encoder": "robertta-base"})
    assert typo.status_code == 400
    assert "GET /studies/{name} shows a study's encoder" in typo.text
    assert "inspect" not in typo.text


def test_the_notes_begin_with_the_equivalent_weights_and_the_nearest_evidence(client):
    body = client.get("/recommend", params={"train_size": 3000, "encoder": ENCODER}).json()
    first, second = body["notes"][:2]
    assert first.startswith("equivalent: weights 1-15 cannot be told apart from the best at "
                            "sizes like yours (mytask); ")
    assert first.endswith("the choice hardly matters")
    assert second.startswith("nearest evidence in the asked regime: mytask, 3,000 training "
                             "examples (your study mine/mytask, 3 seeds per weight)")
    assert body["equivalent"] == [1, 15] and body["choice_matters"] is False
    assert body["saturates_at"] is None and body["asked_regime_sizes"]["sizes"] == [3000]
    assert body["interval"][0] <= 1 and body["interval"][1] >= 15
    row = next(e for e in body["evidence"] if e["task"] == "mytask")
    assert row["within_seed_noise"] == [1, 3, 6, 9, 12, 15]
    assert body["summary"] == [first, second]  # the same sentences, as a field of their own
