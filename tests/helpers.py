"""What several test modules share: the repository's paths, the tiny run's config, plug-ins
registered for a test, JSONL logs, free ports, the independent SIWLM check, and the private
Ray sessions of the sweep tests.

Test modules import from here, never from one another."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "glue_sample"
QA_SAMPLE = ROOT / "data" / "qa_sample"
SHARED_GLUE = ROOT.parent / "shared" / "data" / "glue"
EXAMPLES = ROOT / "examples"
# Each installed package and its folder in the repository (weightsearch/<folder> links to it).
PACKAGE_FOLDERS = {"weightsearch": "weightsearch", "weightsearch.trainer": "trainer",
                   "weightsearch.studies": "studies", "weightsearch.recommender": "recommender",
                   "weightsearch.sweep": "sweep", "weightsearch.service": "service"}
TABLE2 = ROOT / "recommender" / "data" / "siwlm_table2.csv"
CHECK_SIWLM_STEPS = ROOT / "scripts" / "check_siwlm_steps.py"


# --- tiny training runs ------------------------------------------------------------------
def run_config(sample_data_dir, tiny_encoder, out: Path, **extra):
    """The tiny run most trainer tests start from: rte (central, weight 9), mrpc and stsb under
    SIWLM, 2 epochs of 64 rows in batches of 16."""
    from weightsearch.trainer import load_config

    raw = {
        "encoder": tiny_encoder,
        "data_dir": str(sample_data_dir),
        "tasks": ["rte", "mrpc", "stsb"],
        "central_task": "rte",
        "weighting": {"scheme": "siwlm", "central_weight": 9, "focus_span": 2},
        "epochs": 2,
        "batch_size": 16,
        "max_train_examples": 64,
        "subsample": "head",  # the recorded losses were taken on the first 64 rows
        "max_eval_examples": 32,
        "output_dir": str(out),
        "log_every": 3,
        "precision": "fp32",  # the recorded losses must not depend on the CPU's bf16 support
    }
    raw.update(extra)
    return load_config(raw)


@dataclass(frozen=True)
class TinyRun:
    """A finished tiny run: its folder, config, result and the epoch reports it made."""

    out: Path
    cfg: Any
    result: Any
    reports: list


def train_tiny_run(sample_data_dir, tiny_encoder, out: Path, **extra) -> TinyRun:
    from weightsearch.trainer import train

    cfg = run_config(sample_data_dir, tiny_encoder, out, **extra)
    reports: list = []
    result = train(cfg, report=reports.append, quiet=True)
    return TinyRun(out, cfg, result, reports)


def retrain_checkpoint(checkpoint: Path, shift: float = 0.01) -> None:
    """Other weights of the same shapes in a checkpoint folder, with the digest a run writes
    beside them: a weight source that changed (not one damaged after its write)."""
    from safetensors.torch import load_file, save_file

    from weightsearch.core.files import file_digest

    weights = checkpoint / "model.safetensors"
    save_file({k: v + shift for k, v in load_file(str(weights)).items()}, str(weights),
              metadata={"format": "pt"})
    meta = json.loads((checkpoint / "meta.json").read_text())
    meta.setdefault("digests", {})["model.safetensors"] = file_digest(weights)
    (checkpoint / "meta.json").write_text(json.dumps(meta))


@contextlib.contextmanager
def plugged_in(register: Callable[[Any], Any], unregister: Callable[[str], None], plugin: Any,
               name: str) -> Iterator[None]:
    """`plugin` registered (as a plug-in registers it) while the block runs, then taken out."""
    register(plugin)
    try:
        yield
    finally:
        unregister(name)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def check_siwlm_steps(folder) -> subprocess.CompletedProcess:
    """scripts/check_siwlm_steps.py on a run folder, in its own process."""
    return subprocess.run([sys.executable, str(CHECK_SIWLM_STEPS), str(folder)],
                          capture_output=True, text=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def real_server(url, env=None):
    """`weightsearch serve` on a free loopback port; yields its base URL."""
    import httpx

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "weightsearch.cli", "serve", "--port", str(port), "--storage", url],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
        cwd=ROOT,
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
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=20)


# --- studies and private Ray sessions ----------------------------------------------------
def two_cell_study_file(tmp_path: Path, name: str, tiny_encoder: str, data_dir: Path) -> Path:
    """tmp_path/study.yaml: rte and mrpc as central tasks at weights 1 and 9, one at a time.
    `allow_inert`: the tiny random encoder's gradients are so large that clip 1 cuts every
    update at either weight (one treatment), which these studies of the sweep's mechanics
    mean."""
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({
        "study": name, "allow_inert": True,
        "train": {"encoder": tiny_encoder, "data_dir": str(data_dir), "tasks": ["rte", "mrpc"],
                  "epochs": 2, "batch_size": 16, "max_train_examples": 32,
                  "max_eval_examples": 32},
        "central_tasks": ["rte", "mrpc"],
        "weights": [1, 9],
        "max_concurrent": 1,
        "workdir": str(tmp_path / "runs"),
    }))
    return path


def ray_temp_dir() -> str:
    """A short private Ray temp folder: Unix socket paths must stay under ~100 characters."""
    return tempfile.mkdtemp(prefix="wsray", dir="/tmp")


def complete_count(url: str) -> int:
    """COMPLETE trials over every study in the database (0 while it is being created)."""
    import optuna
    from optuna.trial import TrialState

    try:
        names = optuna.get_all_study_names(url)
    except Exception:  # the driver may still be creating the schema
        return 0
    return sum(
        len(optuna.load_study(study_name=n, storage=url).get_trials(
            deepcopy=False, states=(TrialState.COMPLETE,)))
        for n in names
    )


def processes_under(marker: str) -> list[int]:
    """PIDs of live processes whose command line mentions `marker` (our Ray temp folder)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            pids.append(int(entry.name))
    return pids


def sigkill_until_gone(pids: Callable[[], list[int]], tries: int = 20) -> list[int]:
    """SIGKILL what `pids()` lists until it lists nothing; the survivors after `tries` rounds
    half a second apart (empty when all are gone)."""
    for _ in range(tries):
        alive = pids()
        if not alive:
            return []
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    return pids()


def kill_leftovers(ray_tmp: str) -> None:
    """Ray processes of our private session that outlived their driver (ours to end)."""
    alive = sigkill_until_gone(lambda: [p for p in processes_under(ray_tmp) if p != os.getpid()])
    if alive:
        pytest.fail(f"Ray processes still alive after SIGKILL: {alive}")


def launched_study(url: str, name: str, data_dir: Path, workdir: Path) -> None:
    """Study `name` (central task rte) as `weightsearch launch` leaves it before its first
    trial, made by the launch's own functions without Ray: a study that `resume` accepts."""
    from weightsearch.studies.storage import open_storage
    from weightsearch.sweep import study_db
    from weightsearch.sweep.spec import load_study_spec

    spec = load_study_spec({"study": name, "allow_inert": True, "train": {"data_dir": str(data_dir),
                            "tasks": ["rte", "mrpc"], "epochs": 1},
                            "central_tasks": ["rte"], "weights": [1, 9],
                            "workdir": str(workdir)})
    centrals = [study_db.describe(spec, c) for c in spec.central_tasks]
    study_db.create_studies(spec, open_storage(url), url, centrals, {})


def serve(url: str, folder: Path, token: str,
          open_files: int | None = None) -> tuple[subprocess.Popen, int]:
    """`weightsearch serve` of `url` with `token`, on a free port, up (its /health answers);
    its output goes to folder/server.log (a file, not a pipe: a full pipe would stall it).
    `open_files`: the server's limit on open file descriptors (`ulimit -n`)."""
    import resource

    def limit_files() -> None:
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

    log = folder / "server.log"
    for _ in range(3):  # another test may take the free port first
        port = free_port()
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "weightsearch.cli", "serve", "--port", str(port),
                 "--storage", url], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                env={**os.environ, "WEIGHTSEARCH_TOKEN": token}, preexec_fn=limit_files)
        if _serving(proc, port, log):
            return proc, port
    raise AssertionError(f"no free port stayed free for the server; see {log}")


def _serving(proc: subprocess.Popen, port: int, log: Path) -> bool:
    """True once /health answers; False if the port was taken meanwhile."""
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return True
        if proc.poll() is not None:
            assert "address already in use" in log.read_text(), log.read_text()
            return False
        time.sleep(0.2)
    raise AssertionError("the server did not come up in 60 s")


def assert_replays_draw_new_masks(run) -> None:
    """Each replay of a captured training step moves the CUDA random state on, as it does only
    for a graph that registered the generator: dropout draws new masks at every replay."""
    import torch

    captured = next(g.graph for g in run.graphs.graphs.values() if g.graph is not None)
    generator = torch.cuda.default_generators[torch.cuda.current_device()]
    offsets = [generator.get_offset()]
    for _ in range(2):
        captured.replay()
        torch.cuda.synchronize()
        offsets.append(generator.get_offset())
    assert offsets[0] < offsets[1] < offsets[2]
