#!/usr/bin/env bash
# Installs weightsearch into .venv (CPU torch first) and runs the main job: the example
# weight-search study on the shipped GLUE sample, then shows its result.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"   # see scripts/test.sh for why first
python -m pip install -q -c docker/constraints.txt -e ".[all]"
export HF_HUB_OFFLINE=1
weightsearch launch examples/study-sample.yaml
weightsearch inspect sample --storage sqlite:///weightsearch.db --plot weightsearch-sample.png
weightsearch recommend --train-size 2500 --storage sqlite:///weightsearch.db
