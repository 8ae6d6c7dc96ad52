"""Round 4 of hostile requests against a real `weightsearch serve` (uvicorn) on loopback: slow
bodies, lone surrogates, duplicate keys, the Allow header of 405s, and studies that
`weightsearch launch|resume` would refuse."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers import SAMPLE, TABLE2, launched_study, serve
from weightsearch.service.request_guard import (
    BODY_GRACE_S,
    BODY_TIMEOUT_S,
    MAX_WRITES_PER_ADDRESS,
)
from weightsearch.studies.importer import import_file

TOKEN = "r0und4"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json", **AUTH}
HTTP = httpx.Client(timeout=10)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A copy of the RTE and MRPC samples that the tests may damage."""
    folder = tmp_path_factory.mktemp("round4-data")
    for task in ("RTE", "MRPC"):
        shutil.copytree(SAMPLE / task, folder / task)
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory, data):
    """The server's base URL; its database holds an imported study (siwlm-paper), a plain
    Optuna study (other-tool), and launched ones (ready; moved, whose data is gone)."""
    import optuna

    folder = tmp_path_factory.mktemp("round4")
    url = f"sqlite:///{folder / 'studies.db'}"
    import_file(TABLE2, "siwlm-paper", url)
    launched_study(url, "ready", SAMPLE, folder / "runs")
    moved = folder / "moved"
    shutil.copytree(data, moved)
    launched_study(url, "moved", moved, folder / "runs")
    (moved / "MRPC" / "train.tsv").unlink()  # its data is no longer all there
    optuna.create_study(study_name="other-tool", storage=url)
    proc, port = serve(url, folder, TOKEN)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def _health_within(base: str, seconds: float) -> None:
    """/health from a new connection answers 200 within `seconds`."""
    start = time.monotonic()
    with httpx.Client(timeout=seconds + 3) as fresh:
        assert fresh.get(f"{base}/health").status_code == 200
    assert time.monotonic() - start < seconds, time.monotonic() - start


def _slow_body(port: int, token: bool) -> socket.socket:
    """A POST /studies whose head says 60,000 bytes of JSON follow, and which sends one."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /studies HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              + (f"Authorization: Bearer {TOKEN}\r\n".encode() if token else b"")
              + b"Content-Length: 60000\r\n\r\n{")
    return s


def _answer_then_close(s: socket.socket, timeout: float) -> tuple[int, float]:
    """The status the server answered and when; asserts that it then closed the socket."""
    s.settimeout(timeout)
    start, received = time.monotonic(), b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := s.recv(65536):
            received += chunk
    assert received.startswith(b"HTTP/1.1 "), received  # an answer, and the socket closed
    return int(received.split()[1]), time.monotonic() - start


def test_slow_bodies_are_refused_from_their_headers_timed_out_or_capped(server):
    """60 connections send a whole head and one byte of a 60,000-byte body: those without the
    token get 401 at once, without waiting for the body; of those with it, one address holds
    at most MAX_WRITES_PER_ADDRESS (the rest get 429 at once), and those get 408 once the body
    falls behind the minimum rate. /health answers a new client all along, and every slow
    socket is answered and closed."""
    port = _port(server)
    assert MAX_WRITES_PER_ADDRESS < 30
    bare = [_slow_body(port, token=False) for _ in range(30)]
    bearing = [_slow_body(port, token=True) for _ in range(30)]
    try:
        _health_within(server, 2.0)
        refused = [_answer_then_close(s, 2.0) for s in bare]
        assert {code for code, _ in refused} == {401}, refused
        answers = [_answer_then_close(s, BODY_TIMEOUT_S + 5) for s in bearing]
        _health_within(server, 2.0)
    finally:
        for s in bare + bearing:
            s.close()
    codes = [code for code, _ in answers]
    # The first MAX_WRITES_PER_ADDRESS are read until they time out; the rest find no room.
    assert set(codes) == {408, 429} and codes.count(408) >= MAX_WRITES_PER_ADDRESS, answers
    # One byte in: the body falls behind the rate soon after the grace, well before the cap.
    assert max(took for code, took in answers if code == 408) < BODY_GRACE_S + 3, answers


def test_half_open_heads_leave_health_answering(server):
    """Round 3's case again: 50 connections that sent half a request head and stopped."""
    port = _port(server)
    stalled = []
    try:
        for _ in range(50):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"POST /studies HTTP/1.1\r\nHost: 127.0")
            stalled.append(s)
        for _ in range(5):  # at once, not after the 10 s head timeout (a loaded machine
            _health_within(server, 4.0)  # may take a second or two to answer at all)
    finally:
        for s in stalled:
            s.close()


def test_a_key_given_twice_is_refused_naming_it(server):
    for body, key in (('{"study": "a", "study": "b"}', "study"),
                      ('{"study": "a", "\\u0073tudy": "b"}', "study"),
                      ('{"study": "a", "search": {"space": [{"x": 1, "x": 2}]}}', "x")):
        r = HTTP.post(f"{server}/studies", content=body, headers=JSON)
        assert r.status_code == 400 and f"the key {key!r} twice" in r.json()["detail"], r.text


def test_two_content_types_are_refused(server):
    """The size limit follows the Content-Type; with two, the guard and the route could read
    different ones (a YAML body let through under JSON's larger limit)."""
    s = socket.create_connection(("127.0.0.1", _port(server)))
    body = b"study: x\n" + b"#" * 20000
    s.sendall(b"POST /studies HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/yaml\r\n"
              b"Content-Type: application/json\r\n"
              + f"Authorization: Bearer {TOKEN}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
              + body)
    status, _ = _answer_then_close(s, 10)
    assert status == 400


def test_a_lone_surrogate_is_refused_naming_its_field(server, data):
    spec = {"study": "surrogate", "train": {"data_dir": str(data), "tasks": ["rte", "mrpc"]},
            "weights": [1]}
    for where, body in (
            ("train.data_dir", {**spec, "train": {**spec["train"], "data_dir": "/tmp/\ud800"}}),
            ("workdir", {**spec, "workdir": "/tmp/runs-\udc80"}),
            ("train.tasks[1]", {**spec, "train": {**spec["train"], "tasks": ["rte", "\udfff"]}}),
    ):
        text = json.dumps(body)  # ensure_ascii: the surrogate travels as a \\udXXX escape
        assert "\\ud" in text
        r = HTTP.post(f"{server}/studies", content=text, headers=JSON)
        assert r.status_code == 400, r.text
        assert f"{where}: holds" in r.json()["detail"] and "surrogate" in r.text, r.text
    assert HTTP.get(f"{server}/jobs", headers=AUTH).json()["jobs"] == []


def test_405_lists_every_method_of_the_path(server):
    def allowed(method: str, path: str) -> set[str]:
        r = HTTP.request(method, f"{server}{path}", headers=AUTH)
        assert r.status_code == 405, (method, path, r.text)
        return {m.strip() for m in r.headers["allow"].split(",")}

    assert allowed("OPTIONS", "/studies") == {"GET", "POST"}
    assert {"GET", "DELETE"} <= allowed("PUT", "/jobs/1")
    # Not a study named "ready/resume": the route that starts resumes, which takes POST.
    assert allowed("GET", "/studies/ready/resume") == {"POST"}
    assert allowed("DELETE", "/studies/siwlm-paper/rte") == {"GET"}
    assert HTTP.get(f"{server}/studies/siwlm-paper/rte").status_code == 200
    r = HTTP.post(f"{server}/studies/siwlm-paper/rte/resume", headers=AUTH)
    assert r.status_code == 404 and "without /<central task>" in r.json()["detail"], r.text


def _command_refusal(study: dict) -> str:
    """What `weightsearch launch` says of this study file, from the functions it calls."""
    from weightsearch.core.errors import WeightsearchError
    from weightsearch.sweep import study_db
    from weightsearch.sweep.spec import load_study_spec

    spec = load_study_spec(study)
    with pytest.raises(WeightsearchError) as refused:
        for central in spec.central_tasks:
            study_db.describe(spec, central)
    return str(refused.value)


def test_launch_refuses_what_the_command_refuses_without_a_job(server, data, tmp_path):
    """A missing train file, a label outside the task's set: the command's message, 400."""
    broken = tmp_path / "data"
    shutil.copytree(data, broken)
    (broken / "MRPC" / "train.tsv").unlink()
    study = {"study": "no-train-file", "train": {"data_dir": str(broken),
             "tasks": ["rte", "mrpc"], "epochs": 1}, "central_tasks": ["rte"],
             "weights": [1], "workdir": str(tmp_path / "runs")}
    bad_label = tmp_path / "labels"
    shutil.copytree(data, bad_label)
    rows = (bad_label / "RTE" / "train.tsv").read_text().splitlines()
    rows[2] = rows[2].rsplit("\t", 1)[0] + "\tmaybe"
    (bad_label / "RTE" / "train.tsv").write_text("\n".join(rows) + "\n")
    labelled = {**study, "study": "bad-label",
                "train": {**study["train"], "data_dir": str(bad_label)}}
    for body, says in ((study, "file not found"), (labelled, "label 'maybe'")):
        r = HTTP.post(f"{server}/studies", content=json.dumps(body), headers=JSON)
        assert r.status_code == 400 and says in r.json()["detail"], r.text
        assert _command_refusal(body) in r.json()["detail"]
    assert HTTP.get(f"{server}/jobs", headers=AUTH).json()["jobs"] == []


def test_resume_refuses_what_the_command_refuses_without_a_job(server):
    """An imported study, a plain Optuna study of another tool, a launched study whose data
    is gone: the command's message, 4xx, and no job."""
    for name, code, says in (("siwlm-paper", 409, "imported, not launched"),
                             ("other-tool", 409, "holds no study file"),
                             ("moved", 400, "file not found")):
        r = HTTP.post(f"{server}/studies/{name}/resume", headers=AUTH)
        assert r.status_code == code and says in r.json()["detail"], (name, r.text)
    assert HTTP.get(f"{server}/jobs", headers=AUTH).json()["jobs"] == []
