"""Multiple choice (e.g. SWAG): one sequence per (context, choice), one score per sequence, a
softmax over each example's choices and cross-entropy against the right one (He 2019, 3.1.3).

A row holds all of an example's choices: the context (`text_a`), and for each choice the
optional lead-in (`text_b`, SWAG's sent2) followed by the choice text. The label is the index of
the right choice.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import torch
import torch.nn.functional as F
from torch import Tensor

from weightsearch.trainer.data.parsing import choice_rows
from weightsearch.trainer.data.readers import ColumnRows, Table
from weightsearch.trainer.heads.base import (
    Encoded,
    Head,
    refuse_soft_targets,
    stable_kl,
    symmetric_kl,
)
from weightsearch.trainer.heads.featurize import Features, flat, list_array, pad
from weightsearch.trainer.heads.token_limit import encode_counted
from weightsearch.trainer.tasks import TaskSpec


class MultipleChoiceHead(Head):
    task_type = "multiple_choice"
    drops_overlong = False  # an example keeps all its choices: cut, never dropped

    @classmethod
    def parse(cls, spec: TaskSpec, table: Table) -> ColumnRows:
        return choice_rows(spec, table)

    @classmethod
    def featurize(cls, spec: TaskSpec, rows: ColumnRows, tokenizer: Any, max_len: int, *,
                  train: bool, drop_overlong: bool = False) -> Features:
        contexts, endings = rows.columns["context"], rows.columns["endings"]
        n = len(endings[0]) if endings else 0
        flat_a = [c for c in contexts for _ in range(n)]
        flat_b = [e for choice in endings for e in choice]
        ids, types, too_long = encode_counted(tokenizer, flat_a, flat_b, max_len, rows.path)
        # An example counts as over-long when any of its choices is; it is cut, never dropped,
        # so that every example keeps all its choices.
        overlong = len({i // n for i in too_long})
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int32, count=len(ids))
        per_choice = list_array(ids, lengths, pa.int32())
        per_choice_types = list_array(types, lengths, pa.int8())
        offsets = pa.array(np.arange(0, len(ids) + 1, n, dtype=np.int32))
        return Features({
            "input_ids": pa.ListArray.from_arrays(offsets, per_choice),
            "token_type_ids": pa.ListArray.from_arrays(offsets, per_choice_types),
            "choice_length": pa.ListArray.from_arrays(offsets, pa.array(lengths)),
            "length": pa.array(lengths.reshape(-1, n).max(axis=1) if n else lengths),
            "label": pa.array(rows.columns["label"]),
        }, examples=len(contexts), overlong=overlong)

    @classmethod
    def collate(cls, table: pa.Table, pad_id: int, width: int | None = None
                ) -> dict[str, Tensor]:
        """Every choice of every example as one sequence: [N * choices, T], example-major."""
        lengths = flat(table, "choice_length").astype(np.int64)
        ids, types, mask = pad(flat(table, "input_ids"), flat(table, "token_type_ids"), lengths,
                               pad_id, width)
        labels = table.column("label").to_numpy().astype(np.int64)
        return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask,
                "labels": torch.from_numpy(labels)}

    def forward(self, states: Encoded, batch: dict[str, Tensor]) -> Tensor:
        """Choice scores [N, choices]."""
        scores = self.project(states.pooled()).squeeze(-1)
        return scores.view(batch["labels"].shape[0], -1)

    def loss(self, outputs: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return F.cross_entropy(outputs, batch["labels"].long())

    def predict(self, outputs: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return outputs.argmax(dim=-1)

    soft_loss = refuse_soft_targets("multiple_choice")

    def smoothness(self, a: Tensor, b: Tensor) -> Tensor:
        return symmetric_kl(a, b)

    def ascent_divergence(self, perturbed: Tensor, clean: Tensor, total: bool = False) -> Tensor:
        return stable_kl(perturbed, clean, total)


HEAD = MultipleChoiceHead
