"""Shared fixtures: offline mode, a private cache, a tiny random-init encoder, the sample, the
tiny runs several tests read, and PostgreSQL databases."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tests.helpers import SAMPLE, SHARED_GLUE, TinyRun, train_tiny_run

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Idle threads of torch's OpenMP and of OpenBLAS sleep at once instead of spinning for more
# work (read when those libraries load, after this; subprocesses inherit it). Spinning burns
# CPU while waiting, most of all on a busy machine, and the fast tier's gate counts CPU time.
# The thread counts, and so every number computed, stay as they are.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")  # 2**4 cycles, OpenBLAS's least
# Tokenized-data cache private to this test session, never the user's.
os.environ["WEIGHTSEARCH_CACHE"] = tempfile.mkdtemp(prefix="weightsearch-test-cache-")

# The fast tier (plain `pytest`: slow and integration deselected) stays fast: an unmarked test
# whose own body uses more CPU than this (this process's and its waited-for children's, user
# and system) fails there, asking to be marked or made faster. CPU time, not the clock: a
# machine busy with other jobs slows a test's clock, not its work. 10 CPU-seconds: about the 5 s
# of the clock the gate used to allow, with torch's two threads on a 2-core machine. Its
# fixtures' set-up does not count (a session's tiny run is trained once for many tests).
FAST_TEST_LIMIT_S = float(os.environ.get("WEIGHTSEARCH_FAST_TEST_LIMIT_S", "10"))
_TIERS = ("slow", "integration")
_CPU = pytest.StashKey[float]()


def cpu_seconds() -> float:
    """User and system CPU of this process and of its children that were waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    start = cpu_seconds()
    yield
    item.stash[_CPU] = cpu_seconds() - start
    _SPENT.append((item.stash[_CPU] + item.stash.get(_SETUP_CPU, 0.0), item.nodeid))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    start = cpu_seconds()
    yield
    item.stash[_SETUP_CPU] = cpu_seconds() - start


# WEIGHTSEARCH_CPU_REPORT=N lists the N tests that used the most CPU (their set-up, shared
# fixtures included, and their body): where the fast tier's time goes.
_SETUP_CPU = pytest.StashKey[float]()
_SPENT: list[tuple[float, str]] = []


def pytest_terminal_summary(terminalreporter) -> None:
    shown = int(os.environ.get("WEIGHTSEARCH_CPU_REPORT", "0") or 0)
    if not shown or not _SPENT:
        return
    total = sum(cpu for cpu, _ in _SPENT)
    terminalreporter.write_sep("-", f"CPU-seconds per test (set-up + body), {total:.1f} in all")
    for cpu, nodeid in sorted(_SPENT, reverse=True)[:shown]:
        terminalreporter.write_line(f"{cpu:7.1f}  {nodeid}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    fast_tier = all(f"not {tier}" in (item.config.option.markexpr or "") for tier in _TIERS)
    used = item.stash.get(_CPU, 0.0)
    if (report.when == "call" and report.passed and fast_tier
            and not any(item.get_closest_marker(tier) for tier in _TIERS)
            and used > FAST_TEST_LIMIT_S):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} used {used:.1f} CPU-seconds, over the fast tier's "
            f"{FAST_TEST_LIMIT_S:g}: mark it `slow` (or `integration`) or make it faster "
            "(WEIGHTSEARCH_FAST_TEST_LIMIT_S sets the limit)")


@pytest.fixture
def one_torch_thread():
    """torch on one thread for the test: on tensors of a few hundred values a second thread
    only spins, which costs CPU time and gains nothing (a run's `num_threads: 1`)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def sample_data_dir() -> Path:
    return SAMPLE


@pytest.fixture(scope="session")
def shared_glue_dir() -> Path:
    if not SHARED_GLUE.is_dir():
        pytest.skip(
            f"full GLUE data not found at {SHARED_GLUE}; place ../shared/data/glue beside the clone"
        )
    return SHARED_GLUE


@pytest.fixture(scope="session")
def minilm_path() -> str:
    from weightsearch.trainer.encoders import default_encoder_path

    return default_encoder_path()


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory: pytest.TempPathFactory, minilm_path: str) -> str:
    """A random-init BERT (hidden 32, 2 layers, 4 heads) with MiniLM's tokenizer, saved to disk."""
    from tests.compat.tiny_encoder import build

    return build(tmp_path_factory.mktemp("tiny-encoder"), hidden=32, layers=2, heads=4,
                 intermediate=64, positions=256)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory, sample_data_dir: Path,
             tiny_encoder: str) -> TinyRun:
    """The tiny run of `helpers.run_config` as it is (2 epochs), trained once per session.
    Tests read it; a test that changes a run copies its folder first."""
    out = tmp_path_factory.mktemp("tiny-run") / "run"
    return train_tiny_run(sample_data_dir, tiny_encoder, out)


@pytest.fixture(scope="session")
def tiny_run_1_epoch(tmp_path_factory: pytest.TempPathFactory, sample_data_dir: Path,
                     tiny_encoder: str) -> TinyRun:
    """The same run with `epochs=1`, trained once per session."""
    out = tmp_path_factory.mktemp("tiny-run-1") / "run"
    return train_tiny_run(sample_data_dir, tiny_encoder, out, epochs=1)


# A PostgreSQL server named explicitly (its admin URL); else the session starts its own.
EXTERNAL_PG = os.environ.get("WEIGHTSEARCH_TEST_PG")
REQUIRE_PG = os.environ.get("CI", "").lower() == "true" or bool(
    os.environ.get("WEIGHTSEARCH_REQUIRE_PG")
)


@pytest.fixture(scope="session")
def pg_server():
    """The PostgreSQL the tests use: the server WEIGHTSEARCH_TEST_PG names, or a private
    throwaway cluster started for this session (`tests.pg_private`; None as `.cluster` for a
    named server, which the tests never restart). Skips with the fix when neither is possible;
    in CI (CI=true) that fails instead."""
    from types import SimpleNamespace

    from tests import pg_private

    if EXTERNAL_PG:
        yield SimpleNamespace(admin_url=EXTERNAL_PG, cluster=None)
        return
    reason = pg_private.missing()
    cluster = None
    if reason is None:
        try:
            cluster = pg_private.PrivateCluster()
        except (OSError, RuntimeError) as exc:
            reason = f"a private PostgreSQL cluster did not start: {exc}"
    if cluster is None:
        if REQUIRE_PG:
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield SimpleNamespace(admin_url=cluster.admin_url, cluster=cluster)
    finally:
        cluster.close()


def _pg_admin(admin_url: str):
    from sqlalchemy import create_engine

    return create_engine(admin_url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)


@pytest.fixture
def postgres_url(pg_server) -> str:
    """A fresh database for one test on the tests' PostgreSQL (`pg_server`), dropped afterwards.

    Skips with the fix when no server answers; in CI (CI=true) a missing server fails instead.
    """
    import uuid

    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    try:
        admin = _pg_admin(pg_server.admin_url)
        with admin.connect() as conn:
            conn.execute(text("SELECT 1"))
    except OperationalError as exc:
        reason = (
            f"PostgreSQL not reachable at {pg_server.admin_url} ({str(exc).splitlines()[0]}); "
            "unset WEIGHTSEARCH_TEST_PG to let the tests start their own, or start that server"
        )
        if REQUIRE_PG:
            pytest.fail(reason)
        pytest.skip(reason)
    name = f"ws_test_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = pg_server.admin_url.rsplit("/", 1)[0] + f"/{name}"
    yield url
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="module")
def local_ray():
    """Ray on this machine for one test module's in-process launches (2 CPUs), shut down
    after it."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
