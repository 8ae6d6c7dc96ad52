"""What the results site costs as a study grows: the server's CPU time per page.

For each study size N (COMPLETE trials of one central task: 15 weights x N/15 seeds, imported
from a CSV), a fresh SQLite database is served through FastAPI's TestClient and each page is
asked `--repeats` times after one warm-up request (the first read of a database builds its
cache). Prints, per size and page, the median CPU milliseconds per request (this process's user
and system time: the machine's load does not move it) and the page's size.

    python benchmarks/bench_site.py [--sizes 1000,50000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def study_csv(path: Path, size: int) -> Path:
    seeds = max(1, size // 15)
    rows = ["central_task,task_type,train_size,central_weight,seed,metric"]
    for weight in range(1, 16):
        for seed in range(seeds):
            rows.append(f"rte,classification,2490,{weight},{seed},"
                        f"{60 + weight % 5 + (seed * 7919 % 100) / 50:.3f}")
    path.write_text("\n".join(rows) + "\n")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,50000")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from fastapi.testclient import TestClient

    from weightsearch.service.app import create_app
    from weightsearch.studies.importer import import_file

    pages = ("/", "/ui/studies/big", "/ui/studies/big?page=2", "/studies/big")
    print("trials  page                      cpu_ms(median)  kB")
    for size in map(int, args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as folder:
            url = f"sqlite:///{folder}/site.db"
            import_file(study_csv(Path(folder) / "big.csv", size), "big", url)
            client = TestClient(create_app(url))
            for page in pages:
                client.get(page)  # warm: the first read builds the cache
                spent = []
                for _ in range(args.repeats):
                    start = cpu()
                    response = client.get(page)
                    spent.append(cpu() - start)
                    assert response.status_code == 200, (page, response.status_code)
                print(f"{size:6d}  {page:24s}  {statistics.median(spent) * 1000:14.1f}  "
                      f"{len(response.content) / 1024:6.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
