"""The core install: its requirements leave out the extras' packages, and `recommend`,
`inspect` and `import` run with Ray, FastAPI, uvicorn, psycopg and matplotlib unimportable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
EXTRA_ONLY = ("ray", "fastapi", "fastapi_offline", "uvicorn", "psycopg", "matplotlib")
# Makes the extras' packages unimportable in the child, as in an install without them.
BLOCKER = f"""
import sys
class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {EXTRA_ONLY!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, _Absent())
"""


def test_core_requirements_leave_out_the_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"]).lower()
    for name in ("ray", "fastapi", "uvicorn", "psycopg", "matplotlib"):
        assert name not in core, name
    assert set(project["optional-dependencies"]) >= {"serve", "cluster", "plot", "all"}


def _without_extras(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)
    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", str(ROOT))])
    return subprocess.run([sys.executable, "-m", "weightsearch.cli", *args], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": path}, capture_output=True,
                          text=True, timeout=300)


def test_recommend_import_and_inspect_run_without_the_extras(tmp_path):
    url = f"sqlite:///{tmp_path / 'core.db'}"
    table = ROOT / "studies" / "data" / "siwlm_table2.csv"
    for args in (["recommend", "--train-size", "2500", "--storage", url],
                 ["import", str(table), "--study", "paper", "--storage", url],
                 ["inspect", "--storage", url, "--format", "json"]):
        done = _without_extras(tmp_path, *args)
        assert done.returncode == 0, done.stderr
    assert '"paper"' in done.stdout
    served = _without_extras(tmp_path, "serve", "--port", "1")
    assert served.returncode == 2 and "weightsearch[serve]" in served.stderr, served.stderr
    assert "Traceback" not in served.stderr
