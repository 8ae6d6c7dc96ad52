#!/usr/bin/env bash
# Gathers, into .gpu/ (ignored by git through .gitignore, about 25 MB), what benchmarks/gpu_session.sh needs on a
# GPU machine whose image has torch and transformers but not this project's other packages:
# wheels of datasets and of the transformers and tokenizers versions the project is tested
# with (no dependencies: the image has the rest), all-MiniLM-L6-v2's config and tokenizer
# without its weights, and the five GLUE tasks of bench_gpu's realistic trial. Run it here,
# from anywhere, then carry .gpu:
#   bash benchmarks/gpu_session_prepare.sh        # GLUE=../shared/data/glue by default
set -euo pipefail
cd "$(dirname "$0")/.."
glue=${GLUE:-../shared/data/glue}
py=${PY:-.venv/bin/python}  # the project's environment (scripts/test.sh makes it)
rm -rf .gpu
mkdir -p .gpu/whl .gpu/minilm .gpu/glue
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any -d .gpu/whl \
  datasets==5.2.0 dill multiprocess transformers==5.23.0 tokenizers==0.23.3
"$py" - <<'PY'
import shutil
from pathlib import Path

from weightsearch.trainer.encoders import default_encoder_path

# The weights stay here (90 MB): speed does not depend on them, the GPU script makes random ones.
shutil.copytree(Path(default_encoder_path()), ".gpu/minilm", dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("model.safetensors", "*.bin", "README.md"))
PY
for task in SST-2 RTE MRPC STS-B CoLA; do
  cp -r "$glue/$task" .gpu/glue/
done
du -sh .gpu
