"""Hostile requests against a real `weightsearch serve` (uvicorn) on loopback: each one gets a
4xx within 100 ms, nothing is launched, and /health keeps answering."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from studies.importer import import_file
from studies.request_guard import is_loopback
from weightsearch.cli import main

ROOT = Path(__file__).resolve().parents[1]
TABLE2 = ROOT / "studies" / "data" / "siwlm_table2.csv"
TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FAST_S = 0.1
HTTP = httpx.Client(timeout=10)  # one client: building one costs more than an answer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('hostile') / 'studies.db'}"
    import_file(TABLE2, "siwlm-paper", url)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "weightsearch.cli", "serve", "--port", str(port), "--storage", url],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT,
        env={**os.environ, "WEIGHTSEARCH_TOKEN": TOKEN},
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stdout.read().decode()
            assert time.monotonic() < deadline, "the server did not come up in 60 s"
            time.sleep(0.2)
        httpx.get(f"{base}/studies", timeout=30)  # warm the study cache
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _budget(port: int) -> float:
    """100 ms, stretched when this machine is so loaded that even /health answers slowly (the
    tests share their CPUs): a hostile request may take at most three /health round trips."""
    start = time.monotonic()
    HTTP.get(f"http://127.0.0.1:{port}/health")
    return max(FAST_S, 3 * (time.monotonic() - start))


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


def _post(port: int, body: bytes | str, content_type: str, **headers) -> tuple[int, float, dict]:
    start = time.monotonic()
    r = HTTP.post(f"http://127.0.0.1:{port}/studies", content=body,
                   headers={"Content-Type": content_type, **AUTH, **headers})
    return r.status_code, time.monotonic() - start, r.json()


def _health_answers(port: int) -> None:
    start = time.monotonic()
    assert HTTP.get(f"http://127.0.0.1:{port}/health").status_code == 200
    assert time.monotonic() - start < 1.0


def test_yaml_alias_bomb_is_refused_fast(server):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n"
        for i in range(7))
    code, took, body = _post(server, bomb, "application/yaml")
    assert code == 400 and "alias" in body["detail"], body
    assert took < _budget(server), took
    _health_answers(server)


def test_deep_json_and_deep_yaml_get_400_not_500(server):
    for text, kind in (("[" * 20_000 + "]" * 20_000, "application/json"),
                       ('{"a":' * 50 + "1" + "}" * 50, "application/json"),
                       ("[" * 5000 + "]" * 5000, "application/yaml")):
        code, took, body = _post(server, text, kind)
        assert code == 400 and "deeper" in body["detail"], (kind, body)
        assert took < _budget(server), took
    _health_answers(server)


def test_huge_body_is_refused_before_it_is_read(server):
    head = (b"POST /studies HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + TOKEN.encode() +
            b"\r\nContent-Length: 50000000\r\n\r\n" + b"{" * 1000)
    code, took = _raw(server, head)
    assert code == 413 and took < _budget(server), (code, took)
    chunked = (b"POST /studies HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % (2 << 20) + b" " * (2 << 20))
    code, took = _raw(server, chunked)
    assert code == 413 and took < 1.0, (code, took)
    _health_answers(server)


def test_cross_origin_and_plain_text_writes_are_refused(server):
    spec = '{"study": "drive-by", "weights": [1, 9]}'
    code, took, _ = _post(server, spec, "application/json", Origin="http://evil.example")
    assert code == 403 and took < _budget(server)
    code, took, _ = _post(server, spec, "application/json", **{"Sec-Fetch-Site": "cross-site"})
    assert code == 403 and took < _budget(server)
    code, took, body = _post(server, "study: drive-by\n", "text/plain")
    assert code == 415 and "application/json" in body["detail"] and took < _budget(server)
    studies = HTTP.get(f"http://127.0.0.1:{server}/studies").json()["studies"]
    assert [s["study"] for s in studies] == ["siwlm-paper"]


def test_the_token_guards_writes_on_loopback_too(server):
    r = HTTP.post(f"http://127.0.0.1:{server}/studies/siwlm-paper/resume")
    assert r.status_code == 401
    r = HTTP.post(f"http://127.0.0.1:{server}/studies/nope/resume", headers=AUTH)
    assert r.status_code == 404


def test_oversized_url_and_headers_get_414_and_431(server):
    code, took = _raw(server, b"GET /studies/" + b"a" * (1 << 20) + b" HTTP/1.1\r\n"
                      b"Host: 127.0.0.1\r\n\r\n")
    assert code == 414 and took < _budget(server), (code, took)
    code, took = _raw(server, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
                      + b"b" * (64 << 10) + b"\r\n\r\n")
    assert code == 431 and took < _budget(server), (code, took)
    code, took = _raw(server, b"GET /studies/" + b"a" * 10_000 + b" HTTP/1.1\r\n"
                      b"Host: 127.0.0.1\r\n\r\n")
    assert code == 414 and took < _budget(server), (code, took)
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
