"""Epoch-end checkpoints: safetensors weights plus optimizer, scheduler, RNG and run state.

A checkpoint folder is written under a temporary name and renamed when complete, so a run
killed mid-write never leaves a checkpoint that looks valid but is not.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_model, save_model

CHECKPOINTS = "checkpoints"
META = "meta.json"


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    epoch: int
    meta: dict[str, Any]


def rng_state() -> dict[str, Any]:
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    output_dir: Path,
    epoch: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    meta: dict[str, Any],
    keep: int = 1,
) -> Path:
    root = output_dir / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"epoch-{epoch:03d}"
    tmp = root / f".epoch-{epoch:03d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_model(model, str(tmp / "model.safetensors"))
    torch.save(
        {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": rng_state(),
        },
        tmp / "state.pt",
    )
    (tmp / META).write_text(json.dumps({"epoch": epoch, **meta}, indent=1))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in sorted(p for p in root.glob("epoch-*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(output_dir: Path) -> Checkpoint | None:
    root = output_dir / CHECKPOINTS
    if not root.is_dir():
        return None
    for path in sorted((p for p in root.glob("epoch-*") if p.is_dir()), reverse=True):
        meta_file = path / META
        if meta_file.is_file() and (path / "model.safetensors").is_file():
            meta = json.loads(meta_file.read_text())
            return Checkpoint(path=path, epoch=int(meta["epoch"]), meta=meta)
    return None


def load_checkpoint(
    ckpt: Checkpoint,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    device: torch.device,
) -> None:
    load_model(model, str(ckpt.path / "model.safetensors"), device=str(device))
    state = torch.load(ckpt.path / "state.pt", map_location="cpu", weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    restore_rng(state["rng"])
