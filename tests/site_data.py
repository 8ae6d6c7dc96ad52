"""A study database for the results site's tests and screenshots: the SIWLM paper's table, a
study with three seeds per weight, and a study whose name is markup (made by another tool:
`weightsearch` itself refuses such names, an Optuna user need not)."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

from tests.helpers import TABLE2
from weightsearch.studies.importer import import_file

HOSTILE = "<img src=x onerror=alert(1)>"
WEIGHTS = (1, 2, 3, 5, 8, 11, 15)
SEEDS = (1, 2, 3)


def seeded_results(path: Path) -> Path:
    """Three central tasks, every weight of WEIGHTS trained with each seed of SEEDS."""
    draw = random.Random(0)
    rows = ["central_task,task_type,train_size,central_weight,seed,metric"]
    for task, size, base in (("rte", 2490, 60.0), ("mrpc", 3668, 80.0), ("sst2", 67349, 92.0)):
        for weight in WEIGHTS:
            for seed in SEEDS:
                score = base + 3 * min(weight, 5) / 5 - 0.1 * weight + draw.gauss(0, 1)
                rows.append(f"{task},classification,{size},{weight},{seed},{score:.2f}")
    path.write_text("\n".join(rows) + "\n")
    return path


def site_database(folder: Path) -> str:
    url = f"sqlite:///{folder / 'site.db'}"
    import_file(TABLE2, "siwlm-paper", url)
    import_file(seeded_results(folder / "seeded.csv"), "demo", url)
    import_file(seeded_results(folder / "other.csv"), "renamed", url)
    db = sqlite3.connect(folder / "site.db")  # another tool's name for that study
    with db:
        db.execute("UPDATE studies SET study_name = replace(study_name, 'renamed/', ?)",
                   (HOSTILE + "/",))
    db.close()
    return url
