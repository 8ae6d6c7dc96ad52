"""A service that answers while its database hangs. Every process of the tests' own PostgreSQL
cluster is stopped (SIGSTOP: connections stay open, nothing answers, not even a server-side
timeout) under a real `weightsearch serve`: /health still answers and says the database is
unreachable, 40 concurrent GET /studies get 503 with Retry-After instead of waiting out the
stop, and after SIGCONT everything answers as before (slow: it waits out the stop). The fast
tier keeps the /health half against a database server that accepts connections and never
answers, as a stopped one does."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT, serve

TOKEN = "hung-db-token"
TABLE2 = ROOT / "recommender" / "data" / "siwlm_table2.csv"


def _cluster_pids(data: Path) -> list[int]:
    """The postmaster (first line of postmaster.pid) and every process it started."""
    postmaster = int((data / "postmaster.pid").read_text().splitlines()[0])
    pids = [postmaster]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                pids.append(int(entry.name))
    return pids


def test_health_says_unreachable_while_the_database_server_never_answers() -> None:
    """/health answers within its probe's 2 s, degraded, with the password hidden, while the
    database's address accepts connections into its backlog and never answers."""
    from fastapi.testclient import TestClient

    from weightsearch.service.app import create_app

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        port = silent.getsockname()[1]
        client = TestClient(create_app(
            f"postgresql+psycopg://hung-user:hung-secret@127.0.0.1:{port}/studies"))
        health = client.get("/health")
    assert health.status_code == 200
    body = health.json()
    assert body["status"] == "degraded" and body["database"] == "unreachable", body
    # The probe's own 2 s, or the driver's connect timeout of as long, whichever ends first.
    assert "no answer within 2 s" in body["database_detail"] or \
        "timeout expired" in body["database_detail"], body
    assert "hung-secret" not in health.text


@pytest.fixture
def stoppable(postgres_url: str, pg_server) -> Iterator[tuple[str, Path]]:
    if pg_server.cluster is None:
        pytest.skip("stopping PostgreSQL needs the tests' own cluster; unset "
                    "WEIGHTSEARCH_TEST_PG")
    yield postgres_url, pg_server.cluster.data
    for pid in _cluster_pids(pg_server.cluster.data):  # never left stopped for the rest
        os.kill(pid, signal.SIGCONT)


@pytest.mark.postgres
@pytest.mark.slow
def test_health_and_reads_answer_while_every_postgres_process_is_stopped(
        stoppable: tuple[str, Path], tmp_path: Path) -> None:
    import httpx

    from weightsearch.cli import main

    url, data = stoppable
    assert main(["import", str(TABLE2), "--study", "paper", "--storage", url]) == 0
    proc, port = serve(url, tmp_path, TOKEN)
    base = f"http://127.0.0.1:{port}"
    try:
        assert httpx.get(f"{base}/studies", timeout=30).status_code == 200
        stopped = _cluster_pids(data)
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        try:
            with concurrent.futures.ThreadPoolExecutor(40) as pool:
                reads = [pool.submit(httpx.get, f"{base}/studies", timeout=60)
                         for _ in range(40)]
                time.sleep(1)  # the reads are in flight, waiting on the stopped server
                started = time.monotonic()
                health = httpx.get(f"{base}/health", timeout=30)
                health_s = time.monotonic() - started
                answers = [r.result() for r in reads]
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
        assert health.status_code == 200 and health_s < 8, (health_s, health.text)
        body = health.json()
        assert body["status"] == "degraded" and body["database"] == "unreachable", body
        assert "hung-db" not in health.text  # nothing secret in it (no password in the URL)
        codes = sorted({a.status_code for a in answers})
        assert codes == [503], [a.text for a in answers][:3]
        assert all(a.headers.get("retry-after") == "5" for a in answers)
        assert all("the study database" in a.json()["detail"] for a in answers)
        # The database is back: so are the answers.
        deadline = time.monotonic() + 60
        while httpx.get(f"{base}/studies", timeout=30).status_code != 200:
            assert time.monotonic() < deadline, "the service did not recover"
            time.sleep(0.5)
        time.sleep(1.1)  # past the probe's reuse
        assert httpx.get(f"{base}/health", timeout=10).json()["database"] == "ok"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
