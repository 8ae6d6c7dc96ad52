#!/usr/bin/env bash
# Wall time of the commands whose times README.md, docs/ and the example headers quote, each
# as a whole process (farm-bench: min, median and max over RUNS runs), every run from scratch
# (its own study database and run folders). Run it on an idle machine, from the repository
# root, with the project's .venv:
#   bash benchmarks/time_examples.sh [RUNS] > time-examples.txt
# The figures quoted are in BENCHMARKS.md, "Times of the documented commands".
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-2}"
BIN="$PWD/.venv/bin"
SCRATCH="$(mktemp -d /tmp/time-examples.XXXXXX)"
trap 'rm -rf "$SCRATCH"' EXIT
export HF_HUB_OFFLINE=1

# One fresh folder per run: a study launched into a database that holds it would only resume.
fresh() {
  printf 'rm -rf %s/run && mkdir -p %s/run && ' "$SCRATCH" "$SCRATCH"
}

time_it() {  # LABEL COMMAND...: the command with its database and folders under $SCRATCH/run
  local label="$1"; shift
  echo "== $label: $*"
  farm-bench -n "$RUNS" --warmup 0 --timeout 3600 -- sh -c "$(fresh)$*" | sed 's/^/   /'
}

study() {  # EXAMPLE: `weightsearch launch` of examples/EXAMPLE.yaml from scratch
  time_it "launch examples/$1.yaml" "$BIN/weightsearch launch examples/$1.yaml --quiet" \
    "--storage sqlite:///$SCRATCH/run/studies.db --set workdir=$SCRATCH/run/runs"
}

time_it "demo study (scripts/demo.sh's launch, inspect --plot, recommend)" \
  "$BIN/weightsearch launch examples/study-sample.yaml --quiet" \
  "--storage sqlite:///$SCRATCH/run/studies.db --set workdir=$SCRATCH/run/runs &&" \
  "$BIN/weightsearch inspect sample --storage sqlite:///$SCRATCH/run/studies.db" \
  "--plot $SCRATCH/run/sample.png >/dev/null &&" \
  "$BIN/weightsearch recommend --train-size 2500 --storage sqlite:///$SCRATCH/run/studies.db"
time_it "train examples/run-sample.yaml" \
  "$BIN/weightsearch train --config examples/run-sample.yaml --quiet" \
  "--set output_dir=$SCRATCH/run/out"
time_it "train examples/run-qa-mix-sample.yaml" \
  "$BIN/weightsearch train --config examples/run-qa-mix-sample.yaml --quiet" \
  "--set output_dir=$SCRATCH/run/out"
for example in study-finetuned-sample study-qa-weight-sample study-grouping-sample \
               study-methods-sample study-budget-sample; do
  study "$example"
done
time_it "the fast test tier (plain pytest)" "$BIN/python -m pytest -q -p no:cacheprovider"
