"""The core install: its requirements leave out the extras' packages, and a fresh venv with the
core package alone installs one import name (`weightsearch`), trains, runs `recommend` and
`inspect`, and names the extra that `launch`, `serve` and tracking need."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from tests.helpers import PACKAGE_FOLDERS, ROOT, TABLE2

PACKAGES = tuple(PACKAGE_FOLDERS)
EXTRA_ONLY = ("ray", "fastapi", "uvicorn", "psycopg", "matplotlib", "tensorboard", "mlflow")
TORCH = os.environ.get("TORCH_SPEC", "torch==2.13.0")  # as scripts/test.sh installs it


def test_core_requirements_leave_out_the_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"]).lower()
    for name in EXTRA_ONLY:
        assert name not in core, name
    assert set(project["optional-dependencies"]) >= {"serve", "cluster", "plot", "tracking",
                                                      "all"}
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]
    for package, folder in PACKAGE_FOLDERS.items():  # PEP 561: type checkers read their hints
        assert "py.typed" in package_data[package] and (ROOT / folder / "py.typed").is_file()


def _source_copy(folder: Path) -> Path:
    """The package's files alone: pip builds in the source folder, which must not be ours."""
    src = folder / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    for folder in PACKAGE_FOLDERS.values():  # the links in weightsearch/ stay links
        shutil.copytree(ROOT / folder, src / folder, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return src


def _run(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(args, cwd=cwd, env={**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_fresh_core_install_trains_recommends_inspects_and_names_missing_extras(
        tmp_path, tiny_encoder):
    venv = tmp_path / "venv"
    done = _run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    assert done.returncode == 0, done.stderr
    python, script = str(venv / "bin" / "python"), str(venv / "bin" / "weightsearch")
    # torch first, as scripts/test.sh does: here the local CPU wheel (pip's cache is reused).
    # --no-compile: byte-compiling torch and transformers would take most of the time.
    for args in (["install", "-q", "--no-compile", TORCH],
                 ["install", "-q", "--no-compile", "-c", str(ROOT / "docker" / "constraints.txt"),
                  str(_source_copy(tmp_path))]):
        done = _run([python, "-m", "pip", *args], tmp_path, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]

    probe = ("import importlib.util as u, sys; "
             f"print(' '.join(m for m in {EXTRA_ONLY!r} if u.find_spec(m)))")
    done = _run([python, "-c", probe], tmp_path)
    assert done.returncode == 0 and done.stdout.split() == [], done.stdout + done.stderr
    # One import name: the folders install under `weightsearch.`, never as `trainer` and so on.
    names = ("import importlib.util as u; "
             f"print(' '.join(m for m in {tuple(PACKAGE_FOLDERS.values())!r} if u.find_spec(m)))")
    assert _run([python, "-c", names], tmp_path).stdout.split() == ["weightsearch"]
    done = _run([python, "-c", "from weightsearch.trainer import train; print(train.__module__)"],
                tmp_path)
    assert done.stdout.strip() == "weightsearch.trainer.pipeline", done.stderr
    typed = ("import importlib.resources as r; "
             f"print(all(r.files(p).joinpath('py.typed').is_file() for p in {PACKAGES!r}))")
    assert _run([python, "-c", typed], tmp_path).stdout.strip() == "True"

    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(f"encoder: {tiny_encoder}\ndata_dir: {ROOT / 'data' / 'glue_sample'}\n"
                    "tasks: [rte, mrpc]\nepochs: 1\nmax_train_examples: 16\n"
                    f"max_eval_examples: 16\noutput_dir: {tmp_path / 'run'}\n")
    done = _run([script, "train", "--config", str(tiny)], tmp_path)
    assert done.returncode == 0 and (tmp_path / "run" / "result.json").is_file(), done.stderr

    url = f"sqlite:///{tmp_path / 'core.db'}"
    for args in (["recommend", "--train-size", "2500", "--storage", url],
                 ["import", str(TABLE2), "--study", "paper", "--storage", url],
                 ["inspect", "--storage", url, "--format", "json"]):
        done = _run([script, *args], tmp_path)
        assert done.returncode == 0, (args, done.stderr)
    assert '"paper"' in done.stdout

    spec = tmp_path / "study.yaml"
    spec.write_text(f"study: s\ntrain: {{data_dir: {ROOT / 'data' / 'glue_sample'}, "
                    "tasks: [rte, mrpc]}\nweights: [1, 9]\nallow_inert: true\n")
    run_cfg = tmp_path / "run.yaml"
    run_cfg.write_text(f"data_dir: {ROOT / 'data' / 'glue_sample'}\ntasks: [rte]\n"
                       "tracking: {tensorboard: true}\n")
    for args, extra in ((["launch", str(spec), "--storage", url], "cluster"),
                        (["resume", "s", "--storage", url], "cluster"),
                        (["serve", "--port", "1"], "serve"),
                        (["train", "--config", str(run_cfg)], "tracking"),
                        (["inspect", "--storage", url, "--plot", str(tmp_path / "p.png")],
                         "plot")):
        done = _run([script, *args], tmp_path)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert f"pip install 'weightsearch[{extra}]'" in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr, (args, done.stderr)
