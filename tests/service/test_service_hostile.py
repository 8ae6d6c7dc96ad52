"""Hostile requests against a real `weightsearch serve` (uvicorn) on loopback: each one gets a
4xx at once, for at most 100 ms of the server's CPU time, nothing is launched, and /health keeps
answering."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from tests.helpers import SAMPLE, TABLE2, serve
from weightsearch.cli import main
from weightsearch.service.request_guard import is_loopback
from weightsearch.studies.importer import import_file

T = TypeVar("T")
TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# What refusing one hostile request may cost the server, in CPU-seconds (its user and system
# time, every thread; CPU time, not the clock: a machine busy with other jobs slows the clock,
# not the work). Unbounded parsing of these bodies would take seconds.
FAST_CPU_S = 0.1
BURST_CPU_S = 0.5  # eight bodies at once, one of them read, and /health polled all along
# A server that answers "at once" answers well within this on a loaded machine; one held up
# by the hostile requests before it waits out their timeouts (HEAD_TIMEOUT_S, 10 s) or more.
PROMPT_S = 5.0
HTTP = httpx.Client(timeout=10)  # one client: building one costs more than an answer


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    url = f"sqlite:///{folder / 'studies.db'}"
    import_file(TABLE2, "siwlm-paper", url)
    proc, port = serve(url, folder, TOKEN)
    _SERVER_PIDS[port] = proc.pid
    try:
        httpx.get(f"http://127.0.0.1:{port}/studies", timeout=30)  # warm the study cache
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


_SERVER_PIDS: dict[int, int] = {}  # each test server's process, by its port


def _server_cpu(port: int) -> float:
    """CPU-seconds the server on `port` has used so far (user and system, every thread)."""
    fields = Path(f"/proc/{_SERVER_PIDS[port]}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _raw(port: int, request: bytes) -> tuple[int, float]:
    """Sends raw bytes; the status code and the seconds until the status line arrived."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        start = time.monotonic()
        # The server may answer before reading everything; the answer is still there.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(request)
        head = b""
        while b"\r\n" not in head:
            chunk = s.recv(4096)
            assert chunk, f"connection closed without an answer: {head!r}"
            head += chunk
        return int(head.split()[1]), time.monotonic() - start


def _refused_cheaply(port: int, send: Callable[[], T]) -> T:
    """What `send()` returns, once it has checked that the server answered at once (not after
    waiting out a timeout) and spent at most FAST_CPU_S of its CPU time on it."""
    cpu, start = _server_cpu(port), time.monotonic()
    answer = send()
    took, used = time.monotonic() - start, _server_cpu(port) - cpu
    assert took < PROMPT_S and used < FAST_CPU_S, (answer, took, used)
    return answer


def _post(port: int, body: bytes | str, content_type: str, **headers) -> tuple[int, dict]:
    """POST /studies; the status code and the body of an answer given cheaply."""
    r = _refused_cheaply(port, lambda: HTTP.post(
        f"http://127.0.0.1:{port}/studies", content=body,
        headers={"Content-Type": content_type, **AUTH, **headers}))
    return r.status_code, r.json()


def _raw_cheaply(port: int, request: bytes) -> int:
    """The status code of `request` sent raw, answered cheaply."""
    code, _ = _refused_cheaply(port, lambda: _raw(port, request))
    return code


def _health_answers(port: int) -> None:
    start = time.monotonic()
    assert HTTP.get(f"http://127.0.0.1:{port}/health").status_code == 200
    assert time.monotonic() - start < PROMPT_S


def test_yaml_alias_bomb_is_refused_fast(server):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n"
        for i in range(7))
    code, body = _post(server, bomb, "application/yaml")
    assert code == 400 and "alias" in body["detail"], body
    _health_answers(server)


def test_deep_json_and_deep_yaml_get_400_not_500(server):
    for text, kind in (("[" * 20_000 + "]" * 20_000, "application/json"),
                       ('{"a":' * 50 + "1" + "}" * 50, "application/json"),
                       ("[" * 5000 + "]" * 5000, "application/yaml")):
        code, body = _post(server, text, kind)
        assert code == 400 and "deeper" in body["detail"], (kind, body)
    _health_answers(server)


@pytest.mark.parametrize("field,value", [("workdir", "runs\x00x"), ("workdir", "r/" + "a" * 300),
                                         ("train.cache_dir", "c\x00d"),
                                         ("train.data_dir", "d/" + "b" * 300)])
def test_a_path_no_file_system_takes_gets_400_naming_it(server, field, value):
    import json

    study = {"study": "paths", "train": {"tasks": ["rte", "mrpc"], "data_dir": str(SAMPLE)},
             "central_tasks": ["rte"], "weights": [1, 9]}
    if field.startswith("train."):
        study["train"][field.removeprefix("train.")] = value
    else:
        study[field] = value
    code, body = _post(server, json.dumps(study), "application/json")
    assert code == 400, body
    assert f"{field}: " in " ".join([body["detail"], *body["problems"]]), body


def test_json_with_a_key_given_twice_is_refused_like_yaml(server):
    text = '{"study": "../../etc", "train": {"tasks": ["rte", "mrpc"]}, "study": "ok"}'
    code, body = _post(server, text, "application/json")
    assert code == 400 and "gives the key 'study' twice" in body["detail"], body
    nested = '{"study": "ok", "train": {"tasks": ["rte"], "tasks": ["rte", "mrpc"]}}'
    code, body = _post(server, nested, "application/json")
    assert code == 400 and "'tasks' twice" in body["detail"], body


def test_huge_body_is_refused_before_it_is_read(server):
    head = (b"POST /studies HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + TOKEN.encode() +
            b"\r\nContent-Length: 50000000\r\n\r\n" + b"{" * 1000)
    assert _raw_cheaply(server, head) == 413
    # With the token: without it, the answer is 401 from the head alone.
    chunked = (b"POST /studies HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % (2 << 20) + b" " * (2 << 20))
    assert _raw_cheaply(server, chunked) == 413
    _health_answers(server)


def test_cross_origin_and_plain_text_writes_are_refused(server):
    spec = '{"study": "drive-by", "weights": [1, 9]}'
    code, _ = _post(server, spec, "application/json", Origin="http://evil.example")
    assert code == 403
    code, _ = _post(server, spec, "application/json", **{"Sec-Fetch-Site": "cross-site"})
    assert code == 403
    code, body = _post(server, "study: drive-by\n", "text/plain")
    assert code == 415 and "application/json" in body["detail"]
    studies = HTTP.get(f"http://127.0.0.1:{server}/studies").json()["studies"]
    assert [s["study"] for s in studies] == ["siwlm-paper"]


def test_dns_rebinding_names_are_refused_on_a_loopback_server(server):
    # The attacker's name, re-pointed at 127.0.0.1: the browser sends it as Host and as Origin.
    evil = f"attacker.example:{server}"
    code, body = _post(server, '{"study": "rebound", "weights": [1, 9]}',
                             "application/json", Host=evil, Origin=f"http://{evil}")
    assert code == 400 and "--allow-host" in body["detail"], body
    assert body["problems"] == []
    for path in ("/studies", "/health", "/docs"):
        r = HTTP.get(f"http://127.0.0.1:{server}{path}", headers={"Host": evil})
        assert r.status_code == 400, path
    for host in (f"localhost:{server}", f"127.0.0.1:{server}", "127.0.0.2", f"[::1]:{server}"):
        assert HTTP.get(f"http://127.0.0.1:{server}/health",
                        headers={"Host": host}).status_code == 200, host
    studies = HTTP.get(f"http://127.0.0.1:{server}/studies").json()["studies"]
    assert [s["study"] for s in studies] == ["siwlm-paper"]


def _burst(port: int, body: bytes, content_type: str) -> tuple[list[tuple[int, float]],
                                                                list[float]]:
    """Eight requests at once, each from its own connection, while another thread polls
    /health: each answer's status and seconds, and the seconds of each /health answer."""
    request = (b"POST /studies HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: " +
               content_type.encode() + b"\r\nAuthorization: Bearer " + TOKEN.encode() +
               b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    health: list[float] = []
    polling, stop = threading.Event(), threading.Event()

    def poll_health() -> None:
        with httpx.Client(timeout=10) as client:
            while not stop.is_set():
                start = time.monotonic()
                assert client.get(f"http://127.0.0.1:{port}/health").status_code == 200
                health.append(time.monotonic() - start)
                polling.set()

    poller = threading.Thread(target=poll_health)
    poller.start()
    try:
        assert polling.wait(10)
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: _raw(port, request), range(8)))
        time.sleep(0.05)  # /health once more after the burst
    finally:
        stop.set()
        poller.join()
    return answers, health


@pytest.mark.parametrize(("size", "codes"), [(42_000, {413}), (15_000, {400, 429})])
def test_a_burst_of_yaml_bodies_leaves_health_answering(server, size, codes):
    """42 KB of YAML is refused unread (YAML is capped at 16 KiB); 15 KB is read, by one
    request at a time (the others get 429 at once). Every answer comes at once, and the whole
    burst costs the server at most BURST_CPU_S (the one body read takes 4 ms to parse)."""
    body = "".join(f"setting_{i:05d}: value {i:05d}\n" for i in range(size // 27)).encode()
    assert size - 27 < len(body) <= size
    cpu = _server_cpu(server)
    answers, health = _burst(server, body, "application/yaml")
    used = _server_cpu(server) - cpu
    assert {code for code, _ in answers} <= codes, answers
    assert max(took for _, took in answers) < PROMPT_S, answers
    assert len(health) >= 2 and max(health) < PROMPT_S, health
    assert used < BURST_CPU_S, (used, len(health))


def test_the_token_guards_writes_on_loopback_too(server):
    r = HTTP.post(f"http://127.0.0.1:{server}/studies/siwlm-paper/resume")
    assert r.status_code == 401
    r = HTTP.post(f"http://127.0.0.1:{server}/studies/nope/resume", headers=AUTH)
    assert r.status_code == 404


def test_oversized_url_and_headers_get_414_and_431(server):
    assert _raw_cheaply(server, b"GET /studies/" + b"a" * (1 << 20) + b" HTTP/1.1\r\n"
                        b"Host: 127.0.0.1\r\n\r\n") == 414
    assert _raw_cheaply(server, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
                        + b"b" * (64 << 10) + b"\r\n\r\n") == 431
    assert _raw_cheaply(server, b"GET /studies/" + b"a" * 10_000 + b" HTTP/1.1\r\n"
                        b"Host: 127.0.0.1\r\n\r\n") == 414
    _health_answers(server)


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("127.attacker.example", False), ("0.0.0.0", False),
    ("localhost.attacker.example", False), ("192.168.1.2", False)])
def test_only_literal_loopback_counts(host, loopback):
    assert is_loopback(host) is loopback


def test_serve_refuses_a_loopback_lookalike_without_a_token(monkeypatch, capsys):
    monkeypatch.delenv("WEIGHTSEARCH_TOKEN", raising=False)
    assert main(["serve", "--host", "127.attacker.example", "--port", "1"]) == 2
    assert "WEIGHTSEARCH_TOKEN" in capsys.readouterr().err


def _closed(s: socket.socket) -> bool:
    """Whether the server closed this connection (it answered 408 or dropped it)."""
    s.setblocking(False)
    try:
        data = s.recv(65536)
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    return data == b"" or data.startswith(b"HTTP/1.1 408")


@pytest.mark.slow
def test_slow_clients_cannot_hold_the_server(server):
    """300 connections that never finish their request head: the server keeps at most
    MAX_CONNECTIONS, dropping the longest-stalled to admit new ones, so /health answers at once
    and the server keeps its file descriptors; a stalled head alone gets 408 in time."""
    from weightsearch.service.http_limits import HEAD_TIMEOUT_S, MAX_CONNECTIONS

    stalled = []
    try:
        for _ in range(300):
            s = socket.create_connection(("127.0.0.1", server))
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no blank line: unfinished
            stalled.append(s)
        start = time.monotonic()
        answer = httpx.get(f"http://127.0.0.1:{server}/health", timeout=5)
        assert answer.status_code == 200 and time.monotonic() - start < PROMPT_S
        time.sleep(0.5)
        dropped = sum(_closed(s) for s in stalled)
        assert dropped >= 300 - MAX_CONNECTIONS, dropped
        assert not any(_closed(s) for s in stalled[-20:])  # the newest are still held
    finally:
        for s in stalled:
            s.close()
    with socket.create_connection(("127.0.0.1", server)) as s:
        s.sendall(b"GET /health HTTP/1.1\r\n")
        s.settimeout(HEAD_TIMEOUT_S + 10)
        start = time.monotonic()
        head = s.recv(4096)
        assert head.startswith(b"HTTP/1.1 408"), head
        assert HEAD_TIMEOUT_S - 1 < time.monotonic() - start < HEAD_TIMEOUT_S + 5


@pytest.mark.slow
def test_half_open_heads_beyond_the_file_limit_leave_health_answering(tmp_path):
    """One client holds more half-open connections (a head never finished) than the server has
    file descriptors (`ulimit -n 256`, 300 connections): every fresh /health still answers at
    once (within PROMPT_S, well before any timeout the server would wait out), and the
    server's log does not fill with accept errors."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    import_file(TABLE2, "siwlm-paper", url)
    proc, port = serve(url, tmp_path, TOKEN, open_files=256)
    stalled = []
    try:
        log = tmp_path / "server.log"
        lines_before = len(log.read_text().splitlines())
        for _ in range(300):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # never ends
            stalled.append(s)
        took = []
        for _ in range(5):
            start = time.monotonic()
            with contextlib.suppress(httpx.TimeoutException):
                assert httpx.get(f"http://127.0.0.1:{port}/health",
                                 timeout=PROMPT_S + 1).status_code == 200
            took.append(time.monotonic() - start)
        assert max(took) < PROMPT_S, took
        time.sleep(1.0)  # what the server would log about refused accepts, logged by now
        grown = log.read_text().splitlines()[lines_before:]
        assert len(grown) <= 5, grown[:10]
    finally:
        for s in stalled:
            s.close()
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.slow
def test_a_pipelined_connection_still_owes_its_next_head_in_time(server):
    """Two whole requests sent at once, then a head trickled a line at a time (each line would
    reset a keep-alive timer): both requests are answered, and the trickled head gets 408 when
    its time is up."""
    from weightsearch.service.http_limits import HEAD_TIMEOUT_S

    whole = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server)) as s:
        s.sendall(whole + whole)
        s.settimeout(HEAD_TIMEOUT_S + 10)
        received = b""
        while received.count(b"HTTP/1.1 200") < 2 or not received.endswith(b"}"):
            received += s.recv(65536)
        start = time.monotonic()
        s.sendall(b"GET /health HTTP/1.1\r\n")
        s.setblocking(False)
        answer = b""
        while b"HTTP/1.1 408" not in answer:
            assert time.monotonic() - start < HEAD_TIMEOUT_S + 5, answer
            time.sleep(1.0)
            with contextlib.suppress(BlockingIOError, BrokenPipeError, ConnectionResetError):
                s.sendall(b"X-Slow: 1\r\n")
            with contextlib.suppress(BlockingIOError):
                answer += s.recv(65536)
        assert time.monotonic() - start > HEAD_TIMEOUT_S - 1
