"""Ranking (MT-DNN's pairwise ranking, e.g. QNLI): candidates of one query scored together."""

from __future__ import annotations

import torch
from torch import Tensor

from weightsearch.trainer.heads.base import Head


class RankingHead(Head):
    """MT-DNN pairwise ranking (e.g. QNLI): one relevance score per (query, candidate) pair.

    Candidates with the same `batch["group"]` value form one list. Each list gets an extra
    "no answer" candidate with a fixed score of 0, and the loss is the softmax negative
    log-likelihood of the right answer among them: the positive candidates (label 1), or "no
    answer" if the list has none. So a list of one candidate is plain logistic loss, and lists
    without a positive (or whose positive fell into another batch) still teach the model.
    """

    task_type = "ranking"

    def loss(self, outputs: Tensor, batch: dict[str, Tensor]) -> Tensor:
        scores = outputs.float()
        positive = batch["labels"] == 1
        group, lists = list_slots(batch["group"])
        zeros = scores.new_zeros(scores.shape[0])
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
        # A slot no list took adds exactly 0 (log 1 - 0).
        return (log_all - log_right).sum() / lists

    def predict(self, outputs: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """1 for the top-scoring candidate of each list if it beats "no answer" (score > 0).

        Needs whole lists: for evaluation, call it once on a split's concatenated scores.
        Candidates tied at the top all get 1.
        """
        _, group = torch.unique(batch["group"], return_inverse=True)
        top = torch.full((int(group.max()) + 1,), -torch.inf, dtype=outputs.dtype,
                         device=outputs.device)
        top = top.scatter_reduce(0, group, outputs, "amax", include_self=True)
        return ((outputs == top[group]) & (outputs > 0)).long()


HEAD = RankingHead


def list_slots(group: Tensor) -> tuple[Tensor, Tensor]:
    """Each candidate's list as a slot in [0, N) (the row of the list's first candidate) and
    the number of lists, both computed on the device with shapes fixed by N, so a CUDA graph
    can capture the loss (torch.unique's output size depends on the values)."""
    same = group.unsqueeze(0) == group.unsqueeze(1)
    slot = same.int().argmax(dim=1)  # argmax returns the first maximal index
    first = slot == torch.arange(group.shape[0], device=group.device)
    return slot, first.sum()

