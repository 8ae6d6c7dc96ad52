"""The REST service: routes through FastAPI's TestClient, token enforcement, a real uvicorn."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from studies.importer import import_file
from studies.service import create_app
from weightsearch.cli import main

ROOT = Path(__file__).resolve().parents[1]
TABLE2 = ROOT / "studies" / "data" / "siwlm_table2.csv"
RTE_AT_3 = "central_task,task_type,train_size,central_weight,seed,metric\n" + "".join(
    f"rte,classification,2490,{w},1,{m}\n" for w, m in ((1, 60), (3, 70), (15, 61)))
# Stands in for `weightsearch launch|resume` so the tests start no sweep: it logs its arguments.
ECHO = [sys.executable, "-c", "import sys; print('ARGS', *sys.argv[1:])"]
SPEC = """
study: {name}
train: {{data_dir: data/glue_sample, tasks: [rte, mrpc], epochs: 1}}
central_tasks: [rte]
weights: [1, 9]
"""


@pytest.fixture(scope="module")
def url(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('svc') / 'studies.db'}"
    import_file(TABLE2, "siwlm-paper", url)
    return url


@pytest.fixture
def client(url, tmp_path) -> TestClient:
    return TestClient(create_app(url, log_dir=tmp_path, command=ECHO))


def _wait_for_log(path: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = Path(path).read_text()
        if "ARGS" in text:
            return text
        time.sleep(0.1)
    raise AssertionError(f"{path} stayed empty")


def test_read_routes(client):
    assert client.get("/health").json()["status"] == "ok"
    studies = client.get("/studies").json()["studies"]
    assert [s["study"] for s in studies] == ["siwlm-paper"] and studies[0]["complete"] == 48
    rte = client.get("/studies/siwlm-paper/rte").json()["central_tasks"]
    assert len(rte) == 1 and rte[0]["best_weight"] == 15 and len(rte[0]["cells"]) == 6
    assert len(client.get("/studies/siwlm-paper").json()["central_tasks"]) == 8
    missing = client.get("/studies/nope")
    assert missing.status_code == 404 and "no study named 'nope'" in missing.json()["detail"]
    assert "/recommend" in client.get("/openapi.json").json()["paths"]


def test_recommend_route_and_its_validation(client):
    small = client.get("/recommend", params={"train_size": 2500})
    assert small.status_code == 200
    body = small.json()
    assert body["central_weight"] >= 9 and body["source"] == "studies"
    assert client.get("/recommend?train_size=300000&task_type=ranking").json()[
        "central_weight"] < 6
    for bad in ("train_size=abc", "train_size=0", "train_size=-3", "",
                "train_size=100&task_type=generation"):
        r = client.get(f"/recommend?{bad}")
        assert r.status_code == 422 and "detail" in r.json(), bad


def test_recommend_cache_follows_the_database(tmp_path):
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    client = TestClient(create_app(url, refresh_s=0.1))
    assert client.get("/recommend?train_size=2490").json()["source"] == "prior"
    f = tmp_path / "rte.csv"
    f.write_text(RTE_AT_3)
    import_file(f, "mine", url)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the refresh runs in the background
        body = client.get("/recommend?train_size=2490").json()
        if body["source"] == "both":
            break
        time.sleep(0.1)
    assert body["source"] == "both"
    assert any(e["study"] == "mine/rte" for e in body["evidence"])


def test_launch_validates_then_starts_a_subprocess(client, tmp_path):
    bad = client.post("/studies", content="study: x\nweights: [0]\n")
    assert bad.status_code == 400 and bad.json()["problems"]
    exists = client.post("/studies", content=SPEC.format(name="siwlm-paper"))
    assert exists.status_code == 409 and "resume" in exists.json()["detail"]

    started = client.post("/studies", content=SPEC.format(name="fresh-study"))
    assert started.status_code == 202, started.text
    body = started.json()
    assert body["study"] == "fresh-study"
    args = _wait_for_log(body["log"])
    assert "ARGS launch" in args and "--storage sqlite:///" in args


def test_resume_route(client):
    assert client.post("/studies/nope/resume").status_code == 404
    r = client.post("/studies/siwlm-paper/resume")
    assert r.status_code == 202
    assert "ARGS resume siwlm-paper --storage" in _wait_for_log(r.json()["log"])


def test_post_routes_need_the_token_when_exposed(url, tmp_path, monkeypatch):
    monkeypatch.setenv("WS_TEST_TOKEN", "s3cret")
    client = TestClient(create_app(url, token_env="WS_TEST_TOKEN", require_token=True,
                                   log_dir=tmp_path, command=ECHO))
    assert client.get("/studies").status_code == 200  # reading needs no token
    assert client.post("/studies/siwlm-paper/resume").status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    assert client.post("/studies/siwlm-paper/resume", headers=wrong).status_code == 403
    right = {"Authorization": "Bearer s3cret"}
    assert client.post("/studies/siwlm-paper/resume", headers=right).status_code == 202


def test_serve_refuses_a_public_host_without_a_token(monkeypatch, capsys):
    monkeypatch.delenv("WEIGHTSEARCH_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", "1"]) == 2
    assert "WEIGHTSEARCH_TOKEN" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.integration
def test_real_server_answers(url):
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "weightsearch.cli", "serve", "--port", str(port), "--storage", url],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ}, cwd=ROOT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stdout.read().decode()
            assert time.monotonic() < deadline, "the server did not come up in 60 s"
            time.sleep(0.2)
        rec = httpx.get(f"{base}/recommend", params={"train_size": 2500}).json()
        assert rec["central_weight"] >= 9
        assert httpx.get(f"{base}/studies/siwlm-paper/mnli").json()["central_tasks"][0][
            "best_weight"] == 1
    finally:
        proc.terminate()
        proc.wait(timeout=20)
