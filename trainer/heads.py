"""Task heads: what sits on the shared encoder's pooled output for each task type.

A head maps the pooled vector to logits or scores (`forward`), turns them into the batch loss
(`loss`, a plain mean over the batch's examples) and into predictions (`predict`). The training
loop never branches on the task type: it asks `HEADS` for the head class.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.tasks import TaskSpec
from weightsearch.errors import ConfigError


class Head(nn.Module):
    """Base of the task heads: dropout on the pooled vector, then one linear layer."""

    task_type: ClassVar[str]

    def __init__(self, hidden_size: int, spec: TaskSpec) -> None:
        super().__init__()
        self.spec = spec
        self.dropout = nn.Dropout(spec.dropout)
        self.proj = nn.Linear(hidden_size, self.out_features(spec))

    @staticmethod
    def out_features(spec: TaskSpec) -> int:
        return 1

    def forward(self, pooled: Tensor) -> Tensor:
        """[B, hidden] -> logits [B, C] (classification) or scores [B] (the others)."""
        return self.project(pooled).squeeze(-1)

    def project(self, pooled: Tensor) -> Tensor:
        # fp32 even under bf16 autocast: the layer is tiny, and bf16's 8-bit mantissa rounds
        # scores near 2.5 to steps of 0.016, erasing the small differences between examples
        # that a young regression or ranking head ranks them by.
        with torch.autocast(pooled.device.type, enabled=False):
            return self.proj(self.dropout(pooled.float()))

    def loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        raise NotImplementedError

    def predict(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        raise NotImplementedError

    def soft_loss(self, logits: Tensor, soft: Tensor) -> Tensor:
        """Loss against a teacher ensemble's targets (distillation): squared error to their mean
        score. Heads whose outputs are not one score per example override or refuse it."""
        return F.mse_loss(logits, soft)

    def smoothness(self, a: Tensor, b: Tensor) -> Tensor:
        """Symmetric divergence between two outputs for the same batch (adversarial training).

        Scores: squared difference, the mean over the batch; gradients reach both sides.
        """
        return (a - b).pow(2).mean()


class ClassificationHead(Head):
    task_type = "classification"

    @staticmethod
    def out_features(spec: TaskSpec) -> int:
        return spec.num_labels

    def forward(self, pooled: Tensor) -> Tensor:
        # No squeeze: a (degenerate) one-label task must still give [B, 1] logits.
        return self.project(pooled)

    def loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return F.cross_entropy(logits, batch["labels"].long())

    def predict(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return logits.argmax(dim=-1)

    def soft_loss(self, logits: Tensor, soft: Tensor) -> Tensor:
        """Cross-entropy against the teachers' mean class distribution."""
        return F.cross_entropy(logits, soft)

    def smoothness(self, a: Tensor, b: Tensor) -> Tensor:
        """KL(b || a) + KL(a || b), each side pulled towards the other's (constant) distribution."""
        log_a, log_b = F.log_softmax(a, dim=-1), F.log_softmax(b, dim=-1)
        return (F.kl_div(log_a, log_b.detach(), log_target=True, reduction="batchmean")
                + F.kl_div(log_b, log_a.detach(), log_target=True, reduction="batchmean"))


class RegressionHead(Head):
    """A single score per example (STS-B similarity), trained by mean squared error."""

    task_type = "regression"

    def loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return F.mse_loss(logits, batch["labels"].float())

    def predict(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return logits


class RankingHead(Head):
    """MT-DNN pairwise ranking (e.g. QNLI): one relevance score per (query, candidate) pair.

    Candidates with the same `batch["group"]` value form one list. Each list gets an extra
    "no answer" candidate with a fixed score of 0, and the loss is the softmax negative
    log-likelihood of the right answer among them: the positive candidates (label 1), or "no
    answer" if the list has none. So a list of one candidate is plain logistic loss, and lists
    without a positive (or whose positive fell into another batch) still teach the model.
    """

    task_type = "ranking"

    def loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        scores = logits.float()
        positive = batch["labels"] == 1
        _, group = torch.unique(batch["group"], return_inverse=True)
        n = int(group.max()) + 1
        zeros = scores.new_zeros(n)
        # log of the sum of exp over all candidates and the 0-score "no answer". The per-group
        # maximum (at least 0, the "no answer") is only a stabiliser, so it carries no gradient.
        top = zeros.scatter_reduce(0, group, scores.detach(), "amax", include_self=True)
        total = torch.exp(-top).index_add(0, group, torch.exp(scores - top[group]))
        log_all = top + torch.log(total)
        # Same over the positives only; a list without positives has "no answer" (score 0) right.
        minus_inf = torch.full_like(zeros, -torch.inf)
        pos_scores = scores.detach().masked_fill(~positive, -torch.inf)
        pos_top = minus_inf.scatter_reduce(0, group, pos_scores, "amax", include_self=True)
        has_pos = torch.isfinite(pos_top)
        pos_top = torch.where(has_pos, pos_top, zeros)
        # -inf before exp (not masking after it): keeps both the value and the gradient finite.
        pos_exp = torch.exp(torch.where(positive, scores - pos_top[group], -torch.inf))
        pos_total = zeros.index_add(0, group, pos_exp)
        log_right = torch.where(has_pos, pos_top + torch.log(torch.where(has_pos, pos_total, 1.0)),
                                zeros)
        # A plain mean over the lists: each list is one ranking question, so a long list does not
        # outweigh a short one; with one candidate per list it is the mean over the examples.
        return (log_all - log_right).mean()

    def predict(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """1 for the top-scoring candidate of each list if it beats "no answer" (score > 0).

        Needs whole lists: for evaluation, call it once on a split's concatenated scores.
        Candidates tied at the top all get 1.
        """
        _, group = torch.unique(batch["group"], return_inverse=True)
        top = torch.full((int(group.max()) + 1,), -torch.inf, dtype=logits.dtype,
                         device=logits.device)
        top = top.scatter_reduce(0, group, logits, "amax", include_self=True)
        return ((logits == top[group]) & (logits > 0)).long()


HEADS: dict[str, type[Head]] = {
    head.task_type: head for head in (ClassificationHead, RegressionHead, RankingHead)
}


def build_head(spec: TaskSpec, hidden_size: int) -> Head:
    """The head for `spec.type`, on an encoder whose pooled output has `hidden_size` features."""
    head = HEADS.get(spec.type)
    if head is None:
        raise ConfigError(
            f"tasks: task {spec.name!r} has type {spec.type!r}; choose one of {', '.join(HEADS)}"
        )
    return head(hidden_size, spec)
