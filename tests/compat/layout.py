"""The fixed place where the release fixture's runs lived, laid out again for reading it."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path("/tmp/weightsearch-compat-0.1.0")
STUDY = "compat"
SAMPLE = Path(__file__).resolve().parents[2] / "data" / "glue_sample"
TASKS = {"rte": "RTE", "mrpc": "MRPC", "stsb": "STS-B"}


def lay_out() -> Path:
    """A fresh ROOT with the tiny encoder and the sample data of the fixture's tasks."""
    from tiny_encoder import build

    shutil.rmtree(ROOT, ignore_errors=True)
    ROOT.mkdir(parents=True)
    build(ROOT / "encoder")
    for folder in TASKS.values():
        shutil.copytree(SAMPLE / folder, ROOT / "data" / folder)
    return ROOT


def run_config() -> dict:
    return {
        "encoder": str(ROOT / "encoder"),
        "data_dir": str(ROOT / "data"),
        "tasks": list(TASKS),
        "central_task": "rte",
        "epochs": 2,
        "batch_size": 8,
        "max_train_examples": 24,
        "max_eval_examples": 16,
        "keep_checkpoints": 2,
        "num_threads": 1,
        "output_dir": str(ROOT / "run"),
        "cache_dir": str(ROOT / "cache"),
    }


def study_dict() -> dict:
    return {
        "study": STUDY,
        "storage": f"sqlite:///{ROOT / 'studies.db'}",
        "train": {
            "encoder": str(ROOT / "encoder"),
            "data_dir": str(ROOT / "data"),
            "tasks": list(TASKS),
            "epochs": 1,
            "batch_size": 16,
            "max_train_examples": 32,
            "max_eval_examples": 32,
            "num_threads": 1,
        },
        "central_tasks": ["rte", "stsb"],
        "weights": [1, 9],
        "seeds": [1, 2],
        "workdir": str(ROOT / "runs"),
    }
