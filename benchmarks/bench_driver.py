"""What a study's driver process itself costs: its CPU time, its peak memory and the heavy
modules it loaded, for a launch of the shipped sample study (trials run in Ray workers, which
are not counted).

    python benchmarks/bench_driver.py [--examples 40] [--epochs 1]

The driver decides, claims and records; it trains nothing, so torch, transformers and datasets
have no business in it. Run it once with the code to measure and once with an older checkout
first on PYTHONPATH to compare (BENCHMARKS.md section 13).
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "datasets", "tensorboardX")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=40)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    from weightsearch.cli import main as cli

    with tempfile.TemporaryDirectory(prefix="bench-driver-") as tmp:
        started = time.perf_counter()
        rc = cli(["launch", str(ROOT / "examples/study-sample.yaml"), "--quiet",
                  "--storage", f"sqlite:///{tmp}/driver.db",
                  "--set", f"train.max_train_examples={args.examples}",
                  "--set", f"train.epochs={args.epochs}", "--set", f"workdir={tmp}/runs"])
        wall = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    status = Path("/proc/self/status").read_text().splitlines()
    hwm = next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))
    loaded = [m for m in HEAVY if m in sys.modules]
    cpu = usage.ru_utime + usage.ru_stime
    print(f"launch rc={rc}: study wall {wall:.1f} s; driver CPU {cpu:.1f} s, peak RSS "
          f"{hwm / 1024:.0f} MiB; loaded: {', '.join(loaded) or 'none of ' + ', '.join(HEAVY)}")


if __name__ == "__main__":
    main()
