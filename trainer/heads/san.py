"""The stochastic answer network (SAN; Liu et al. 2018), MT-DNN's answer module for pairwise
classification: several steps of reasoning over the token states, whose predictions are
averaged.

The memory is every token state of the pair. The initial state is a self-attentive summary of
the second text (the hypothesis; all tokens for a single text). Each step attends from the
state over the memory (a bilinear score), updates the state with a GRU cell, and predicts the
classes from [state; read; |state - read|; state * read]. Training drops whole steps at random
(stochastic prediction dropout: each step kept with probability 1 - `step_dropout`, at least one
per example) and averages the kept steps' class distributions; inference averages all steps.
The output is the log of that average, so cross-entropy on it is the usual loss.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

STEPS = 5  # MT-DNN's answer_num_turn
STEP_DROPOUT = 0.1  # MT-DNN's answer_mem_drop_p


class StochasticAnswerNetwork(nn.Module):
    def __init__(self, hidden: int, classes: int, dropout: float, steps: int = STEPS,
                 step_dropout: float = STEP_DROPOUT) -> None:
        super().__init__()
        self.steps, self.step_dropout = steps, step_dropout
        self.dropout = nn.Dropout(dropout)
        self.summary = nn.Linear(hidden, 1)  # self-attention scores of the initial summary
        self.attend = nn.Linear(hidden, hidden, bias=False)  # bilinear state-token scores
        self.cell = nn.GRUCell(hidden, hidden)
        self.classify = nn.Linear(4 * hidden, classes)

    def forward(self, hidden: Tensor, mask: Tensor, second: Tensor | None) -> Tensor:
        """Log class probabilities [N, classes] from token states [N, T, H], the attention mask
        and the second text's tokens (token_type_ids == 1), in fp32."""
        with torch.autocast(hidden.device.type, enabled=False):
            memory = self.dropout(hidden.float())
            valid = mask.bool()
            query = valid if second is None else valid & second.bool()
            query = torch.where(query.any(-1, keepdim=True), query, valid)  # single texts
            weights = _masked_softmax(self.summary(memory).squeeze(-1), query)
            state = torch.einsum("nt,nth->nh", weights, memory)
            probs = []
            for _ in range(self.steps):
                scores = torch.einsum("nh,nth->nt", self.attend(state), memory)
                read = torch.einsum("nt,nth->nh", _masked_softmax(scores, valid), memory)
                state = self.cell(read, state)
                merged = torch.cat([state, read, (state - read).abs(), state * read], dim=-1)
                probs.append(self.classify(self.dropout(merged)).softmax(-1))
            stacked = torch.stack(probs, dim=1)  # [N, steps, classes]
            keep = self._kept_steps(stacked)
            mean = (stacked * keep.unsqueeze(-1)).sum(1) / keep.sum(1, keepdim=True)
            return mean.clamp_min(1e-30).log()

    def _kept_steps(self, stacked: Tensor) -> Tensor:
        n, steps = stacked.shape[:2]
        keep = torch.ones(n, steps, device=stacked.device)
        if not self.training or self.step_dropout == 0:
            return keep
        keep = (torch.rand(n, steps, device=stacked.device) >= self.step_dropout).float()
        forced = torch.randint(steps, (n,), device=stacked.device)
        return keep.scatter(1, forced.unsqueeze(1), 1.0)


def _masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    return scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)
