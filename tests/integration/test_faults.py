"""Faults on a real multi-node Ray cluster with the PostgreSQL study database.

The cluster runs on this machine: a head node that offers no CPUs (the driver attaches to it)
and two 1-CPU worker nodes, all started with `ray start` and token authentication. The nodes
share the filesystem, as the nodes of a real cluster share the workdir. Every process the test
starts carries a marker in its environment; teardown SIGKILLs exactly those processes.

- a worker node dies (its raylet, then its other processes SIGKILLed) mid-epoch: the trial
  moves to the other node and continues from its last epoch checkpoint; the study completes;
- the driver is SIGKILLed mid-study: `weightsearch resume` completes it, every cell once;
- PostgreSQL restarts while trials run: the study completes, no finished trial is lost.

Each test prints a FAULT line with what happened and the seconds of training lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.helpers import check_siwlm_steps, free_port, ray_temp_dir, sigkill_until_gone
from weightsearch.studies import schema as S

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

RAY = str(Path(sys.executable).with_name("ray"))
MARKER = "WEIGHTSEARCH_FAULT_CLUSTER"
NODE = "WEIGHTSEARCH_FAULT_NODE"
WORKERS = ("node_b", "node_c")
DRIVER_TIMEOUT_S = 420


# --- processes ---------------------------------------------------------------------------
def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace").strip()
    except OSError:
        return ""


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@dataclass
class Cluster:
    """A Ray cluster of this machine's processes, each marked so teardown finds only ours."""

    temp_dir: str
    env: dict[str, str]
    port: int = field(default_factory=free_port)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def pids(self, **match: str) -> list[int]:
        """Live processes of this cluster (and its drivers), optionally filtered by env vars."""
        marker = self.env[MARKER]
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                env = _environ(int(entry.name))
                if env.get(MARKER) == marker and all(env.get(k) == v for k, v in match.items()):
                    found.append(int(entry.name))
        return found

    def _ray_start(self, node: str, *args: str) -> None:
        ports = [f"--{name}={free_port()}" for name in (
            "node-manager-port", "object-manager-port", "metrics-export-port",
            "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port",
        )]
        subprocess.run(
            [RAY, "start", "--node-ip-address=127.0.0.1", f"--temp-dir={self.temp_dir}",
             "--object-store-memory=100000000", "--include-log-monitor=false",
             "--disable-usage-stats", *ports, *args],
            env={**self.env, NODE: node}, check=True, capture_output=True, timeout=120,
        )

    def start(self) -> None:
        # The head offers no CPUs: it runs GCS and the driver, never a trial, so a worker node
        # can die without taking the driver with it.
        self._ray_start("head", "--head", f"--port={self.port}", "--num-cpus=0",
                        "--include-dashboard=false")
        for name in WORKERS:
            self._ray_start(name, f"--address={self.address}", "--num-cpus=1",
                            f"--resources={json.dumps({name: 1})}")

    def trial_nodes(self) -> dict[int, str]:
        """pid -> node of the Ray worker processes that are running a trial right now."""
        out = {}
        for pid in self.pids():
            title = _cmdline(pid)
            # Tune runs a function trainable in an actor titled `ray::ImplicitFunc.<method>`.
            if title.startswith("ray::ImplicitFunc"):
                parent = _ppid(pid)
                if parent and _comm(parent) == "raylet":
                    out[pid] = _environ(pid).get(NODE, "?")
        return out

    def raylet(self, node: str) -> int:
        pids = [p for p in self.pids(**{NODE: node}) if _comm(p) == "raylet"]
        assert len(pids) == 1, f"expected one raylet for {node}, found {pids}"
        return pids[0]

    def stop(self) -> None:
        alive = sigkill_until_gone(self.pids)
        if alive:
            raise AssertionError(f"cluster processes survived SIGKILL: {alive}")


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    temp_dir = ray_temp_dir()
    env = {
        **os.environ,
        MARKER: uuid.uuid4().hex,
        # Token authentication on every node and client, with a token private to this test.
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        # Declare a silent node dead after ~3 s instead of Ray's default ~30 s.
        "RAY_health_check_initial_delay_ms": "1000",
        "RAY_health_check_period_ms": "1000",
        "RAY_health_check_timeout_ms": "1000",
        "RAY_health_check_failure_threshold": "3",
        "RAY_USAGE_STATS_ENABLED": "0",
        # A killed driver's cell claims expire after 10 s, not 120 s: `resume` takes them over.
        "WEIGHTSEARCH_CLAIM_TTL": "10",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
    }
    env.pop("RAY_ADDRESS", None)
    c = Cluster(temp_dir, env)
    try:
        c.start()
        yield c
    finally:
        c.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)


# --- studies -----------------------------------------------------------------------------
def _study_file(tmp_path: Path, name: str, url: str, encoder: str, data: Path, weights: list,
                concurrent: int, epochs: int = 3, examples: int = 192) -> Path:
    spec = {
        "study": name, "allow_inert": True,
        "storage": url,
        "train": {
            "encoder": encoder, "data_dir": str(data), "tasks": ["rte", "mrpc"],
            "epochs": epochs, "batch_size": 8, "max_train_examples": examples,
            "max_eval_examples": 64, "max_seq_len": 64, "num_threads": 1,
            "checkpoints": "all",  # every epoch's checkpoint stays, as evidence
            "cache_dir": str(tmp_path / "cache"),
        },
        "central_tasks": ["rte"],
        "weights": weights,
        "seeds": [1],
        "resources": {"cpu": 1, "gpu": 0},
        "max_concurrent": concurrent,
        "max_failures": 2,
        "workdir": str(tmp_path / "runs"),
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _driver(cluster: Cluster, tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / f"driver-{int(time.time() * 1000)}.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "weightsearch.cli", *args, "--ray-address", cluster.address,
         "--quiet"],
        env={**cluster.env, NODE: "driver"}, stdout=log.open("w"), stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    return proc, log


def _summary(text: str) -> str:
    """The driver's own summary lines, without Ray's log noise."""
    return "\n".join(ln for ln in text.splitlines() if ln.startswith(("study ", "  rte:")))


def _wait(proc: subprocess.Popen, log: Path) -> str:
    try:
        proc.wait(timeout=DRIVER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"driver still running after {DRIVER_TIMEOUT_S}s:\n"
                             f"{log.read_text()[-3000:]}") from None
    text = log.read_text()
    assert proc.returncode == 0, f"driver exited {proc.returncode}:\n{text[-3000:]}"
    return _summary(text)


def _trials(url: str, name: str) -> list:
    import optuna

    return optuna.load_study(study_name=S.study_name(name, "rte"), storage=url).get_trials()


def _complete(url: str, name: str) -> list:
    from optuna.trial import TrialState

    try:
        return [t for t in _trials(url, name) if t.state == TrialState.COMPLETE]
    except Exception:  # the driver has not created the study yet
        return []


def _checkpoints(trial_dir: Path) -> dict[int, float]:
    """epoch -> write time of each complete epoch checkpoint in a trial folder."""
    out = {}
    for meta in trial_dir.glob("checkpoints/epoch-*/meta.json"):
        with contextlib.suppress(OSError, ValueError):
            out[int(json.loads(meta.read_text())["epoch"])] = meta.stat().st_mtime
    return out


def _poll(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None,
          interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"driver exited ({proc.returncode}) while waiting for {what}")
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _assert_every_cell_once(url: str, name: str, weights: list) -> list:
    from optuna.trial import TrialState

    trials = _trials(url, name)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    cells = sorted(t.user_attrs[S.T_CELL] for t in complete)
    assert cells == sorted(S.cell_key(w, 1) for w in weights), cells
    assert not [t.number for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    for t in complete:
        assert [h["epoch"] for h in t.user_attrs[S.T_HISTORY]] == [1, 2, 3]
    return trials


# --- the faults --------------------------------------------------------------------------
def test_node_killed_mid_epoch_trial_continues_on_other_node(
    cluster: Cluster, postgres_url: str, tiny_encoder: str, sample_data_dir: Path,
    tmp_path: Path,
) -> None:
    weights = [1, 9]
    study = _study_file(tmp_path, "nodekill", postgres_url, tiny_encoder, sample_data_dir,
                        weights, concurrent=1)
    proc, log = _driver(cluster, tmp_path, "launch", str(study))
    try:
        runs = tmp_path / "runs" / "nodekill" / "rte"
        first = _poll(lambda: [d for d in runs.glob("w*_s1") if _checkpoints(d)], 240,
                      "the first epoch checkpoint", proc)[0]
        victim = _poll(lambda: {n for n in cluster.trial_nodes().values() if n in WORKERS},
                       30, "the trial's worker process")
        assert len(victim) == 1, victim
        node = victim.pop()
        # Time epoch 2 by its checkpoint, then kill halfway through epoch 3.
        ckpts = _poll(lambda: (c := _checkpoints(first)) and 2 in c and c, 60,
                      "the epoch-2 checkpoint", proc, interval=0.02)
        time.sleep((ckpts[2] - ckpts[1]) / 2)
        ckpts = _checkpoints(first)
        last_epoch = max(ckpts)
        assert last_epoch == 2, "epoch 3 ended before the kill; make epochs longer"
        # The node dies as a machine would: its raylet first, then every process it ran (a
        # worker left alone would finish its epoch before noticing its raylet is gone).
        os.kill(cluster.raylet(node), signal.SIGKILL)
        for pid in cluster.pids(**{NODE: node}):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        lost_s = killed_at - ckpts[last_epoch]
        other = next(n for n in WORKERS if n != node)
        _poll(lambda: other in cluster.trial_nodes().values(), 120,
              f"the trial to restart on {other}", proc)
        restarted_s = time.time() - killed_at
        # The next checkpoint of the trial continues the epoch count: it did not start over.
        resumed = _poll(lambda: {e: t for e, t in _checkpoints(first).items() if t > killed_at},
                        180, "a checkpoint after the kill", proc)
        assert min(resumed) == last_epoch + 1, (resumed, last_epoch)
        recovered_s = resumed[min(resumed)] - killed_at
        text = _wait(proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
    trials = _assert_every_cell_once(postgres_url, "nodekill", weights)
    assert len(trials) == len(weights)  # Ray retried the same trial: no extra Optuna trial
    # Checkpoints written before the kill are untouched: nothing before them was retrained.
    assert all(_checkpoints(first)[e] == ckpts[e] for e in ckpts)
    print(f"\nFAULT node kill: SIGKILLed the raylet of {node} {lost_s:.2f}s after the epoch-"
          f"{last_epoch} checkpoint; the trial resumed on {other} at epoch {last_epoch + 1} "
          f"(running there {restarted_s:.1f}s after the kill, next checkpoint after "
          f"{recovered_s:.1f}s); study complete, "
          f"{len(trials)} trials. Lost training: {lost_s:.2f}s.\n{text.strip()}")


def test_killed_driver_then_resume_runs_every_cell_once(
    cluster: Cluster, postgres_url: str, tiny_encoder: str, sample_data_dir: Path,
    tmp_path: Path,
) -> None:
    from optuna.trial import TrialState

    weights = [1, 3, 6, 9]
    study = _study_file(tmp_path, "driverkill", postgres_url, tiny_encoder, sample_data_dir,
                        weights, concurrent=2)
    proc, _ = _driver(cluster, tmp_path, "launch", str(study))
    try:
        # Kill once a trial has finished and the next ones have checkpoints mid-run.
        _poll(lambda: _complete(postgres_url, "driverkill"), 300, "a finished trial", proc,
              interval=0.5)
        runs = tmp_path / "runs" / "driverkill" / "rte"
        _poll(lambda: sum(1 for d in runs.glob("w*_s1") if _checkpoints(d)) >= 2, 120,
              "a second trial's checkpoint", proc)
        os.kill(proc.pid, signal.SIGKILL)
        killed_at = time.time()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    # Ray ends the dead driver's trials; wait until their processes are gone.
    _poll(lambda: not cluster.trial_nodes(), 60, "the killed driver's trials to stop")
    before = _trials(postgres_url, "driverkill")
    done_before = {t.user_attrs[S.T_CELL] for t in before if t.state == TrialState.COMPLETE}
    running = [t for t in before if t.state == TrialState.RUNNING]
    lost_s = 0.0
    kept: dict[Path, dict[int, float]] = {}
    for t in running:  # training since each orphan's last checkpoint is what the kill cost
        folder = runs / f"w{t.params[S.PARAM]:g}_s1"
        kept[folder] = _checkpoints(folder)
        lost_s += killed_at - max(kept[folder].values(), default=t.datetime_start.timestamp())

    proc, log = _driver(cluster, tmp_path, "resume", "driverkill", "--storage", postgres_url)
    text = _wait(proc, log)
    trials = _assert_every_cell_once(postgres_url, "driverkill", weights)
    orphans = [t for t in trials if t.number in {r.number for r in running}]
    assert orphans and all(t.state == TrialState.FAIL for t in orphans)
    after = {t.user_attrs[S.T_CELL] for t in trials if t.state == TrialState.COMPLETE}
    assert done_before < after
    # The orphans' checkpoints were reused by the rerun, not rewritten: it resumed from its
    # copy of them (copied with their times), and the originals went once it had trained.
    for folder, ckpts in kept.items():
        rerun = Path(f"{folder}-attempt1")
        assert all(_checkpoints(rerun)[e] == mtime for e, mtime in ckpts.items()), rerun
        assert not (Path(folder) / "checkpoints").exists(), folder
    print(f"\nFAULT driver kill: SIGKILLed the driver with {len(done_before)} of "
          f"{len(weights)} cells done and {len(running)} trials RUNNING; `weightsearch resume` "
          f"marked those FAIL and ran the {len(weights) - len(done_before)} missing cells "
          f"(resumed from their checkpoints); every cell COMPLETE once. Lost training: "
          f"{lost_s:.2f}s.\n{text.strip()}")


def test_three_drivers_share_a_study_on_two_nodes(
    cluster: Cluster, postgres_url: str, tiny_encoder: str, sample_data_dir: Path,
    tmp_path: Path,
) -> None:
    """Two `launch` and a `resume` of one study on the two-worker-node cluster with
    PostgreSQL: every cell COMPLETE once, no FAIL, no trial folder written by two trials."""
    from optuna.trial import TrialState

    weights = [1, 3, 6, 9]
    study = _study_file(tmp_path, "threedrivers", postgres_url, tiny_encoder, sample_data_dir,
                        weights, concurrent=2)
    drivers = [_driver(cluster, tmp_path, "launch", str(study)) for _ in range(2)]
    nodes: set[str] = set()
    try:
        _poll(lambda: _trials_or_none(postgres_url, "threedrivers") is not None, 240,
              "a launch to create the study", drivers[0][0], interval=0.2)
        drivers.append(_driver(cluster, tmp_path, "resume", "threedrivers",
                               "--storage", postgres_url))
        deadline = time.monotonic() + DRIVER_TIMEOUT_S
        while any(p.poll() is None for p, _ in drivers) and time.monotonic() < deadline:
            nodes |= set(cluster.trial_nodes().values())
            time.sleep(0.2)
        texts = [_wait(p, log) for p, log in drivers]
    finally:
        for p, _ in drivers:
            if p.poll() is None:
                p.kill()
    for text in texts:
        assert f"{len(weights)}/{len(weights)} cells done" in text, text
    trials = _assert_every_cell_once(postgres_url, "threedrivers", weights)
    assert not [t.number for t in trials if t.state == TrialState.FAIL]
    folders = [t.user_attrs["output_dir"] for t in trials]
    assert len(set(folders)) == len(folders), folders
    for folder in folders:
        check = check_siwlm_steps(folder)
        assert check.returncode == 0, check.stdout + check.stderr
    assert set(WORKERS) <= nodes, nodes  # the trials really ran on both nodes
    print(f"\nTHREE DRIVERS on {sorted(nodes)}: {len(trials)} trials for {len(weights)} cells, "
          f"all COMPLETE once, {len(set(folders))} distinct folders")


def _trials_or_none(url: str, name: str) -> list | None:
    try:
        return _trials(url, name)
    except Exception:  # not created yet, or its schema is being created
        return None


@pytest.fixture
def restartable_postgres(postgres_url: str, pg_server) -> Iterator[str]:
    """A database on the session's private cluster, which this test may restart (a server
    WEIGHTSEARCH_TEST_PG names is someone else's: never restarted)."""
    if pg_server.cluster is None:
        pytest.skip("restarting PostgreSQL needs the tests' own cluster; unset "
                    "WEIGHTSEARCH_TEST_PG")
    try:
        yield postgres_url
    finally:
        if not pg_server.cluster.running():  # never leave it down for the tests that follow
            pg_server.cluster.start()


def test_postgres_restart_mid_study_loses_nothing(
    cluster: Cluster, restartable_postgres: str, pg_server, tiny_encoder: str,
    sample_data_dir: Path, tmp_path: Path,
) -> None:
    # With a password (the test server trusts any): nothing the study writes may hold it.
    secret = "pw-" + uuid.uuid4().hex[:12]
    url = restartable_postgres.replace("://postgres@", f"://postgres:{secret}@")
    assert secret in url
    weights = [1, 3, 6, 9]
    study = _study_file(tmp_path, "pgrestart", url, tiny_encoder, sample_data_dir, weights,
                        concurrent=2)
    proc, log = _driver(cluster, tmp_path, "launch", str(study))
    try:
        done = _poll(lambda: _complete(url, "pgrestart"), 300, "a finished trial", proc,
                     interval=0.5)
        done_before = {t.user_attrs[S.T_CELL] for t in done}
        _poll(lambda: cluster.trial_nodes(), 60, "trials running", proc)
        started = time.time()
        pg_server.cluster.restart()
        outage_s = time.time() - started
        text = _wait(proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
    trials = _assert_every_cell_once(url, "pgrestart", weights)
    assert len(trials) == len(weights)  # no trial failed or had to be rerun
    after = {t.user_attrs[S.T_CELL] for t in trials if t.user_attrs.get(S.T_CELL)}
    assert done_before <= after
    # Tune writes its experiment state (tuner.pkl, search state) into the study's folder.
    holding = [p for p in (tmp_path / "runs").rglob("*")
               if p.is_file() and secret.encode() in p.read_bytes()]
    assert not holding and secret not in log.read_text(), holding
    print(f"\nFAULT postgres restart: restarted PostgreSQL ({outage_s:.1f}s) with "
          f"{len(done_before)} cells done and trials running; the driver retried its writes "
          f"and the study completed, every cell once, {len(trials)} trials. Lost training: "
          f"0s.\n{text.strip()}")


def test_a_study_file_deleted_mid_launch_stops_the_driver(cluster: Cluster, tiny_encoder: str,
                                                          sample_data_dir: Path, tmp_path: Path):
    """A process keeps writing to an unlinked SQLite file without an error: the driver checks
    before each write that its file is still the one at the path, and stops saying so."""
    db = tmp_path / "gone.db"
    url = f"sqlite:///{db}"
    # Cells enough that some are still to train when the file goes, however fast they run.
    study = _study_file(tmp_path, "gone", url, tiny_encoder, sample_data_dir, [1, 3, 6, 9, 15],
                        concurrent=1, epochs=1, examples=32)
    proc, log = _driver(cluster, tmp_path, "launch", str(study))
    _poll(lambda: _complete(url, "gone"), 300, "the first trial to complete", proc)
    for path in tmp_path.glob("gone.db*"):  # the file and its WAL companions
        path.unlink()
    try:
        proc.wait(timeout=DRIVER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"driver still running:\n{log.read_text()[-3000:]}") from None
    text = log.read_text()
    assert proc.returncode == 2, text[-3000:]
    last = [ln for ln in text.splitlines() if ln.startswith("weightsearch launch:")]
    assert last and "was deleted while this command ran" in last[-1], text[-3000:]
    assert "cells done" not in text  # no summary of results that exist nowhere
