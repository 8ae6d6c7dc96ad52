"""Epoch-end checkpoints: safetensors weights plus optimizer, scheduler, RNG and run state (and
the weighting scheme's own state, for a scheme that has one).

A checkpoint folder is written under a temporary name and renamed when complete, so a run
killed mid-write never leaves a checkpoint that looks valid but is not.

What stays on disk follows the run's `checkpoints` policy. While a run trains, every policy but
`all` keeps its newest `keep_checkpoints` epochs (what a resume needs); once the run has
finished, `finish_checkpoints` trims them:

    all    every epoch's full checkpoint
    last   the newest full checkpoints: the run can be extended or inspected exactly
    final  the final epoch's weights only (no optimizer state): for init_from, teachers, use
    none   no weights; the final epoch's meta.json stays, a record of what the run was

A trimmed checkpoint says so in its meta.json (`kept`), so a missing file of a trimmed
checkpoint is not mistaken for damage, and a finished run resumed again is recognised as done.

meta.json also holds the SHA-256 of the weights and state files (`digests`), written with them:
a file damaged after it was written (bit rot, a torn page, a copy cut short) is named and the
previous intact checkpoint used, even where its header still parses.

Nothing in a checkpoint runs code when read. The weights are safetensors; `state.pt` (optimizer,
scheduler, RNG and scheme state) is read with `torch.load(weights_only=True)`, which builds
tensors and plain containers only, and only where a run resumes its own training: `init_from`
and distillation teachers read the weights alone. A state file that needs anything else (a
crafted pickle) is refused by name.
"""

from __future__ import annotations

import contextlib
import errno
import json
import pickle
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, load_model, save_file, save_model

from weightsearch.core.errors import ConfigError, DiskFull, causes
from weightsearch.core.files import file_digest
from weightsearch.trainer.optim import load_optimizer_state, portable_state

CHECKPOINTS = "checkpoints"
META = "meta.json"
WEIGHTS = "model.safetensors"
STATE = "state.pt"
FULL, WEIGHTS_ONLY, RECORD = "full", "weights", "record"  # what a checkpoint folder holds
DIGESTS = "digests"  # meta.json: file name -> SHA-256 of the file as written


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    epoch: int
    meta: dict[str, Any]
    state: dict[str, Any] = field(default_factory=dict, repr=False)  # optimizer, scheduler, rng

    @property
    def kept(self) -> str:
        return str(self.meta.get("kept", FULL))

    @property
    def has_weights(self) -> bool:
        return self.kept in (FULL, WEIGHTS_ONLY)

    @property
    def weights(self) -> Path:
        return self.path / WEIGHTS


def rng_state() -> dict[str, Any]:
    """Every generator's state, in types a weights-only load reads back (numpy's key array as
    a tensor)."""
    # The legacy tuple (the default); the stubs also allow the dict of legacy=False.
    name, keys, pos, has_gauss, cached = cast(tuple[str, np.ndarray, int, int, float],
                                              np.random.get_state())
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss),
                  float(cached)),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _holds_slices(model: torch.nn.Module) -> bool:
    """Whether some parameter is a slice of a bigger tensor (a fused run's member:
    `weightsearch.trainer.fused`), which safetensors' model functions refuse."""
    return any(p.untyped_storage().nbytes() != p.numel() * p.element_size()
               for p in model.parameters())


def save_weights(model: torch.nn.Module, file: Path) -> None:
    """The model's weights as safetensors; a fused member's slices saved as their own copies."""
    if not _holds_slices(model):
        save_model(model, str(file))
        return
    state = {name: t.detach().clone() for name, t in model.state_dict().items()}
    save_file(state, str(file), metadata={"format": "pt"})


def load_weights(model: torch.nn.Module, file: Path, device: torch.device) -> None:
    """Read what `save_weights` wrote into the model (into a fused member's slices in place)."""
    if not _holds_slices(model):
        load_model(model, str(file), device=str(device))
        return
    model.load_state_dict(load_file(str(file), device=str(device)))


def save_checkpoint(
    output_dir: Path,
    epoch: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    meta: dict[str, Any],
    keep: int | None = 1,
    scheme_state: dict[str, Any] | None = None,
) -> Path:
    """Write epoch `epoch`'s checkpoint and drop all but the newest `keep` (None: keep all).
    `scheme_state` is the weighting scheme's own state (`Scheme.state_dict`), if it has any."""
    root = output_dir / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"epoch-{epoch:03d}"
    tmp = root / f".epoch-{epoch:03d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        save_weights(model, tmp / WEIGHTS)
        torch.save(
            {
                "optimizer": portable_state(optimizer),
                "scheduler": scheduler.state_dict(),
                "rng": rng_state(),
                **({"scheme": scheme_state} if scheme_state else {}),
            },
            tmp / STATE,
        )
        digests = {name: file_digest(tmp / name) for name in (WEIGHTS, STATE)}
        (tmp / META).write_text(json.dumps({"epoch": epoch, **meta, DIGESTS: digests}, indent=1))
    except Exception as exc:  # torch and safetensors raise their own types for a failed write
        shutil.rmtree(tmp, ignore_errors=True)
        if out_of_space(exc, root):  # torch says "unexpected pos", not "No space left"
            raise DiskFull(
                f"no space left on the disk of {root}: epoch {epoch}'s checkpoint could not be "
                f"written ({shutil.disk_usage(root).free / 1e6:.0f} MB free); free space there, "
                "or keep less (checkpoints: none or final, keep_checkpoints: 1), then resume"
            ) from None
        raise
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    if keep is not None:
        _drop_older(root, keep)
    return final


LOW_SPACE = 64 << 20  # bytes: below this a failed write is taken for a full disk


def _numpy_arrays() -> list[Any]:
    """What a numpy array pickles to, for the safe loader: numpy 2 names the module of
    `_reconstruct` numpy._core, numpy 1 numpy.core, and a file may come from either."""
    core = getattr(np, "_core", None)
    # np.core is reached on numpy 1 only; numpy 2's stubs leave it out
    multiarray = getattr(core, "multiarray", None) or np.core.multiarray  # type: ignore[attr-defined]
    reconstruct = multiarray._reconstruct
    return [np.ndarray, np.dtype, type(np.dtype(np.uint32)), reconstruct,
            (reconstruct, "numpy.core.multiarray._reconstruct"),
            (reconstruct, "numpy._core.multiarray._reconstruct")]


def read_state(path: Path) -> dict[str, Any]:
    """A checkpoint's `state.pt`, read without running code: tensors and plain containers only.
    Numpy's array reconstruction is allowed too, for state files written before the RNG state
    was stored as tensors. Raises what torch raises for anything else."""
    allowed = (torch.serialization.safe_globals(_numpy_arrays())
               if hasattr(torch.serialization, "safe_globals")  # torch >= 2.5
               else contextlib.nullcontext())  # older: states written since load; older ones not
    with allowed:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:
            raise _Damaged(f"{path} (holds objects other than tensors and plain data; refused "
                           "unread, since reading them could run code)") from None
    if not isinstance(state, dict):
        raise TypeError(f"holds a {type(state).__name__}, not a mapping")
    return state


def out_of_space(exc: BaseException, folder: Path) -> bool:
    """Whether a failed write failed for want of space: ENOSPC in the chain, or a disk that
    has almost nothing left (torch's zip writer reports a short write as "unexpected pos")."""
    if any((isinstance(e, OSError) and e.errno == errno.ENOSPC)
           or "no space left" in str(e).lower() for e in causes(exc)):
        return True
    try:
        return shutil.disk_usage(folder).free < LOW_SPACE
    except OSError:
        return False


def finish_checkpoints(output_dir: Path, policy: str, keep: int = 1) -> None:
    """Trim a finished run's checkpoints to what `policy` keeps (see the module docstring).

    Idempotent, and safe to interrupt: the newest checkpoint's meta.json is rewritten (in
    place, atomically) to say what it keeps before any of its files is removed."""
    root = output_dir / CHECKPOINTS
    if policy == "all" or not root.is_dir():
        return
    for tmp in root.glob(".epoch-*.tmp"):  # a write a crash interrupted
        shutil.rmtree(tmp, ignore_errors=True)
    if policy == "last":
        _drop_older(root, keep)
        return
    _drop_older(root, 1)
    newest = _epoch_folders(root)[-1:]
    if not newest:
        return
    folder, kept = newest[0], WEIGHTS_ONLY if policy == "final" else RECORD
    meta_file = folder / META
    try:
        meta = json.loads(meta_file.read_text())
    except (OSError, ValueError):
        return  # a damaged checkpoint is left for latest_checkpoint to report
    if meta.get("kept", FULL) != kept and not (kept == WEIGHTS_ONLY and meta.get("kept") == RECORD):
        partial = folder / f".{META}.tmp"
        partial.write_text(json.dumps({**meta, "kept": kept}, indent=1))
        partial.replace(meta_file)
    (folder / STATE).unlink(missing_ok=True)
    if kept == RECORD:
        (folder / WEIGHTS).unlink(missing_ok=True)


def _epoch_folders(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("epoch-*") if p.is_dir())


def _drop_older(root: Path, keep: int) -> None:
    for old in _epoch_folders(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def latest_checkpoint(
    output_dir: Path, warn: Callable[[str], None] = print, with_state: bool = True
) -> Checkpoint | None:
    """The newest intact epoch checkpoint; a damaged one is reported and an older one used.
    `with_state`: also read its optimizer, scheduler and RNG state (a run resuming itself);
    without it only the weights are checked and nothing else is read."""
    root = output_dir / CHECKPOINTS
    if not root.is_dir():
        return None
    found = sorted((p for p in root.glob("epoch-*") if p.is_dir()), reverse=True)
    for i, path in enumerate(found):
        try:
            return _read(path, with_state)
        except _Damaged as damage:
            older = "an older checkpoint" if i + 1 < len(found) else "none older is left"
            warn(f"checkpoint {damage}: damaged, skipped ({older})")
    return None


class _Damaged(Exception):
    pass


def _read(path: Path, with_state: bool = True) -> Checkpoint:
    """Read and check every file a checkpoint folder should hold (the state file only
    `with_state`); _Damaged names the file at fault."""
    meta_file, weights, state_file = path / META, path / WEIGHTS, path / STATE
    try:
        meta = json.loads(meta_file.read_text())
        epoch = int(meta["epoch"])
        if meta.get("kept", FULL) not in (FULL, WEIGHTS_ONLY, RECORD):
            raise ValueError(f"unknown kept: {meta['kept']!r}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise _Damaged(f"{meta_file} ({type(exc).__name__}: {exc})") from None
    kept = meta.get("kept", FULL)
    if kept == RECORD:
        return Checkpoint(path=path, epoch=epoch, meta=meta)
    _check_digest(weights, meta)
    try:
        with safe_open(str(weights), framework="pt") as f:
            # A slice of each tensor checks that its bytes lie inside a possibly truncated file.
            for key in f.keys():  # noqa: SIM118 (a safe_open handle is no dict)
                f.get_slice(key)[:0]
    except Exception as exc:  # safetensors raises its own error types for a bad header
        raise _Damaged(f"{weights} ({type(exc).__name__}: {exc})") from None
    if kept == WEIGHTS_ONLY or not with_state:
        return Checkpoint(path=path, epoch=epoch, meta=meta)
    _check_digest(state_file, meta)
    try:
        state = read_state(state_file)
        missing = {"optimizer", "scheduler", "rng"} - set(state)
        if missing:
            raise KeyError(f"missing {', '.join(sorted(missing))}")
    except _Damaged:
        raise
    except Exception as exc:  # torch.load raises many types for truncated or foreign files
        raise _Damaged(f"{state_file} ({type(exc).__name__}: {exc})") from None
    return Checkpoint(path=path, epoch=epoch, meta=meta, state=state)


def _check_digest(file: Path, meta: dict[str, Any]) -> None:
    """The file's bytes against the digest written with it (checkpoints written before digests
    existed have none: their headers are all that is checked)."""
    expected = (meta.get(DIGESTS) or {}).get(file.name)
    if expected is None:
        return
    try:
        found = file_digest(file)
    except OSError as exc:
        raise _Damaged(f"{file} ({type(exc).__name__}: {exc})") from None
    if found != expected:
        raise _Damaged(f"{file} (its SHA-256 is not the one written with it: changed or "
                       "damaged since)")


def load_checkpoint(
    ckpt: Checkpoint,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    device: torch.device,
) -> dict[str, Any]:
    """Restore the model, optimizer, scheduler and RNGs; the checkpoint's state (its `scheme`
    entry, where the weighting scheme saved one, is the loop's to restore)."""
    load_weights(model, ckpt.weights, device)
    if not ckpt.state:  # read with_state=False: read (and check) it now
        try:
            ckpt = _read(ckpt.path, with_state=True)
        except _Damaged as damage:
            raise ConfigError([f"checkpoint {damage}: damaged; resume again to continue from "
                               "an older one"]) from None
    state = ckpt.state
    load_optimizer_state(optimizer, state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    restore_rng(state["rng"])
    return state


def initial_weights_file(source: str, warn: Callable[[str], None] = print) -> Path:
    """The weights file `init_from` names: a run folder's newest intact checkpoint's, a
    checkpoint folder's, or the file itself."""
    path = Path(source)
    if (path / CHECKPOINTS).is_dir():
        ckpt = latest_checkpoint(path, warn, with_state=False)
        if ckpt is None:
            raise ConfigError([f"init_from: {source} holds no intact checkpoint; give another "
                               "run folder or a checkpoint folder"])
        if not ckpt.has_weights:
            raise ConfigError([no_weights_problem("init_from", source)])
        path = ckpt.path
    return path / WEIGHTS if path.is_dir() else path


def no_weights_problem(where: str, source: Path | str) -> str:
    return (f"{where}: {source} kept no model weights (it ran with checkpoints: none); train it "
            "again with checkpoints: final (or last), or give another run")


def load_initial(
    model: torch.nn.Module, source: str, heads: str, warn: Callable[[str], None] = print
) -> None:
    """Start `model` from the weights of an earlier run (`init_from`): its encoder, and with
    heads="keep" also the heads and task poolers of the tasks both runs have."""
    file = initial_weights_file(source, warn)
    try:
        saved = {k.replace("._orig_mod", ""): v for k, v in load_file(str(file)).items()}
    except Exception as exc:  # safetensors raises its own types for missing or foreign files
        raise ConfigError([
            f"init_from: cannot read weights from {file} ({type(exc).__name__}); give a run "
            "folder, a checkpoint folder or a model.safetensors file"
        ]) from None
    own = model.state_dict()
    # The experts of a mixture are shared like the encoder; its gates belong to their tasks.
    wanted = [k for k in own if k.startswith("encoder.")
              or (k.startswith("mixture.experts.") and k in saved)
              or (heads == "keep" and k.startswith(("heads.", "task_poolers.", "mixture.gates."))
                  and k in saved)]
    missing = [k for k in wanted if k not in saved]
    wrong = [k for k in wanted if k in saved and saved[k].shape != own[k].shape]
    if missing or wrong:
        bad = (missing or wrong)[0]
        raise ConfigError([
            f"init_from: {file} does not fit this run's model ({len(missing)} weights missing, "
            f"{len(wrong)} of another shape, e.g. {bad}); it was trained with another encoder "
            "or task definition: use the same encoder and tasks, or init_heads: fresh"
        ])
    model.load_state_dict({k: saved[k] for k in wanted}, strict=False)
