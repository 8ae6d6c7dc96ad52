"""Classification: one label of a fixed set per text (pair), by a linear layer on the pooled
vector (MT-DNN's single-sentence and pairwise classification) or by the stochastic answer
network on the token states (`head: san`, MT-DNN's choice for its pairwise tasks)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from weightsearch.trainer.heads.base import Encoded, Head, stable_kl, symmetric_kl
from weightsearch.trainer.heads.san import StochasticAnswerNetwork
from weightsearch.trainer.tasks import TaskSpec


class ClassificationHead(Head):
    task_type = "classification"

    def __init__(self, hidden_size: int, spec: TaskSpec) -> None:
        if spec.head != "san":
            super().__init__(hidden_size, spec)
            return
        nn.Module.__init__(self)
        self.spec = spec
        self.san = StochasticAnswerNetwork(hidden_size, spec.num_labels, spec.dropout)

    @staticmethod
    def out_features(spec: TaskSpec) -> int:
        return spec.num_labels

    def forward(self, states: Encoded, batch: dict[str, Tensor]) -> Tensor:
        """Logits [N, C] (SAN: log class probabilities). No squeeze: a (degenerate) one-label
        task must still give [N, 1]."""
        if self.spec.head == "san":
            return self.san(states.hidden, states.mask, batch.get("token_type_ids"))
        return self.project(states.pooled())

    def loss(self, outputs: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return F.cross_entropy(outputs, batch["labels"].long())

    def predict(self, outputs: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return outputs.argmax(dim=-1)

    def soft_loss(self, outputs: Tensor, soft: Tensor) -> Tensor:
        """Cross-entropy against the teachers' mean class distribution."""
        return F.cross_entropy(outputs, soft)

    def smoothness(self, a: Tensor, b: Tensor) -> Tensor:
        return symmetric_kl(a, b)

    def ascent_divergence(self, perturbed: Tensor, clean: Tensor, total: bool = False) -> Tensor:
        return stable_kl(perturbed, clean, total)


HEAD = ClassificationHead
