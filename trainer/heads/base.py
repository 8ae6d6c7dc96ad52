"""What a task head is: the one module that knows everything about its task type.

A head class serves a task type from end to end, so that the data layer, the model and the
training loop never branch on the type:

- `parse(spec, table)` (class method): the task's file, read as a table, into rows whose labels
  are checked; called when a split is read, before anything is tokenized.
- `featurize(spec, rows, tokenizer, max_len, train=..., drop_overlong=...)` (class method): the
  rows into model inputs (one row per sequence, or per window of a long one), counted for
  `data.json`; the result is cached on disk, so this runs once per file and setting. The
  sentence(-pair) heads share `heads.featurize` (Arrow columns, padded batches) and
  `heads.token_limit` (tokenizing to the limit, over-long rows counted).
- `collate(table, pad_id, width=None)` (class method): a batch of those rows into padded
  tensors, as wide as its longest row or, given a width, that wide (static shapes).
- `forward(states, batch)`: the encoder's token states (`Encoded`) into outputs. The head pools
  what it needs: `states.pooled()` gives the run's sentence vector, token-level heads read
  `states.hidden` directly.
- `loss(outputs, batch)`: the batch loss, a plain mean over the batch's examples.
- `predict(outputs, batch)`: a fixed-size tensor per row, on the device (no host sync).
- `score(predictions, references, split)`: the metrics of one dev split from every row's
  prediction, and any prediction files the task type writes.
- `soft_loss` (distillation) and `smoothness` (adversarial training) where they make sense.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from weightsearch.core.errors import ConfigError
from weightsearch.trainer.data.readers import Table, pair_rows
from weightsearch.trainer.heads.featurize import Features, collate_sequences, encode_pairs
from weightsearch.trainer.metrics import compute_metrics
from weightsearch.trainer.tasks import TaskSpec


@dataclass
class Encoded:
    """The shared encoder's output for one batch, as a head sees it."""

    hidden: Tensor  # [N, T, H] token states (the task's expert mixture, when there is one)
    mask: Tensor  # [N, T], 1 on real tokens
    pool: Callable[[Tensor, Tensor], Tensor]  # the run's pooling of (hidden, mask) -> [N, H]

    def pooled(self) -> Tensor:
        return self.pool(self.hidden, self.mask)


@dataclass
class EvalSplit:
    """What `score` may need of a dev split besides the predictions."""

    task: str
    name: str  # the split's name ("dev", "matched", ...)
    rows: np.ndarray  # the dataset row of each prediction, in prediction order
    dataset: Any  # the split's datasets.Dataset (its extra columns)
    reference: list[dict[str, Any]] | None
    output_dir: Path | None  # where prediction files go (None: write none)
    epoch: int
    first: bool  # the task's first dev split: files and metrics without a split prefix


class Head(nn.Module):
    """Base of the heads: dropout, then one linear layer in fp32 on the pooled vector."""

    task_type: ClassVar[str]
    # Whether `overlong: drop` leaves this type's over-long training examples out (False: they
    # are cut or windowed whatever the setting, and the console says so).
    drops_overlong: ClassVar[bool] = True
    # Whether the training step's forward and loss are device arithmetic alone (no host reads,
    # no shapes from values), so a CUDA graph may capture them (`cuda_graphs`); False: the
    # type's batches train in the eager loop.
    capturable: ClassVar[bool] = True

    def __init__(self, hidden_size: int, spec: TaskSpec) -> None:
        super().__init__()
        self.spec = spec
        self.dropout = nn.Dropout(spec.dropout)
        self.proj = nn.Linear(hidden_size, self.out_features(spec))

    # ---- data --------------------------------------------------------------------------

    @classmethod
    def parse(cls, spec: TaskSpec, table: Table) -> Any:
        return pair_rows(spec, table)

    @classmethod
    def featurize(cls, spec: TaskSpec, rows: Any, tokenizer: Any, max_len: int, *,
                  train: bool, drop_overlong: bool = False) -> Features:
        # rows: what this head's parse gave (TaskRows here; heads of other shapes, their own)
        return encode_pairs(rows, tokenizer, max_len, drop=train and drop_overlong)

    @classmethod
    def collate(cls, table: pa.Table, pad_id: int, width: int | None = None
                ) -> dict[str, Tensor]:
        return collate_sequences(table, pad_id, width)

    @classmethod
    def describe_split(cls, spec: TaskSpec, split: str, overlong: int, notes: dict[str, int],
                       limit: int, dropped: bool) -> list[str]:
        """Console lines on what fitting a split to its token limit did (counts from
        `featurize`); the same counts go to `data.json`."""
        if not overlong:
            return []
        if dropped:
            return [f"{overlong} {split} examples longer than max_seq_len={limit} dropped "
                    "(overlong: drop; overlong: truncate keeps them, cut to the limit)"]
        return [f"{overlong} {split} examples truncated to {limit} tokens"]

    # ---- model -------------------------------------------------------------------------

    @staticmethod
    def out_features(spec: TaskSpec) -> int:
        return 1

    def forward(self, states: Encoded, batch: dict[str, Tensor]) -> Tensor:
        """Logits [N, C] (classification) or one score per row [N] (the others)."""
        return self.project(states.pooled()).squeeze(-1)

    def project(self, pooled: Tensor) -> Tensor:
        # fp32 even under bf16 autocast: the layer is tiny, and bf16's 8-bit mantissa rounds
        # scores near 2.5 to steps of 0.016, erasing the small differences between examples
        # that a young regression or ranking head ranks them by.
        with torch.autocast(pooled.device.type, enabled=False):
            return self.proj(self.dropout(pooled.float()))

    def loss(self, outputs: Tensor, batch: dict[str, Tensor]) -> Tensor:
        raise NotImplementedError

    def predict(self, outputs: Tensor, batch: dict[str, Tensor]) -> Tensor:
        raise NotImplementedError

    def score(self, predictions: np.ndarray, references: np.ndarray,
              split: EvalSplit) -> dict[str, float]:
        return compute_metrics(self.spec.metrics, predictions, references)

    def soft_loss(self, outputs: Tensor, soft: Tensor) -> Tensor:
        """Loss against a teacher ensemble's targets (distillation): squared error to their mean
        score. Heads whose outputs are not one score per example override or refuse it."""
        return F.mse_loss(outputs, soft)

    def smoothness(self, a: Tensor, b: Tensor) -> Tensor:
        """Symmetric divergence between two outputs for the same batch (adversarial training).

        Scores: squared difference, the mean over the batch; gradients reach both sides.
        """
        return (a - b).pow(2).mean()

    def ascent_divergence(self, perturbed: Tensor, clean: Tensor, total: bool = False) -> Tensor:
        """What SMART's ascent step climbs, from the `perturbed` outputs to the (constant)
        `clean` ones: scores' squared difference, as the reference's `F.mse_loss`; its mean
        (SIWLM's copy of the MT-DNN code), or with `total` its sum (the current MT-DNN code).
        Heads without a reference form climb their `smoothness` (times the rows, for `total`)."""
        if type(self).smoothness is not Head.smoothness:  # a head's own divergence
            return self.smoothness(perturbed, clean) * (perturbed.shape[0] if total else 1)
        squared = (perturbed - clean).pow(2)
        return squared.sum() if total else squared.mean()


STABLE_KL_EPS = 1e-6  # the reference's default


def stable_kl(logits: Tensor, target: Tensor, total: bool = False) -> Tensor:
    """The divergence the reference MT-DNN code's SMART ascends for class distributions
    (`stable_kl` in its `mt_dnn/loss.py`): with p = softmax(logits), y = softmax(target) and
    r(q) = log(1 / (1 / (q + eps) - 1 + eps)), a constant, the sum over classes of
    2 p (r(p) - r(y)), averaged over the leading axis (SIWLM's copy), or with `total` summed
    (the current code's `reduce=False`). Only p carries a gradient, and it is not that of a KL
    divergence."""
    p = F.softmax(logits.reshape(-1, logits.shape[-1]).float(), dim=-1)
    y = F.softmax(target.reshape(-1, target.shape[-1]).float(), dim=-1)
    eps = STABLE_KL_EPS
    r_p = -torch.log(1.0 / (p.detach() + eps) - 1 + eps)
    r_y = -torch.log(1.0 / (y.detach() + eps) - 1 + eps)
    summed = (p * (r_p - r_y) * 2).sum()
    return summed if total else summed / p.shape[0]


def symmetric_kl(a: Tensor, b: Tensor) -> Tensor:
    """KL(b || a) + KL(a || b) over the last axis, each side pulled towards the other's
    (constant) distribution; mean over the leading axis."""
    log_a, log_b = F.log_softmax(a, dim=-1), F.log_softmax(b, dim=-1)
    return (F.kl_div(log_a, log_b.detach(), log_target=True, reduction="batchmean")
            + F.kl_div(log_b, log_a.detach(), log_target=True, reduction="batchmean"))


def refuse_soft_targets(task_type: str) -> Callable[..., Tensor]:
    def soft_loss(self: Head, outputs: Tensor, soft: Tensor) -> Tensor:
        raise ConfigError([f"distill: {self.spec.name} is a {task_type} task; soft targets are "
                           "built for classification and regression tasks only"])
    return soft_loss
