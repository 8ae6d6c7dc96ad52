"""How fast `weightsearch import` writes rows into a fresh SQLite study database.

    python benchmarks/bench_import.py [--rows 2000] [--tasks 1] [--repeats 1]

Writes an import file of N rows (`--tasks` central tasks, 15 weights, as many seeds as it
takes) to a temporary folder, imports it into a fresh SQLite file (WAL, as `weightsearch`
makes it) through `weightsearch.studies.importer.import_file`, and prints rows per second of
the whole import (reading and checking the file included). The file, the database and their
folder are removed afterwards.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

HEADER = "central_task,task_type,train_size,central_weight,seed,metric,metric_name\n"


def write_file(path: Path, rows: int, tasks: int) -> None:
    """`rows` rows over `tasks` central tasks: weights 1..15, seeds counting up."""
    lines = [HEADER]
    for i in range(rows):
        task, rest = f"task{i % tasks}", i // tasks
        weight, seed = 1 + rest % 15, rest // 15
        lines.append(f"{task},classification,{1000 + i % tasks},{weight},{seed},"
                     f"{0.5 + (i % 97) / 1000:.4f},accuracy\n")
    path.write_text("".join(lines))


def one_run(rows: int, tasks: int) -> float:
    """Rows per second of one import into a fresh database."""
    from weightsearch.studies.importer import import_file

    folder = Path(tempfile.mkdtemp(prefix="bench-import-"))
    try:
        source = folder / "rows.csv"
        write_file(source, rows, tasks)
        url = f"sqlite:///{folder / 'studies.db'}"
        start = time.perf_counter()
        import_file(source, "bench", url)
        return rows / (time.perf_counter() - start)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--tasks", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    rates = [one_run(args.rows, args.tasks) for _ in range(args.repeats)]
    shown = ", ".join(f"{r:,.0f}" for r in rates)
    print(f"{args.rows} rows, {args.tasks} task(s): {shown} rows/s")


if __name__ == "__main__":
    main()
