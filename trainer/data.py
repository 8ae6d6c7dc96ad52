"""Per-task datasets: tokenized once into an on-disk Arrow cache, batched MT-DNN style, padded.

Cache entries are keyed by everything that changes the tokens (file content, tokenizer,
max_seq_len, column mapping, label set, example limit) and published with an atomic rename,
so trials that share a cache directory never read a half-written entry.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import torch

from trainer.readers import TaskRows, read_task_file, resolve_path
from trainer.tasks import TaskSpec
from weightsearch.errors import DataError

CACHE_VERSION = 1  # bump when the stored columns change
BUCKET_BATCHES = 50  # batches per length-sorting chunk: little padding, still well mixed
_META = "weightsearch_meta.json"  # written last inside an entry, before the atomic rename


@dataclass(frozen=True)
class Subset:
    """Which rows of a split to keep: all of them, the first n, or n (or a fraction) drawn at
    random with a seed of its own, so that every seed of a study trains on the same rows."""

    n: int | None = None
    fraction: float | None = None
    random: bool = False
    seed: int = 0

    def apply(self, rows: TaskRows) -> TaskRows:
        n = self.n
        if self.fraction is not None:
            n = max(1, math.ceil(self.fraction * len(rows)))
        if n is None:
            return rows
        return rows.sample(n, self.seed) if self.random else rows.head(n)

    def key(self) -> Any:
        if not self.random and self.fraction is None:
            return self.n  # the cache key of the first-n limit from before random subsets
        return {"n": self.n, "fraction": self.fraction, "random": self.random, "seed": self.seed}


@dataclass
class TaskData:
    """A task's tokenized splits. Columns: input_ids, token_type_ids, length, label[, group]."""

    spec: TaskSpec
    train: datasets.Dataset
    evals: dict[str, datasets.Dataset]
    truncated: dict[str, int]

    @property
    def train_size(self) -> int:
        return len(self.train)


def load_task_data(spec: TaskSpec, data_dir: str | Path | None, tokenizer: Any,
                   max_seq_len: int, cache_dir: str | Path | None,
                   max_train_examples: int | None = None,
                   max_eval_examples: int | None = None, overlong: str = "truncate",
                   eval_max_seq_len: int | None = None,
                   train_subset: Subset | None = None) -> TaskData:
    """Read, validate and tokenize every split of a task, or load them from the cache.

    `truncated` counts each split's examples longer than its token limit: cut to the limit, or,
    for the training split with `overlong="drop"`, left out.
    """
    datasets.disable_progress_bars()
    truncated: dict[str, int] = {}
    train, truncated["train"] = _load_split(spec, "train", resolve_path(data_dir, spec.train_file),
                                            tokenizer, max_seq_len, cache_dir,
                                            train_subset or Subset(n=max_train_examples),
                                            drop=overlong == "drop")
    evals: dict[str, datasets.Dataset] = {}
    for split, path in spec.dev_files:
        evals[split], truncated[split] = _load_split(spec, split, resolve_path(data_dir, path),
                                                     tokenizer, eval_max_seq_len or max_seq_len,
                                                     cache_dir, Subset(n=max_eval_examples))
    return TaskData(spec=spec, train=train, evals=evals, truncated=truncated)


def count_train_examples(spec: TaskSpec, data_dir: str | Path | None) -> int:
    """Training examples in the task's train file (read and validated; no tokenizer)."""
    return len(read_task_file(spec, resolve_path(data_dir, spec.train_file)))


def _load_split(spec: TaskSpec, split: str, path: Path, tokenizer: Any, max_seq_len: int,
                cache_dir: str | Path | None, subset: Subset,
                drop: bool = False) -> tuple[datasets.Dataset, int]:
    if not path.is_file():
        raise DataError(f"{path}: file not found (task '{spec.name}', split '{split}'); check "
                        "data_dir and the task's train_file/dev_files")
    if cache_dir is None:
        return _tokenize_rows(spec, subset.apply(read_task_file(spec, path)), tokenizer,
                              max_seq_len, drop)
    key = _cache_key(spec, path, tokenizer, max_seq_len, subset.key(), drop)
    root = Path(cache_dir).expanduser()
    entry = root / f"{spec.name}-{_safe(split)}-{key[:24]}"
    if (entry / _META).is_file():
        try:
            return _read_entry(entry)
        except Exception as err:  # truncated Arrow files and bad JSON raise many types
            print(f"note: tokenized cache {entry} is damaged ({type(err).__name__}); rebuilding it")
            _discard(entry)
    ds, truncated = _tokenize_rows(spec, subset.apply(read_task_file(spec, path)), tokenizer,
                                   max_seq_len, drop)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{entry.name}-{uuid.uuid4().hex}"
    try:
        ds.save_to_disk(str(tmp))
        (tmp / _META).write_text(json.dumps({"rows": len(ds), "truncated": truncated,
                                             "source": str(path), "key": key}))
        try:
            os.rename(tmp, entry)  # atomic; fails if a concurrent trial published it first
        except OSError as err:
            if not (entry / _META).is_file():
                raise DataError(f"{entry}: cannot publish the tokenized cache ({err}); if that "
                                "folder is a leftover, delete it and run again") from err
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _read_entry(entry)


def _read_entry(entry: Path) -> tuple[datasets.Dataset, int]:
    meta = json.loads((entry / _META).read_text())
    ds = datasets.load_from_disk(str(entry))
    if len(ds) != int(meta["rows"]):
        raise ValueError(f"{len(ds)} rows where {meta['rows']} were written")
    return ds, int(meta["truncated"])


def _discard(entry: Path) -> None:
    """Move a damaged entry aside atomically (readers see it gone), then delete it."""
    aside = entry.with_name(f".damaged-{entry.name}-{uuid.uuid4().hex}")
    try:
        os.rename(entry, aside)
    except OSError:
        return  # a concurrent trial moved it first
    shutil.rmtree(aside, ignore_errors=True)


def _safe(split: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in split)


def _cache_key(spec: TaskSpec, path: Path, tokenizer: Any, max_seq_len: int,
               limit: Any, drop: bool = False) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    parts = {
        "version": CACHE_VERSION,
        "file": digest.hexdigest(),
        "tokenizer": [str(tokenizer.name_or_path), len(tokenizer), type(tokenizer).__name__],
        "max_seq_len": max_seq_len,
        "columns": [spec.type, spec.format, spec.header, spec.text_a, spec.text_b, spec.label,
                    spec.group, list(spec.labels or ())],
        "limit": limit,
        **({"drop_overlong": True} if drop else {}),  # old keys stay valid for truncation
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _encode(tokenizer: Any, text_a: list[str], text_b: list[str] | None,
            max_length: int | None) -> dict[str, list[list[int]]]:
    """One fast-tokenizer call; max_length=None means no truncation."""
    return tokenizer(text_a, text_b, truncation=max_length is not None, max_length=max_length,
                     return_token_type_ids=True, return_attention_mask=False, verbose=False)


def _tokenize_rows(spec: TaskSpec, rows: TaskRows, tokenizer: Any,
                   max_seq_len: int, drop: bool = False) -> tuple[datasets.Dataset, int]:
    # Tokenize untruncated first to learn which examples are too long, then re-encode only
    # those with truncation (pairs: longest_first), so the count is exact and cheap.
    encoded = _encode(tokenizer, rows.text_a, rows.text_b, None)
    input_ids: list[list[int]] = encoded["input_ids"]
    type_ids: list[list[int]] = encoded["token_type_ids"]
    too_long = [i for i, ids in enumerate(input_ids) if len(ids) > max_seq_len]
    labels, groups = rows.labels, rows.groups
    if drop and too_long:
        keep = np.ones(len(input_ids), dtype=bool)
        keep[too_long] = False
        input_ids = [ids for ids, k in zip(input_ids, keep, strict=True) if k]
        type_ids = [ids for ids, k in zip(type_ids, keep, strict=True) if k]
        labels = np.asarray(labels)[keep]
        groups = None if groups is None else np.asarray(groups)[keep]
        if not input_ids:
            raise DataError(f"{rows.path}: every example is longer than max_seq_len={max_seq_len}"
                            ", so overlong: drop leaves none; raise max_seq_len or use "
                            "overlong: truncate")
    elif too_long:
        try:
            short = _encode(tokenizer, [rows.text_a[i] for i in too_long],
                            None if rows.text_b is None else [rows.text_b[i] for i in too_long],
                            max_seq_len)
        except Exception as err:  # e.g. max_seq_len smaller than the special tokens
            raise DataError(f"{rows.path}: cannot truncate to max_seq_len={max_seq_len} "
                            f"({err}); raise max_seq_len") from err
        for j, i in enumerate(too_long):
            input_ids[i] = short["input_ids"][j]
            type_ids[i] = short["token_type_ids"][j]
    lengths = np.fromiter((len(ids) for ids in input_ids), dtype=np.int32, count=len(input_ids))
    columns: dict[str, pa.Array] = {
        "input_ids": _list_array(input_ids, lengths, pa.int32()),
        "token_type_ids": _list_array(type_ids, lengths, pa.int8()),
        "length": pa.array(lengths),
        "label": pa.array(labels),
    }
    if groups is not None:
        columns["group"] = pa.array(groups)
    return datasets.Dataset.from_dict(columns), len(too_long)


def _list_array(seqs: list[list[int]], lengths: np.ndarray, value_type: pa.DataType) -> pa.Array:
    offsets = np.zeros(len(seqs) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = np.fromiter(itertools.chain.from_iterable(seqs),
                         dtype=value_type.to_pandas_dtype(), count=int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=value_type))


def _column(ds: datasets.Dataset, name: str) -> np.ndarray:
    # Through Arrow: the numpy formatter walks the rows in Python and is ~1000x slower.
    return ds.with_format("arrow")[name].to_numpy()


def batch_plan(tasks: dict[str, TaskData], batch_size: int, seed: int, epoch: int,
               length_bucketing: bool = True) -> list[tuple[str, np.ndarray]]:
    """One epoch of MT-DNN batches: every train example once, one task per batch, all tasks'
    batches shuffled together. A pure function of (seed, epoch), so a resumed run replays it."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    base = [int(seed) % 2**32, int(epoch) % 2**32]
    plan: list[tuple[str, np.ndarray]] = []
    for t, (name, data) in enumerate(tasks.items()):
        rng = np.random.default_rng([*base, 1, t])
        lengths = _column(data.train, "length")
        groups = _column(data.train, "group") if "group" in data.train.column_names else None
        plan.extend((name, b) for b in
                    _task_batches(lengths, groups, batch_size, rng, length_bucketing))
    order = np.random.default_rng([*base, 0]).permutation(len(plan))
    return [plan[i] for i in order]


def _task_batches(lengths: np.ndarray, groups: np.ndarray | None, batch_size: int,
                  rng: np.random.Generator, bucketing: bool) -> list[np.ndarray]:
    if groups is not None:
        members = _group_members(groups)
        members = [members[i] for i in rng.permutation(len(members))]
        if bucketing:
            per_batch = max(1, batch_size * len(members) // max(1, len(lengths)))
            members = _sort_in_chunks(members, [int(lengths[m].max()) for m in members],
                                      per_batch * BUCKET_BATCHES)
        return _pack_groups(members, batch_size)
    order = rng.permutation(len(lengths))
    if bucketing:
        chunk = batch_size * BUCKET_BATCHES
        for start in range(0, len(order), chunk):
            part = order[start:start + chunk]
            order[start:start + chunk] = part[np.argsort(lengths[part], kind="stable")]
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def _group_members(groups: np.ndarray) -> list[np.ndarray]:
    """Row indices per group id (each list in row order), groups in order of their ids."""
    order = np.argsort(groups, kind="stable")
    bounds = np.flatnonzero(np.diff(groups[order])) + 1
    return np.split(order, bounds)


def _sort_in_chunks(items: list[np.ndarray], keys: Sequence[int],
                    chunk: int) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    for start in range(0, len(items), chunk):
        idx = sorted(range(start, min(start + chunk, len(items))), key=lambda i: keys[i])
        out.extend(items[i] for i in idx)
    return out


def _pack_groups(members: list[np.ndarray], batch_size: int) -> list[np.ndarray]:
    """Fill batches with whole groups; a group larger than batch_size becomes its own batch."""
    batches: list[np.ndarray] = []
    current: list[np.ndarray] = []
    size = 0
    for m in members:
        if current and size + len(m) > batch_size:
            batches.append(np.concatenate(current))
            current, size = [], 0
        current.append(m)
        size += len(m)
    if current:
        batches.append(np.concatenate(current))
    return batches


def eval_batches(ds: datasets.Dataset, batch_size: int) -> list[np.ndarray]:
    """Evaluation batches sorted by length (little padding); every row exactly once, and a
    ranking group never split across batches."""
    lengths = _column(ds, "length")
    if "group" in ds.column_names:
        members = _group_members(_column(ds, "group"))
        members.sort(key=lambda m: int(lengths[m].max()))
        return _pack_groups(members, batch_size)
    order = np.argsort(lengths, kind="stable")
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def collate(ds: datasets.Dataset, indices: np.ndarray,
            pad_token_id: int) -> dict[str, torch.Tensor]:
    """Pad a batch to its longest sequence; attention_mask is 1 on real tokens."""
    table: pa.Table = ds.with_format("arrow")[np.asarray(indices).tolist()]
    lengths = table.column("length").to_numpy().astype(np.int64)
    width = int(lengths.max()) if len(lengths) else 0
    mask = np.arange(width)[None, :] < lengths[:, None]  # row-major order = flattened tokens
    input_ids = np.full((len(lengths), width), pad_token_id, dtype=np.int64)
    input_ids[mask] = _flat(table, "input_ids")
    token_type_ids = np.zeros((len(lengths), width), dtype=np.int64)
    token_type_ids[mask] = _flat(table, "token_type_ids")
    labels = table.column("label").to_numpy()
    batch = {
        "input_ids": torch.from_numpy(input_ids),
        "token_type_ids": torch.from_numpy(token_type_ids),
        "attention_mask": torch.from_numpy(mask.astype(np.int64)),
        "labels": (torch.from_numpy(labels.astype(np.float32))
                   if np.issubdtype(labels.dtype, np.floating)
                   else torch.from_numpy(labels.astype(np.int64))),
    }
    if "group" in table.column_names:
        batch["group"] = torch.from_numpy(table.column("group").to_numpy().astype(np.int64))
    return batch


def _flat(table: pa.Table, name: str) -> np.ndarray:
    column = table.column(name).combine_chunks()
    return column.flatten().to_numpy(zero_copy_only=False)
