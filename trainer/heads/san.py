"""The stochastic answer network (SAN; Liu et al. 2018), MT-DNN's answer module for pairwise
classification, as the reference code computes it (`module/san.py`, `SANClassifier`, with
MT-DNN's defaults: bilinear attention, merged features, GRU cell, `mem_type` 1).

By position in the pair, as the SIWLM code builds its masks (`mt_dnn/batcher.py`: `premise_mask`
valid on the token-type-0 tokens, `hypothesis_mask` on the token-type-1 tokens, passed as
`x_mask` and `h_mask`) and as the SAN paper reads them (memory: the premise; initial state: the
hypothesis): the memory M is the first segment's tokens ([CLS] and the first [SEP] included)
and the initial state s0 is a self-attentive summary of the second segment (its [SEP]
included). A single text has no second segment: its memory and its summary are all its tokens.
Each of the 5 steps t:

    beta = softmax(M W s_t + M b)                  (bilinear attention, its linear has a bias)
    x_t  = beta M                                  (read from the memory as it is)
    P_t  = softmax(W_c [x_t; s_t; |x_t - s_t|; x_t * s_t] + b_c)   (from the state before...)
    s_{t+1} = GRU(x_t, dropout(s_t))                (...the update)

Dropout is the task's rate, variational on token sequences (one mask per sequence and feature,
shared by every token) and plain on vectors, where the reference applies it: the memory and the
state as the attention reads them, the summary's input, the classifier's features and the
state before the GRU. Training drops steps (stochastic prediction dropout): each step's P_t is
kept with probability 1 - 0.1 and scaled by 1 / 0.9, one random step per example always kept,
and the answer is log(mean over all 5 steps); inference averages every step. Cross-entropy on
the log is the usual loss. Runs in fp32 whatever the run's precision.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from weightsearch.trainer import draws

STEPS = 5  # MT-DNN's answer_num_turn
STEP_DROPOUT = 0.1  # MT-DNN's answer_mem_drop_p


class StochasticAnswerNetwork(nn.Module):
    def __init__(self, hidden: int, classes: int, dropout: float, steps: int = STEPS,
                 step_dropout: float = STEP_DROPOUT) -> None:
        super().__init__()
        self.steps, self.step_dropout, self.p = steps, step_dropout, dropout
        self.summary = nn.Linear(hidden, 1)  # self-attention scores of the initial summary
        self.attend = nn.Linear(hidden, hidden)  # W s + b: the bilinear state-token scores
        self.cell = nn.GRUCell(hidden, hidden)
        self.classify = nn.Linear(4 * hidden, classes)

    def forward(self, hidden: Tensor, mask: Tensor, second: Tensor | None) -> Tensor:
        """Log class probabilities [N, classes] from token states [N, T, H], the attention mask
        and the token type ids (1 on the second segment), in fp32."""
        with torch.autocast(hidden.device.type, enabled=False):
            states = hidden.float()
            valid = mask.bool()
            in_second = valid if second is None else valid & second.bool()
            has_second = in_second.any(-1, keepdim=True)
            memory_mask = torch.where(has_second, valid & ~in_second, valid)
            summary_mask = torch.where(has_second, in_second, valid)
            summary_in = self._sequence_dropout(states)
            weights = _masked_softmax(self.summary(summary_in).squeeze(-1), summary_mask)
            state = torch.einsum("nt,nth->nh", weights, summary_in)
            probs = []
            for _ in range(self.steps):
                attend = self.attend(self._dropout(state))
                scores = torch.einsum("nh,nth->nt", attend, self._sequence_dropout(states))
                read = torch.einsum("nt,nth->nh", _masked_softmax(scores, memory_mask), states)
                merged = torch.cat([read, state, (read - state).abs(), read * state], dim=-1)
                probs.append(self.classify(self._dropout(merged)).softmax(-1))
                state = self.cell(read, self._dropout(state))
            stacked = torch.stack(probs, dim=1)  # [N, steps, classes]
            mean = (stacked * self._step_weights(stacked).unsqueeze(-1)).mean(1)
            return mean.clamp_min(1e-30).log()

    def _dropout(self, x: Tensor) -> Tensor:
        return draws.dropout(x, self.p, self.training)

    def _sequence_dropout(self, x: Tensor) -> Tensor:
        """Variational dropout: one mask per sequence and feature, shared by its tokens."""
        if not self.training or self.p == 0:
            return x
        # The members of a stacked model share one mask, as their stand-alone runs draw.
        keep = torch.bernoulli(torch.full((draws.member_rows(x.shape[0]), 1, x.shape[2]),
                                          1 - self.p, dtype=x.dtype, device=x.device))
        return x * draws.repeat_members(keep) / (1 - self.p)

    def _step_weights(self, stacked: Tensor) -> Tensor:
        """Each step's weight: 1 at inference; in training kept with probability 1 - p and
        then 1 / (1 - p), one random step per example always kept."""
        n, steps = stacked.shape[:2]
        if not self.training or self.step_dropout == 0:
            return torch.ones(n, steps, device=stacked.device)
        n = draws.member_rows(n)  # one member's draws, shared by all (a stacked model)
        keep = (torch.rand(n, steps, device=stacked.device) >= self.step_dropout).float()
        forced = torch.randint(steps, (n,), device=stacked.device)
        keep = keep.scatter(1, forced.unsqueeze(1), 1.0)
        return draws.repeat_members(keep / (1 - self.step_dropout))


def _masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    return scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)
