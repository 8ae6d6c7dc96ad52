"""Regression: one score per text (pair), e.g. STS-B similarity, by mean squared error."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from weightsearch.trainer.heads.base import Head


class RegressionHead(Head):
    task_type = "regression"

    def loss(self, outputs: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return F.mse_loss(outputs, batch["labels"].float())

    def predict(self, outputs: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return outputs


HEAD = RegressionHead
