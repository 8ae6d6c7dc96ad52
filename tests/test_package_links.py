"""The links behind the one namespace (weightsearch/trainer -> ../trainer, ...): a wheel built
from this checkout holds every package; a checkout whose links became text files (what Git
writes with core.symlinks=false) cannot build a partial wheel and says how to fix itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import ROOT
from weightsearch._links import LINKED

pytestmark = pytest.mark.slow  # builds wheels: seconds each
COPIED = ("weightsearch", *LINKED, "pyproject.toml", "setup.py", "README.md", "LICENSE")


def _wheel(source: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps",
                           "--no-build-isolation", "-w", str(out), "-q"],
                          capture_output=True, text=True, timeout=600)


def _copy(dest: Path, links_as_files: bool) -> Path:
    """This checkout's package files; its links kept, or written as Git writes them without
    symbolic links (a text file holding the target)."""
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(src, dest / name)
    if links_as_files:
        for name in LINKED:
            link = dest / "weightsearch" / name
            target = os.readlink(link)
            link.unlink()
            link.write_text(target)
    return dest


def test_the_wheel_holds_every_package(tmp_path: Path) -> None:
    source = _copy(tmp_path / "src", links_as_files=False)
    done = _wheel(source, tmp_path / "dist")
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("weightsearch-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in ("weightsearch", *(f"weightsearch/{p}" for p in LINKED)):
        assert f"{package}/__init__.py" in names, package
        assert f"{package}/py.typed" in names, package
    assert "weightsearch/recommender/data/siwlm_table2.csv" in names
    for top in LINKED:  # every module of each folder, under the one namespace
        for module in (ROOT / top).rglob("*.py"):
            if "__pycache__" not in module.parts:
                assert f"weightsearch/{module.relative_to(ROOT).as_posix()}" in names, module
    # weightsearch's own modules and sub-packages (core, testing); os.walk passes the links by
    for folder, _, files in os.walk(ROOT / "weightsearch"):
        for file in files:
            module = Path(folder, file).relative_to(ROOT).as_posix()
            if file.endswith(".py") and "__pycache__" not in module:
                assert module in names, module
    assert "weightsearch/testing/suite.py" in names


def test_a_checkout_without_links_refuses_to_build_and_says_the_fix(tmp_path: Path) -> None:
    source = _copy(tmp_path / "src", links_as_files=True)
    done = _wheel(source, tmp_path / "dist")
    assert done.returncode != 0
    assert "weightsearch/trainer is a file, not a link to the folder ../trainer" in \
        done.stderr + done.stdout
    assert "git config core.symlinks true" in done.stderr + done.stdout
    assert not list((tmp_path / "dist").glob("*.whl"))  # no partial wheel
    env = {**os.environ, "PYTHONPATH": str(source)}
    imported = subprocess.run([sys.executable, "-c", "import weightsearch.trainer"],
                              capture_output=True, text=True, env=env, cwd=tmp_path)
    assert imported.returncode == 1
    assert "ImportError: this weightsearch checkout is broken" in imported.stderr
    command = subprocess.run(
        [sys.executable, "-c", "import sys; sys.argv = ['weightsearch', '--help']; "
         "import weightsearch.cli"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert command.returncode == 2
    assert command.stderr.startswith("weightsearch: error: this weightsearch checkout is "
                                     "broken: weightsearch/recommender is a file")
    assert "Traceback" not in command.stderr


def test_coverage_measures_each_module_once_under_its_folder(tmp_path: Path) -> None:
    """pyproject.toml's coverage settings: a module run through the namespace is measured, and
    no module is listed twice (once by its folder, once through a link)."""
    pytest.importorskip("coverage")
    data = tmp_path / ".coverage"
    env = {**os.environ, "COVERAGE_FILE": str(data)}
    run = [sys.executable, "-m", "coverage"]
    script = tmp_path / "uses_the_trainer.py"
    script.write_text("import weightsearch.trainer.clipping\n")
    ran = subprocess.run([*run, "run", "--rcfile", str(ROOT / "pyproject.toml"), str(script)],
                         capture_output=True, text=True, env=env, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr[-2000:]
    report = tmp_path / "report.json"
    done = subprocess.run([*run, "json", "--rcfile", str(ROOT / "pyproject.toml"), "-o",
                           str(report)], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(report.read_text())["files"]
    files = [Path(name).resolve().relative_to(ROOT).as_posix() for name in measured]
    assert len(files) == len(set(files))
    expected = {p.relative_to(ROOT).as_posix() for top in ("weightsearch", *LINKED)
                for p in (ROOT / top).rglob("*.py")
                if "__pycache__" not in p.parts and not (top == "weightsearch"
                                                         and p.parent.name in LINKED)}
    assert set(files) == expected
    clipping = next(v for k, v in measured.items() if k.endswith("trainer/clipping.py"))
    assert clipping["summary"]["covered_lines"] > 0
