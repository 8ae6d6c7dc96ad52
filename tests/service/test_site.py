"""The results site through FastAPI's TestClient: each page answers with the numbers of its JSON
route, escapes every name, sends a Content-Security-Policy without inline script or style, and
answers bad form input with a page that names the field. (tests/browser drives a real browser.)"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from tests.site_data import HOSTILE, SEEDS, WEIGHTS, site_database
from weightsearch.service.app import create_app
from weightsearch.service.ui import pages


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> TestClient:
    return TestClient(create_app(site_database(tmp_path_factory.mktemp("site"))))


def _tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    """Every start tag of a page with its attributes, as a browser's parser reads them."""
    found: list[tuple[str, dict[str, str | None]]] = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append((tag, dict(attrs)))

    Tags().feed(html)
    return found


def _policy(response) -> dict[str, str]:
    policy = response.headers["content-security-policy"]
    return {part.split()[0]: part for part in map(str.strip, policy.split(";"))}


def test_every_page_sends_a_policy_that_allows_no_inline_code(client):
    for path in ("/", "/ui/studies/demo", "/ui/recommend?train_size=5000", "/ui/across",
                 "/ui/studies/nope", "/ui/recommend?train_size=0"):
        response = client.get(path)
        assert response.headers["content-type"].startswith("text/html"), path
        policy = _policy(response)
        assert "unsafe-inline" not in response.headers["content-security-policy"], path
        assert policy["default-src"] == "default-src 'none'"
        assert policy["script-src"] == "script-src 'self'"
        assert policy["frame-ancestors"] == "frame-ancestors 'none'"
        assert response.headers["x-content-type-options"] == "nosniff"
        tags = _tags(response.text)
        assert not [t for t, attrs in tags if t == "style" or "style" in attrs], path
        assert all("src" in attrs for t, attrs in tags if t == "script"), path
        assert not [a for _, attrs in tags for a in attrs if a.startswith("on")], path


def test_the_studies_page_lists_every_study_and_escapes_a_hostile_name(client):
    html = client.get("/").text
    listed = {s["study"] for s in client.get("/studies").json()["studies"]}
    assert listed == {"demo", "siwlm-paper", HOSTILE}
    assert html.count("<tr data-study=") == 3
    assert HOSTILE not in html  # only its escaped form
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert f'href="/ui/studies/{quote(HOSTILE, safe="/")}"' in html
    page = client.get(f"/ui/studies/{quote(HOSTILE)}")
    assert page.status_code == 200 and HOSTILE not in page.text
    assert "&lt;img src=x onerror=alert(1)&gt;" in page.text


def test_a_study_page_draws_every_seed_and_weight_of_its_json_route(client):
    detail = client.get("/studies/demo").json()
    html = client.get("/ui/studies/demo").text
    assert len(detail["central_tasks"]) == 3
    assert html.count('<circle class="seed"') == 3 * len(WEIGHTS) * len(SEEDS)
    assert html.count('<line class="seed-range"') == 3 * len(WEIGHTS)
    for task in detail["central_tasks"]:  # the verdict in words, as the route gives it
        assert task["verdict"].replace("'", "&#39;") in html
    one = client.get("/ui/studies/demo/rte").text
    assert one.count('<circle class="seed"') == len(WEIGHTS) * len(SEEDS)


def test_the_paper_study_shows_each_tasks_single_run(client):
    html = client.get("/ui/studies/siwlm-paper").text
    assert html.count('<section class="central"') == 8


def test_a_missing_study_is_a_page_that_says_so(client):
    response = client.get("/ui/studies/nope")
    assert response.status_code == 404
    assert "no study named &#39;nope&#39;" in response.text


def test_the_form_gives_the_json_routes_answer(client):
    answer = client.get("/recommend", params={"train_size": 5000}).json()
    html = client.get("/ui/recommend", params={"train_size": 5000}).text
    weight = re.search(r'id="central-weight">([^<]+)<', html).group(1)
    assert float(weight) == answer["central_weight"]
    low, high = answer["interval"]
    assert f'id="interval">{low:g} to {high:g}<' in html
    for share in answer["evidence_shares"]:
        assert f"{share['share']:.1%}</text>" in html


@pytest.mark.parametrize("query, field", [
    ({"train_size": "0"}, "train_size"), ({"train_size": "12abc"}, "train_size"),
    ({"train_size": "5", "task_type": "poetry"}, "task_type"),
    ({"train_size": "5", "stage": "third"}, "stage"),
    ({"train_size": "5", "clipping": "clip-1"}, "clipping"),
    ({"train_size": "5", "encoder": "../../etc"}, "encoder")])
def test_bad_form_input_is_a_page_naming_the_field(client, query, field):
    response = client.get("/ui/recommend", params=query)
    assert response.status_code == 400
    assert re.search(rf'<p class="problem" role="alert">{field}: ', response.text)
    assert 'id="central-weight"' not in response.text


def test_the_across_page_draws_each_located_task_and_the_laws_band(client):
    answer = client.get("/recommend", params={"train_size": 100}).json()
    located = [e for e in answer["evidence"] if e.get("location") is not None]
    html = client.get("/ui/across").text
    drawn = re.findall(r'<circle class="regime regime-\d" cx="[^"]+" cy="[^"]+" r="3.5">', html)
    assert len(drawn) == len(located)
    assert html.count('<polygon class="law-band"') == 1
    assert html.count('<polyline class="law"') == 1
    assert client.get("/ui/across", params={"clipping": "x"}).status_code == 400


def test_only_the_sites_own_files_are_served(client):
    assert client.get("/ui/static/ui.js").headers["content-type"].startswith("text/javascript")
    for name in ("routes.py", "..%2Froutes.py", "%2e%2e/pages.py", "templates"):
        assert client.get(f"/ui/static/{name}").status_code == 404


def test_a_large_study_is_paginated_and_its_points_capped():
    cells = [{"central_task": "t", "central_weight": float(1 + i % 15), "seed": i,
              "state": "complete", "value": 50.0 + i % 7} for i in range(5_000)]
    curve = [{"weight": float(w), "mean": 53.0, "sd": 2.0, "n": 333, "low": 50.0, "high": 56.0}
             for w in range(1, 16)]
    task = {"name": "big/t", "central_task": "t", "curve": curve, "cells": cells,
            "primary_metric": "accuracy"}
    view = pages.study_page({"study": "big", "central_tasks": [task]}, page=3)["tasks"][0]
    assert view["pages"] == 25 and view["page"] == 3
    assert [c["seed"] for c in view["cell_page"]] == list(range(400, 600))
    assert view["points_drawn"] == 0 and view["points_hidden"] == 5_000
    assert view["chart"].count('class="seed-range"') == 15
    last = pages.study_page({"study": "big", "central_tasks": [task]}, page=99)["tasks"][0]
    assert last["page"] == 25 and len(last["cell_page"]) == 200


def test_each_study_row_names_its_regime(client):
    html = client.get("/").text
    rows = re.findall(r"<tr data-study=(.*?)</tr>", html, flags=re.S)
    assert len(rows) == 3
    assert all("encoder not recorded, multitask" in row or "bert-base-uncased, finetuned" in row
               for row in rows)


def test_pages_answer_head_as_link_checkers_ask(client):
    for path in ("/", "/ui/studies/demo", "/ui/recommend", "/ui/across"):
        response = client.head(path)
        assert response.status_code == 200, path
        assert response.headers["content-type"].startswith("text/html")
    assert client.post("/ui/recommend").status_code == 405  # read-only
