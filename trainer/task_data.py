"""Per-task datasets: tokenized once into an on-disk Arrow cache, batched MT-DNN style, padded.

Cache entries are keyed by everything that changes the tokens (file content, tokenizer,
max_seq_len, column mapping, label set, example limit) and published with an atomic rename,
so trials that share a cache directory never read a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute
import torch

from weightsearch.core.errors import DataError
from weightsearch.trainer.data.readers import count_examples, read_task_table, resolve_path
from weightsearch.trainer.heads import Head, head_class
from weightsearch.trainer.heads.featurize import collate_sequences
from weightsearch.trainer.sampling import Sampler, ShuffleSettings, build_sampler
from weightsearch.trainer.task_rows import Subset
from weightsearch.trainer.tasks import TaskSpec

CACHE_VERSION = 2  # bump when the stored columns change
BUCKET_BATCHES = 50  # batches per length-sorting chunk: little padding, still well mixed
_META = "weightsearch_meta.json"  # written last inside an entry, before the atomic rename
_REFERENCE = "reference.json"  # what scoring needs beyond the rows (span QA gold answers)


@dataclass
class TaskData:
    """A task's tokenized splits: one row per model input (input_ids, token_type_ids, length,
    label, and whatever else the task type's head keeps)."""

    spec: TaskSpec
    train: datasets.Dataset
    evals: dict[str, datasets.Dataset]
    truncated: dict[str, int]
    train_examples: int = -1  # examples behind the training rows (-1: one row per example)
    notes: dict[str, dict[str, int]] = field(default_factory=dict)  # per split, for data.json
    references: dict[str, list[dict[str, Any]] | None] = field(default_factory=dict)
    # Static shapes (`pad_to: buckets`): the widths a training or dev batch is padded to, the
    # smallest that fits it; empty: each batch as wide as its longest row.
    train_widths: tuple[int, ...] = ()
    eval_widths: tuple[int, ...] = ()

    @property
    def train_size(self) -> int:
        """Training examples (a span QA question with several windows counts once)."""
        return len(self.train) if self.train_examples < 0 else self.train_examples

    @property
    def head(self) -> type[Head]:
        return head_class(self.spec.type)

    def collate(self, ds: datasets.Dataset, indices: np.ndarray,
                pad_token_id: int) -> dict[str, torch.Tensor]:
        """A batch of `ds` (the training split or a dev split) as padded tensors."""
        widths = self.train_widths if ds is self.train else self.eval_widths
        return collate(ds, indices, pad_token_id, self.head, widths)

    def use_buckets(self, count: int, max_seq_len: int, eval_max_seq_len: int | None) -> None:
        """Pad every batch to one of `count` fixed widths of its split's token limit."""
        train_len, eval_len = token_limits(self.spec, max_seq_len, eval_max_seq_len)
        self.train_widths = bucket_widths(train_len, count)
        self.eval_widths = bucket_widths(eval_len, count)


def bucket_widths(limit: int, count: int) -> tuple[int, ...]:
    """`count` widths splitting the token limit into equal parts, each rounded up to a multiple
    of 8 (tensor cores' tile) but never past the limit, which is the last."""
    parts = (-(-limit * i // count) for i in range(1, count))  # ceil(limit * i / count)
    widths = {min(limit, -(-part // 8) * 8) for part in parts}
    return tuple(sorted(widths | {limit}))


def static_width(longest: int, widths: Sequence[int]) -> int | None:
    """The smallest width that holds `longest` tokens (None without widths: pad to longest).
    A row longer than every width (a limit changed under a cached split) pads to itself."""
    if not widths:
        return None
    return next((w for w in widths if w >= longest), longest)


def token_limits(spec: TaskSpec, max_seq_len: int,
                 eval_max_seq_len: int | None) -> tuple[int, int]:
    """The token limits of a task's training and dev splits: its own `max_seq_len` wins."""
    return spec.seq_len(max_seq_len), spec.max_seq_len or eval_max_seq_len or max_seq_len


def load_task_data(spec: TaskSpec, data_dir: str | Path | None, tokenizer: Any,
                   max_seq_len: int, cache_dir: str | Path | None,
                   max_train_examples: int | None = None,
                   max_eval_examples: int | None = None, overlong: str = "truncate",
                   eval_max_seq_len: int | None = None,
                   train_subset: Subset | None = None) -> TaskData:
    """Read, validate and tokenize every split of a task, or load them from the cache.

    `truncated` counts each split's examples longer than its token limit: cut to the limit, or,
    for the training split with `overlong="drop"`, left out. A task's own `max_seq_len` wins
    over the run's limits for both its splits.
    """
    datasets.disable_progress_bars()
    train_len, eval_len = token_limits(spec, max_seq_len, eval_max_seq_len)
    train = _load_split(spec, "train", resolve_path(data_dir, spec.train_file), tokenizer,
                        train_len, cache_dir, train_subset or Subset(n=max_train_examples),
                        train=True, drop=overlong == "drop")
    splits = {"train": train}
    for split, path in spec.dev_files:
        splits[split] = _load_split(spec, split, resolve_path(data_dir, path), tokenizer,
                                    eval_len, cache_dir, Subset(n=max_eval_examples), train=False)
    return TaskData(spec=spec, train=train.rows, truncated={k: v.overlong for k, v in
                                                            splits.items()},
                    evals={k: v.rows for k, v in splits.items() if k != "train"},
                    train_examples=train.examples,
                    notes={k: v.notes for k, v in splits.items() if v.notes},
                    references={k: v.reference for k, v in splits.items() if k != "train"})


def count_train_examples(spec: TaskSpec, data_dir: str | Path | None) -> int:
    """Training examples in the task's train file (no tokenizer, no torch)."""
    return count_examples(spec, resolve_path(data_dir, spec.train_file))


@dataclass
class _Split:
    rows: datasets.Dataset
    examples: int
    overlong: int
    notes: dict[str, int]
    reference: list[dict[str, Any]] | None


def _load_split(spec: TaskSpec, split: str, path: Path, tokenizer: Any, max_seq_len: int,
                cache_dir: str | Path | None, subset: Subset, *, train: bool,
                drop: bool = False) -> _Split:
    if not path.is_file():
        raise DataError(f"{path}: file not found (task '{spec.name}', split '{split}'); check "
                        "data_dir and the task's train_file/dev_files")
    if cache_dir is None:
        return _featurize(spec, path, tokenizer, max_seq_len, subset, train, drop)
    key = _cache_key(spec, path, tokenizer, max_seq_len, subset.key(), drop, train)
    root = Path(cache_dir).expanduser()
    entry = root / f"{spec.name}-{_safe(split)}-{key[:24]}"
    if (entry / _META).is_file():
        try:
            return _read_entry(entry)
        except Exception as err:  # truncated Arrow files and bad JSON raise many types
            print(f"note: tokenized cache {entry} is damaged ({type(err).__name__}); rebuilding it")
            _discard(entry)
    built = _featurize(spec, path, tokenizer, max_seq_len, subset, train, drop)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{entry.name}-{uuid.uuid4().hex}"
    try:
        built.rows.save_to_disk(str(tmp))
        if built.reference is not None:
            (tmp / _REFERENCE).write_text(json.dumps(built.reference))
        (tmp / _META).write_text(json.dumps({
            "rows": len(built.rows), "examples": built.examples, "truncated": built.overlong,
            "notes": built.notes, "reference": built.reference is not None,
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


def _featurize(spec: TaskSpec, path: Path, tokenizer: Any, max_seq_len: int, subset: Subset,
               train: bool, drop: bool) -> _Split:
    head = head_class(spec.type)
    rows = subset.apply(head.parse(spec, read_task_table(spec, path)))
    features = head.featurize(spec, rows, tokenizer, max_seq_len, train=train,
                              drop_overlong=drop)
    return _Split(datasets.Dataset.from_dict(features.columns), features.examples,
                  features.overlong, features.notes, features.reference)


def _read_entry(entry: Path) -> _Split:
    meta = json.loads((entry / _META).read_text())
    ds = datasets.load_from_disk(str(entry))
    if len(ds) != int(meta["rows"]):
        raise ValueError(f"{len(ds)} rows where {meta['rows']} were written")
    reference = json.loads((entry / _REFERENCE).read_text()) if meta["reference"] else None
    return _Split(ds, int(meta["examples"]), int(meta["truncated"]), dict(meta["notes"]),
                  reference)


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
               limit: Any, drop: bool = False, train: bool = True) -> str:
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
                    spec.group, list(spec.labels or ()), list(spec.choices or ()),
                    spec.doc_stride, spec.max_query_len],
        "limit": limit,
        "split": "train" if train else "eval",  # span QA keeps answer targets or offsets
        "drop_overlong": drop,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _column(ds: datasets.Dataset, name: str) -> np.ndarray:
    # Through Arrow: the numpy formatter walks the rows in Python and is ~1000x slower.
    return ds.with_format("arrow")[name].to_numpy()


def batch_plan(tasks: dict[str, TaskData], batch_size: int, seed: int, epoch: int,
               length_bucketing: bool = True, sampler: Sampler | None = None,
               fixed: bool = False) -> list[tuple[str, np.ndarray]]:
    """One epoch of MT-DNN batches, one task per batch: each task's examples cut into batches,
    then put in order by the sampler (default: all shuffled together, each batch once). A pure
    function of (seed, epoch), so a resumed run replays it.

    `fixed` (`batches: fixed`) is the reference code's batching: each task's batches are cut
    once, from consecutive rows (or, with length bucketing, from one seeded draw), shuffled
    once, and used in that order every epoch; an epoch only re-deals which task goes next.
    Otherwise every epoch cuts new batches from a new draw of the rows."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    base = [int(seed) % 2**32, 0 if fixed else int(epoch) % 2**32]
    batches: dict[str, list[np.ndarray]] = {}
    for t, (name, data) in enumerate(tasks.items()):
        rng = np.random.default_rng([*base, 1, t])
        lengths = _column(data.train, "length")
        groups = _column(data.train, "group") if "group" in data.train.column_names else None
        if fixed:
            cut = _fixed_batches(lengths, groups, batch_size, rng, length_bucketing)
            batches[name] = [cut[i] for i in rng.permutation(len(cut))]
        else:
            batches[name] = _task_batches(lengths, groups, batch_size, rng, length_bucketing)
    sampler = sampler or build_sampler(ShuffleSettings(), list(tasks))
    if fixed:
        return sampler.order(batches, seed, epoch, keep_order=True)
    return sampler.order(batches, seed, epoch)  # a sampler written before keep_order works too


def _fixed_batches(lengths: np.ndarray, groups: np.ndarray | None, batch_size: int,
                   rng: np.random.Generator, bucketing: bool) -> list[np.ndarray]:
    """A task's batches as the reference cuts them: consecutive rows (a ranking task's groups
    kept whole, in file order); with length bucketing, the run's bucketed cut of one draw."""
    if bucketing:
        return _task_batches(lengths, groups, batch_size, rng, True)
    if groups is not None:
        return _pack_groups(_group_members(groups), batch_size)
    return [np.arange(i, min(i + batch_size, len(lengths))) for i in
            range(0, len(lengths), batch_size)]


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


def collate(ds: datasets.Dataset, indices: np.ndarray, pad_token_id: int,
            head: type[Head] | None = None, widths: Sequence[int] = ()
            ) -> dict[str, torch.Tensor]:
    """A batch of rows as padded tensors, as the task's head lays them out (default: text
    sequences padded to the longest, or to the smallest of `widths` that fits; attention_mask
    is 1 on real tokens)."""
    table: pa.Table = ds.with_format("arrow")[np.asarray(indices).tolist()]
    width = None  # without widths: padded to the longest, which the head's collate finds
    if widths:
        width = static_width(pa.compute.max(table.column("length")).as_py() or 0, widths)
    return (head.collate if head is not None else collate_sequences)(table, pad_token_id, width)
