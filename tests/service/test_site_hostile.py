"""The results site against a hostile client and odd data: form fields the JSON route refuses
are refused by the page too (never a 500, never cut to another question), the across chart is
not redrawn for a field it ignores, the studies page counts the cells left as the JSON route
does, the charts survive degenerate studies, a browser gets a page (not JSON) when something
fails, each seed's dot lies within its weight's bar, and the 80% range is the law's."""

from __future__ import annotations

import re
from pathlib import Path

import optuna
import pytest
from fastapi.testclient import TestClient

from tests.site_data import seeded_results, site_database
from weightsearch.service.app import create_app
from weightsearch.service.ui import pages
from weightsearch.studies.importer import import_file


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> TestClient:
    return TestClient(create_app(site_database(tmp_path_factory.mktemp("site"))),
                      raise_server_exceptions=False)


@pytest.mark.parametrize("size", ["\u00b2", "\u0665", "\uff15"])  # superscript, Arabic, wide
def test_a_training_size_in_other_digits_is_refused_as_by_the_json_route(client, size):
    assert client.get("/recommend", params={"train_size": size}).status_code == 422
    response = client.get("/ui/recommend", params={"train_size": size})
    assert response.status_code == 400
    assert '<p class="problem" role="alert">train_size: ' in response.text


def test_an_over_long_field_is_named_not_cut_to_another_question(client):
    encoder = "e" * 300  # a valid name once cut to 200 characters
    assert client.get("/recommend", params={"train_size": 5000,
                                            "encoder": encoder}).status_code == 422
    response = client.get("/ui/recommend", params={"train_size": 5000, "encoder": encoder})
    assert response.status_code == 400
    assert "encoder: at most 200 characters" in response.text
    assert 'id="central-weight"' not in response.text


def test_every_invalid_field_is_named_at_once(client):
    response = client.get("/ui/recommend", params={
        "train_size": "-1", "task_type": "poetry", "encoder": "../..", "stage": "third",
        "clipping": "' onfocus='x"})
    assert response.status_code == 400
    named = re.findall(r'<p class="problem" role="alert">(\w+): ', response.text)
    assert named == ["train_size", "task_type", "encoder", "stage", "clipping"]
    assert "' onfocus='x" not in response.text


def test_the_across_chart_is_not_redrawn_for_a_training_size_it_ignores(client, monkeypatch):
    client.get("/ui/across", params={"encoder": "all-minilm-l6-v2"})
    drawn = []
    real = pages.across_chart
    monkeypatch.setattr(pages, "across_chart", lambda *a: drawn.append(1) or real(*a))
    pages_seen = {client.get("/ui/across", params={"encoder": "all-minilm-l6-v2",
                                                   "train_size": size}).text
                  for size in (7, 5000, 900000)}
    assert drawn == [] and len(pages_seen) == 1


def test_left_counts_the_cells_of_a_grid_not_started_and_not_the_running_ones(tmp_path):
    url = f"sqlite:///{tmp_path / 'grid.db'}"
    import_file(seeded_results(tmp_path / "s.csv"), "grid", url)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    for task in ("rte", "mrpc", "sst2"):  # as a launch records its grid: 40 cells, 21 reached
        study = optuna.load_study(study_name=f"grid/{task}", storage=url)
        for key, value in (("source", "sweep"), ("spec", {}), ("grid_cells", 40)):
            study.set_user_attr(key, value)
    client = TestClient(create_app(url))
    row = client.get("/studies").json()["studies"][0]
    assert row["not_started"] == 3 * 19 and row["running"] == 0
    html = client.get("/").text
    left = re.search(r'<td data-field="left">(\d+)</td>', html).group(1)
    assert int(left) == row["pending"] + row["not_started"]


def _curve(weights, low, high):
    return [{"weight": w, "mean": (low + high) / 2, "sd": None, "n": 1, "low": low,
             "high": high} for w in weights]


@pytest.mark.parametrize("curve, cells", [
    (_curve([3.0], 60.0, 61.0), [{"central_weight": 3.0, "seed": 1, "state": "complete",
                                   "value": 60.0}]),  # one weight
    (_curve([1.0, 2.0], 60.0, 60.0), [{"central_weight": w, "seed": 1, "state": "complete",
                                       "value": 60.0} for w in (1.0, 2.0)]),  # all equal
    ([], [{"central_weight": 1.0, "seed": 1, "state": "running", "value": None}]),  # none done
])
def test_a_degenerate_study_still_draws_a_chart(curve, cells):
    task = {"name": "s/t", "curve": curve, "cells": cells, "primary_metric": "accuracy"}
    chart, drawn, _ = pages.curve_chart(task, cells)
    assert chart.startswith("<svg") and "nan" not in chart and "inf" not in chart
    assert drawn == sum(c["state"] == "complete" for c in cells)


def _broken_database(folder: Path) -> str:
    (folder / "broken.db").write_bytes(b"not a database" * 100)
    return f"sqlite:///{folder / 'broken.db'}"


def test_a_browser_gets_a_page_when_something_fails(tmp_path, client):
    broken = TestClient(create_app(_broken_database(tmp_path)), raise_server_exceptions=False)
    answers = [broken.get("/"), broken.get("/ui/studies/demo"),
               client.get("/ui/studies/demo", params={"page": "abc"}), client.get("/ui/nope")]
    assert [r.status_code for r in answers] == [503, 503, 400, 404]
    assert all(r.headers["content-type"].startswith("text/html") for r in answers)
    assert "The study database is not answering" in answers[0].text
    assert "page: a whole number from 1" in answers[2].text
    assert all("Traceback" not in r.text for r in answers)


def test_each_seed_dot_lies_within_its_weights_bar(tmp_path):
    url = f"sqlite:///{tmp_path / 'twice.db'}"
    import_file(seeded_results(tmp_path / "s.csv"), "twice", url)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.load_study(study_name="twice/rte", storage=url)
    first = next(t for t in study.trials if t.params["central_weight"] == 3.0)
    study.add_trial(optuna.trial.create_trial(  # the same cell again: another point, say
        params=first.params, distributions=first.distributions, value=75.0,
        user_attrs=first.user_attrs, system_attrs=first.system_attrs))
    html = TestClient(create_app(url)).get("/ui/studies/twice/rte").text
    bar = re.search(r'<line class="seed-range" x1="([\d.]+)" x2="[\d.]+" y1="([\d.]+)" '
                    r'y2="([\d.]+)"><title>weight 3:', html)
    dots = re.findall(rf'<circle class="seed" cx="{bar.group(1)}" cy="([\d.]+)"', html)
    low_y, high_y = float(bar.group(2)), float(bar.group(3))
    assert len(dots) == 3  # one per seed, the trial trained twice averaged into its seed
    assert all(high_y - 0.1 <= float(y) <= low_y + 0.1 for y in dots)


def test_the_range_called_80_percent_is_the_laws_80_percent_interval(client):
    answer = client.get("/recommend", params={"train_size": 5000}).json()
    assert answer["interval"] != answer["law_interval"]  # widened: the case in question
    html = client.get("/ui/recommend", params={"train_size": 5000}).text
    low, high = answer["law_interval"]
    assert re.search(rf"80% interval:\s*<span id=\"law-interval\">{low:g} to {high:g}<", html)
    wide_low, wide_high = answer["interval"]
    assert f'<span id="interval">{wide_low:g} to {wide_high:g}</span>\n(never narrower' in html
    assert "(80%)" not in html


def test_the_across_chart_leaves_out_what_a_log_axis_cannot_place():
    band = {"sizes": [100, 1000], "centre": [10.0, 8.0], "low": [7.0, 5.0], "high": [13.0, 11.0]}
    evidence = [{"task": "good", "source": "studies", "train_size": 500, "location": 9.0,
                 "sd": None},
                {"task": "zero", "source": "studies", "train_size": 0, "location": 9.0},
                {"task": "negative", "source": "studies", "train_size": -5, "location": 9.0},
                {"task": "nan", "source": "studies", "train_size": 700,
                 "location": float("nan")}]
    chart, legend = pages.across_chart(evidence, band)
    assert chart.count('r="3.5"') == 1 and "good (studies): 500 examples" in chart
    assert [row["count"] for row in legend] == [1]
