"""Peak memory and CPU time of one MiniLM run on RTE + MRPC (batch 32, 128 tokens, SIWLM).

    python benchmarks/bench_memory.py --data-dir ../shared/data/glue [--rows 0] [--epochs 1]
        [--compare DIR | --versus-set KEY=VALUE | --versus-env NAME=VALUE] [--repeats 1]

Each run is a fresh `weightsearch train` process; the table gives its `peak_rss_mib` (the run's
own peak, `result.json`), the RSS it ends its last epoch with (sampled from /proc four times a
second), and its CPU seconds (user + system). `--rows N` caps each task's training rows (0: all
of them); dev sets are RTE's and MRPC's whole ones. `--compare DIR` alternates with the code of
another checkout (DIR first on PYTHONPATH), for before/after figures from one run;
`--versus-set attention_dropout=0` alternates with this code and that run setting, and
`--versus-env MALLOC_ARENA_MAX=2` with that environment variable (an allocator setting).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _rss_mib(pid: int) -> float | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    line = next((ln for ln in status if ln.startswith("VmRSS")), None)
    return int(line.split()[1]) / 1024 if line else None


def run(code: Path, data_dir: str, rows: int, epochs: int, work: Path, tag: str,
        setting: dict | None = None, extra_env: dict | None = None) -> dict:
    out = work / tag
    config = {"data_dir": data_dir, "tasks": ["rte", "mrpc"], "central_task": "rte",
              "weighting": {"scheme": "siwlm", "central_weight": 9}, "epochs": epochs,
              "batch_size": 32, "max_seq_len": 128, "lr": 2e-4, "seed": 1,
              "checkpoints": "none", "output_dir": str(out), **(setting or {})}
    if rows:
        config["max_train_examples"] = rows
    path = work / f"{tag}.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1", **(extra_env or {})}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "weightsearch.cli", "train", "--config",
                             str(path), "--quiet"], cwd=code, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    trace: list[float] = []

    def sample() -> None:
        while proc.poll() is None:
            rss = _rss_mib(proc.pid)
            if rss is not None:
                trace.append(rss)
            time.sleep(0.25)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    err = proc.communicate()[1]
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"{tag}: train failed ({proc.returncode}): {err[-1500:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = json.loads((out / "result.json").read_text())
    return {"tag": tag, "peak": result["peak_rss_mib"], "end": trace[-1] if trace else 0.0,
            "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "wall": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--rows", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--compare", type=Path)
    parser.add_argument("--versus-set", help="KEY=VALUE: this code with that run setting")
    parser.add_argument("--versus-env", help="NAME=VALUE: this code with that environment")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    data_dir = str(Path(args.data_dir).resolve())
    variants: list[tuple[str, Path, dict, dict]] = [("this", ROOT, {}, {})]
    if args.compare:
        variants.append(("compare", args.compare.resolve(), {}, {}))
    if args.versus_set:
        key, value = args.versus_set.split("=", 1)
        variants.append((f"{key}={value}"[:10], ROOT, {key: yaml.safe_load(value)}, {}))
    if args.versus_env:
        name, value = args.versus_env.split("=", 1)
        variants.append((name[:10], ROOT, {}, {name: value}))
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        for r in range(args.repeats):
            for name, code, setting, env in variants:
                rows.append(run(code, data_dir, args.rows, args.epochs, Path(tmp),
                                f"{name}{r}".replace("/", "-"), setting, env))
    print(f"MiniLM, RTE + MRPC, batch 32, 128 tokens, {args.epochs} epoch(s), "
          f"{args.rows or 'all'} training rows per task; cpus={os.cpu_count()}")
    print(f"{'run':<13} {'peak_rss_mib':>12} {'end_rss_mib':>11} {'cpu_s':>7} {'wall_s':>7}")
    for row in rows:
        print(f"{row['tag']:<13} {row['peak']:>12.0f} {row['end']:>11.0f} {row['cpu']:>7.1f} "
              f"{row['wall']:>7.1f}")


if __name__ == "__main__":
    main()
