#!/usr/bin/env bash
# Installs the package with its test tools into .venv (CPU torch first) and runs every test tier
# (plain `pytest` runs the fast one alone).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
# torch first, pinned: here this takes the local CPU wheel, whereas a bare `torch` requirement
# would pull several GB of CUDA packages. Set TORCH_SPEC to choose another build.
python -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
python -m pip install -q -c docker/constraints.txt -e ".[all,test]"
ruff check .
lint-imports  # the layer contracts in pyproject.toml
mypy  # the types, over the installed namespace (pyproject.toml [tool.mypy])
# Every tier: `-m ""` lifts the fast-tier default of pyproject.toml (a later `-m` in "$@" wins).
python -m pytest -q -p no:cacheprovider -m "" "$@"
