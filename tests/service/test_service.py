"""The REST service: routes through FastAPI's TestClient, token enforcement, a real uvicorn."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.helpers import ROOT, SAMPLE, TABLE2, launched_study, real_server
from weightsearch.cli import main
from weightsearch.service.app import create_app
from weightsearch.studies.importer import import_file

RTE_AT_3 = "central_task,task_type,train_size,central_weight,seed,metric\n" + "".join(
    f"rte,classification,2490,{w},1,{m}\n" for w, m in ((1, 60), (3, 70), (15, 61)))
# Stands in for `weightsearch launch|resume` so the tests start no sweep: it logs its arguments.
# What a job is started with: its argv, and the storage it gets through its environment.
ECHO = [sys.executable, "-c", "import os, sys; print('STORAGE', os.environ.get("
        "'WEIGHTSEARCH_STORAGE')); print('ARGS', *sys.argv[1:])"]
YAML = {"Content-Type": "application/yaml"}
SPEC = """
study: {name}
train: {{data_dir: data/glue_sample, tasks: [rte, mrpc], epochs: 1}}
central_tasks: [rte]
weights: [1, 9]
"""


@pytest.fixture(scope="module")
def url(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp('svc')
    url = f"sqlite:///{folder / 'studies.db'}"
    import_file(TABLE2, "siwlm-paper", url)
    launched_study(url, "ready", SAMPLE, folder / "runs")  # one that resume accepts
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
    assert sorted(s["study"] for s in studies) == ["ready", "siwlm-paper"]
    assert next(s for s in studies if s["study"] == "siwlm-paper")["complete"] == 48
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
    # The imported Table 2 replaces the built-in copy; the shipped SST-2 ladder still counts.
    assert body["central_weight"] >= 9 and body["source"] == "both"
    sources = {(e["study"].split("/")[0], e["source"]) for e in body["evidence"]}
    assert sources == {("siwlm-paper", "studies"), ("sst2-ladder", "prior"),
                       ("clip-weight", "prior")}
    assert client.get("/recommend?train_size=300000&task_type=ranking").json()[
        "central_weight"] < body["central_weight"]
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


YAML = {"Content-Type": "application/yaml"}


def test_launch_validates_then_starts_a_subprocess(client, tmp_path):
    bad = client.post("/studies", content="study: x\nweights: [0]\n", headers=YAML)
    assert bad.status_code == 400 and bad.json()["problems"]
    # A search whose every weight is one treatment by its settings (no auxiliary task).
    alone = client.post("/studies", headers=YAML, content=SPEC.format(name="alone").replace(
        "tasks: [rte, mrpc]", "tasks: [rte]"))
    assert alone.status_code == 400
    said = alone.json()["detail"]  # one problem: the detail says it
    assert "would train with no auxiliary task" in said and "allow_inert: true" in said, said
    exists = client.post("/studies", content=SPEC.format(name="siwlm-paper"),
                         headers=YAML)
    assert exists.status_code == 409 and "resume" in exists.json()["detail"]

    started = client.post("/studies", content=SPEC.format(name="fresh-study"),
                          headers=YAML)
    assert started.status_code == 202, started.text
    body = started.json()
    assert body["study"] == "fresh-study"
    args = _wait_for_log(body["log"])
    # The storage URL reaches the job through its environment, never its argv.
    assert "ARGS launch" in args and "--storage" not in args and "STORAGE sqlite:///" in args


SLOW = [sys.executable, "-c",
        "import sys, time; print('ARGS', *sys.argv[1:], flush=True); time.sleep(60)"]


def test_one_launch_per_study_name_whatever_the_timing(url, tmp_path):
    """Until a launch's driver has written the study, the running job holds the name: a
    second POST, at once or concurrently, gets 409 with the first job's id."""
    from concurrent.futures import ThreadPoolExecutor

    client = TestClient(create_app(url, log_dir=tmp_path, command=SLOW))
    body = SPEC.format(name="only-once")
    def post(_):
        while True:  # a body arriving while another is read gets 429: retry, as it says
            answer = client.post("/studies", content=body, headers=YAML)
            if answer.status_code != 429:
                return answer
            time.sleep(0.05)

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(post, range(4)))
    codes = sorted(a.status_code for a in answers)
    assert codes == [202, 409, 409, 409], [a.text for a in answers]
    job = next(a.json()["job"] for a in answers if a.status_code == 202)
    assert all(f"being launched by job {job}" in a.json()["detail"]
               for a in answers if a.status_code == 409)
    import datetime as dt
    info = client.get(f"/jobs/{job}").json()
    assert dt.datetime.fromisoformat(info["started"]).tzinfo is not None  # ISO 8601, UTC
    assert info["ended"] is None
    assert client.delete(f"/jobs/{job}").status_code in (200, 202)
    deadline = time.monotonic() + 30
    while client.get(f"/jobs/{job}").json()["state"] not in ("cancelled", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    # The job ended without creating the study: the name is free again.
    again = client.post("/studies", content=body, headers=YAML)
    assert again.status_code == 202
    client.delete(f"/jobs/{again.json()['job']}")


def test_a_posted_study_with_a_missing_relative_path_says_where_paths_start(client):
    r = client.post("/studies", headers=YAML, content="study: rel\ntrain: {data_dir: "
                    "no/such/glue, tasks: [rte]}\n")
    assert r.status_code == 400
    problems = r.json()["problems"]
    assert any("start at the server's working directory" in p for p in problems)
    # one rule, not the file's one beside it (a POSTed study has no folder)
    assert not any("start at the file's folder" in p for p in problems), problems


def test_resume_route(client):
    assert client.post("/studies/nope/resume").status_code == 404
    imported = client.post("/studies/siwlm-paper/resume")  # holds no study file to resume
    assert imported.status_code == 409 and "imported" in imported.json()["detail"]
    r = client.post("/studies/ready/resume")
    assert r.status_code == 202
    log = _wait_for_log(r.json()["log"])
    assert "ARGS resume ready\n" in log and "STORAGE sqlite:///" in log


@pytest.mark.parametrize("exposed", [True, False])
def test_post_routes_need_the_token_whenever_it_is_set(url, tmp_path, monkeypatch, exposed):
    monkeypatch.setenv("WS_TEST_TOKEN", "s3cret")
    client = TestClient(create_app(url, token_env="WS_TEST_TOKEN", require_token=exposed,
                                   log_dir=tmp_path, command=ECHO))
    assert client.get("/studies").status_code == 200  # reading needs no token
    assert client.post("/studies/ready/resume").status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    assert client.post("/studies/ready/resume", headers=wrong).status_code == 403
    right = {"Authorization": "Bearer s3cret"}
    assert client.post("/studies/ready/resume", headers=right).status_code == 202


def test_serve_refuses_a_public_host_without_a_token(monkeypatch, capsys):
    monkeypatch.delenv("WEIGHTSEARCH_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", "1"]) == 2
    assert "WEIGHTSEARCH_TOKEN" in capsys.readouterr().err


@pytest.mark.integration
def test_real_server_answers(url):
    with real_server(url) as base:
        rec = httpx.get(f"{base}/recommend", params={"train_size": 2500}).json()
        assert rec["central_weight"] >= 9
        assert httpx.get(f"{base}/studies/siwlm-paper/mnli").json()["central_tasks"][0][
            "best_weight"] == 1


def test_docs_pages_load_every_asset_from_the_server(client):
    import re

    for page in ("/docs", "/redoc"):
        html = client.get(page).text
        refs = re.findall(r'(?:src|href)="([^"]+)"', html) + re.findall(r"url: '([^']+)'", html)
        assert refs, page
        for ref in refs:
            assert ref.startswith("/"), f"{page} loads {ref} from elsewhere"
            assert client.get(ref).status_code == 200, ref
        assert "/openapi.json" in html and "://" not in html, page
    assert '"validatorUrl": null' in client.get("/docs").text  # no online validator badge


def test_openapi_schema_is_typed(client):
    schema = client.get("/openapi.json").json()
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    launch = schema["paths"]["/studies"]["post"]
    assert {"application/yaml", "application/json"} <= set(launch["requestBody"]["content"])
    assert {"400", "401", "409", "202"} <= set(launch["responses"])
    assert launch["security"] == [{"HTTPBearer": []}]
    assert "404" in schema["paths"]["/studies/{name}/resume"]["post"]["responses"]
    assert "404" in schema["paths"]["/studies/{name}"]["get"]["responses"]
    error = schema["components"]["schemas"]["ErrorBody"]
    assert "detail" in error["properties"]
    for path, methods in schema["paths"].items():
        for method, op in methods.items():
            ok = next(v for k, v in op["responses"].items() if k.startswith("2"))
            if "text/plain" not in ok["content"]:  # the job log is text
                assert "$ref" in ok["content"]["application/json"]["schema"], (method, path)


def test_jobs_can_be_listed_followed_and_cancelled(url, tmp_path):
    sleeper = [sys.executable, "-c",
               "import sys, time; print('ARGS', *sys.argv[1:], flush=True); time.sleep(60)"]
    client = TestClient(create_app(url, log_dir=tmp_path, command=sleeper))
    job = client.post("/studies/ready/resume").json()["job"]
    deadline = time.monotonic() + 20
    while "ARGS resume" not in client.get(f"/jobs/{job}/log").text:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    info = client.get(f"/jobs/{job}").json()
    assert info["state"] == "running" and info["progress"].startswith("ARGS resume ready")
    assert [j["id"] for j in client.get("/jobs").json()["jobs"]] == [job]
    assert client.delete(f"/jobs/{job}").status_code == 200
    while client.get(f"/jobs/{job}").json()["state"] != "cancelled":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    pid = info["pid"]
    assert not Path(f"/proc/{pid}").exists(), "the cancelled child was not reaped"
    assert client.get("/jobs/999").status_code == 404


def test_finished_jobs_are_reaped(client):
    job = client.post("/studies/ready/resume").json()
    deadline = time.monotonic() + 20
    while client.get(f"/jobs/{job['job']}").json()["state"] != "succeeded":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert not Path(f"/proc/{job['pid']}").exists(), "the finished child stayed defunct"


def test_every_error_has_one_shape(client):
    """{"detail": str, "problems": [str]} for a 422, a 404 of an unknown route, a 405, a 400
    of an invalid study file and a 404 of a route; the schema documents 422 with it."""
    answers = {
        "422": client.get("/recommend?train_size=0&task_type=generation"),
        "404 route": client.get("/no/such/route"),
        "405": client.put("/health"),
        "400": client.post("/studies", content="study: x\nweights: [0]\n", headers=YAML),
        "404": client.get("/jobs/12345"),
    }
    for what, r in answers.items():
        body = r.json()
        assert set(body) == {"detail", "problems"}, (what, body)
        assert isinstance(body["detail"], str) and isinstance(body["problems"], list), what
        assert all(isinstance(p, str) for p in body["problems"]), what
    invalid = answers["422"].json()
    assert invalid["detail"].startswith("invalid request: ")
    assert any(p.startswith("query.train_size:") for p in invalid["problems"])
    assert any(p.startswith("query.task_type:") for p in invalid["problems"])
    assert answers["400"].json()["problems"]
    # One line each; a single problem is the detail and is not repeated in problems.
    assert all("\n" not in r.json()["detail"] for r in answers.values())
    assert invalid["detail"] == "invalid request: 2 problems, each in `problems`"
    for body in (r.json() for r in answers.values()):
        assert body["detail"] not in body["problems"]
    single = client.get("/recommend?train_size=0").json()
    assert single["problems"] == [] and single["detail"].startswith("invalid request: query.")
    schema = client.get("/openapi.json").json()
    documented = schema["paths"]["/recommend"]["get"]["responses"]["422"]
    assert documented["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
    assert "HTTPValidationError" not in schema["components"]["schemas"]


def test_jobs_are_capped_private_and_behind_the_token(url, tmp_path, monkeypatch):
    """Beyond MAX_JOBS running jobs a launch or resume gets 429 with Retry-After; the jobs'
    folder and logs are the service user's alone; reading jobs takes the token as writing
    does."""
    import stat

    from weightsearch.service.launcher import MAX_JOBS

    monkeypatch.setenv("WS_TEST_TOKEN", "s3cret")
    folder = tmp_path / "jobs"
    client = TestClient(create_app(url, log_dir=folder, command=SLOW,
                                   token_env="WS_TEST_TOKEN"))
    auth = {"Authorization": "Bearer s3cret"}
    started = [client.post("/studies/ready/resume", headers=auth) for _ in range(MAX_JOBS)]
    assert [r.status_code for r in started] == [202] * MAX_JOBS
    try:
        over = client.post("/studies/ready/resume", headers=auth)
        assert over.status_code == 429 and over.headers["Retry-After"] == "60"
        assert f"{MAX_JOBS} jobs are running" in over.json()["detail"]
        launch = client.post("/studies", content=SPEC.format(name="one-more"),
                             headers={**YAML, **auth})
        assert launch.status_code == 429
        for path in ("/jobs", f"/jobs/{started[0].json()['job']}",
                     f"/jobs/{started[0].json()['job']}/log"):
            assert client.get(path).status_code == 401, path
            assert client.get(path, headers={"Authorization": "Bearer nope"}).status_code == 403
            assert client.get(path, headers=auth).status_code == 200, path
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        for log in folder.glob("*.log"):
            assert stat.S_IMODE(log.stat().st_mode) == 0o600
    finally:
        for r in started:
            client.delete(f"/jobs/{r.json()['job']}", headers=auth)


@pytest.mark.postgres
def test_a_storage_password_is_never_printed_or_passed_on_argv(postgres_url, tmp_path, capsys):
    """PostgreSQL here trusts every password, so a URL with one is a working URL."""
    from weightsearch.studies.urls import shown_url

    secret = postgres_url.replace("://postgres@", "://postgres:pw-s3cret@")
    assert "pw-s3cret" in secret and shown_url(secret) == postgres_url.replace(
        "://postgres@", "://postgres:***@")
    assert main(["inspect", "no-such-study", "--storage", secret]) == 2
    err = capsys.readouterr().err
    assert "postgres:***@" in err and "pw-s3cret" not in err
    client = TestClient(create_app(secret, log_dir=tmp_path, command=ECHO))
    assert client.get("/health").status_code == 200
    launched_study(secret, "pw-paper", SAMPLE, tmp_path / "runs")
    log = _wait_for_log(client.post("/studies/pw-paper/resume").json()["log"])
    args = next(line for line in log.splitlines() if line.startswith("ARGS"))
    assert "pw-s3cret" not in args  # the job got the URL through its environment
    assert "pw-s3cret" not in json.dumps(client.get("/jobs").json())


def test_a_sqlite_file_replaced_under_the_service_is_read_afresh(tmp_path):
    """A backup copied over the study file: the service's open connections would go on
    reading the old file (its studies listed long after), while the jobs it starts open the
    path. It notices the file's new identity and reads the new one; a deleted file reads as
    no studies."""
    import shutil

    live, backup = tmp_path / "studies.db", tmp_path / "backup.db"
    # Written by another process, as a service's files are (this process keeps no connection
    # to them, which would keep the old file's write-ahead log at the path).
    imports = [["import", str(TABLE2), "--study", study, "--storage", f"sqlite:///{path}"]
               for study, path in (("before", live), ("restored", backup))]
    subprocess.run([sys.executable, "-c", "import sys; from weightsearch.cli import main; "
                    f"sys.exit(any(main(argv) for argv in {imports!r}))"],
                   check=True, capture_output=True, cwd=ROOT)
    client = TestClient(create_app(f"sqlite:///{live}", log_dir=tmp_path, command=ECHO))
    assert [s["study"] for s in client.get("/studies").json()["studies"]] == ["before"]
    staged = tmp_path / "staged.db"
    shutil.copyfile(backup, staged)
    staged.replace(live)  # what a restore does: a new file at the path
    assert [s["study"] for s in client.get("/studies").json()["studies"]] == ["restored"]
    assert client.get("/studies/restored").status_code == 200
    live.unlink()
    assert client.get("/studies").json()["studies"] == []
