"""Text rows into the Arrow columns a split is cached as, and those rows back out as padded
batches: the featurising and collating shared by the sentence(-pair) heads."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch import Tensor

from weightsearch.trainer.data.readers import TaskRows
from weightsearch.trainer.heads.token_limit import encode_counted


@dataclass
class Features:
    """A split turned into model inputs: Arrow columns with one row per model input row."""

    columns: dict[str, pa.Array]  # at least input_ids, token_type_ids, length, label
    examples: int  # examples the rows come from (a long context gives several windows)
    overlong: int  # examples cut to the length limit, or dropped (training, overlong: drop)
    notes: dict[str, int] = field(default_factory=dict)  # other counts for data.json
    # What scoring needs beyond the rows (span QA: ids, contexts and gold answers), JSON-able.
    reference: list[dict[str, Any]] | None = None


def encode_pairs(rows: TaskRows, tokenizer: Any, max_len: int, drop: bool = False) -> Features:
    """Text (pair) rows into token ids: longer ones cut to max_len (pairs: longest first), or,
    with drop, left out. Either way they are counted."""
    input_ids, type_ids, too_long = encode_counted(tokenizer, rows.text_a, rows.text_b, max_len,
                                                   rows.path, drop)
    labels, groups = rows.labels, rows.groups
    if drop and too_long:
        keep = np.ones(len(rows), dtype=bool)
        keep[too_long] = False
        labels = np.asarray(labels)[keep]
        groups = None if groups is None else np.asarray(groups)[keep]
    lengths = np.fromiter((len(ids) for ids in input_ids), dtype=np.int32, count=len(input_ids))
    columns: dict[str, pa.Array] = {
        "input_ids": list_array(input_ids, lengths, pa.int32()),
        "token_type_ids": list_array(type_ids, lengths, pa.int8()),
        "length": pa.array(lengths),
        "label": pa.array(labels),
    }
    if groups is not None:
        columns["group"] = pa.array(groups)
    return Features(columns, examples=len(input_ids), overlong=len(too_long))


def list_array(seqs: list[list[int]], lengths: np.ndarray, value_type: pa.DataType) -> pa.Array:
    offsets = np.zeros(len(seqs) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = np.fromiter(itertools.chain.from_iterable(seqs),
                         dtype=value_type.to_pandas_dtype(), count=int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=value_type))


def collate_sequences(table: pa.Table, pad_id: int, width: int | None = None
                      ) -> dict[str, Tensor]:
    """Pad a batch of sequences to its longest (or to `width`); attention_mask is 1 on real
    tokens. `label` becomes `labels`; every other scalar column (group, answer positions, ...)
    passes through."""
    lengths = table.column("length").to_numpy().astype(np.int64)
    ids, types, mask = pad(flat(table, "input_ids"), flat(table, "token_type_ids"), lengths,
                           pad_id, width)
    batch = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
    for name in table.column_names:
        if name in ("input_ids", "token_type_ids", "length"):
            continue
        column = table.column(name)
        if pa.types.is_list(column.type):
            continue  # per-token columns that only scoring reads (span offsets)
        values = column.to_numpy()
        batch["labels" if name == "label" else name] = (
            torch.from_numpy(values.astype(np.float32)) if np.issubdtype(values.dtype, np.floating)
            else torch.from_numpy(values.astype(np.int64)))
    return batch


def pad(ids: np.ndarray, types: np.ndarray, lengths: np.ndarray, pad_id: int,
        width: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Flattened token ids of sequences with these lengths, as padded [N, T] tensors: T is the
    longest length, or `width` (at least the longest)."""
    longest = int(lengths.max()) if len(lengths) else 0
    if width is not None and width < longest:
        raise ValueError(f"pad: width {width} is shorter than the longest row ({longest})")
    width = longest if width is None else width
    mask = np.arange(width)[None, :] < lengths[:, None]  # row-major order = flattened tokens
    input_ids = np.full((len(lengths), width), pad_id, dtype=np.int64)
    input_ids[mask] = ids
    token_type_ids = np.zeros((len(lengths), width), dtype=np.int64)
    token_type_ids[mask] = types
    return (torch.from_numpy(input_ids), torch.from_numpy(token_type_ids),
            torch.from_numpy(mask.astype(np.int64)))


def flat(table: pa.Table, name: str) -> np.ndarray:
    """A list column's values, all rows concatenated (nested lists flattened all the way)."""
    column = table.column(name).combine_chunks()
    while pa.types.is_list(column.type):
        column = column.flatten()
    return column.to_numpy(zero_copy_only=False)
