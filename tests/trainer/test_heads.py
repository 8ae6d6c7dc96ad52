"""Task heads: shapes, losses against hand-computed values, predictions, gradients."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from weightsearch.core.errors import ConfigError
from weightsearch.trainer.heads import (
    HEADS,
    ClassificationHead,
    Encoded,
    RankingHead,
    RegressionHead,
    build_head,
)
from weightsearch.trainer.tasks import TASK_PRESETS, TASK_TYPES

HIDDEN = 8
LN = math.log


def _pooled(vectors: torch.Tensor) -> Encoded:
    """Encoder states whose pooled vector is `vectors` (one token per row)."""
    hidden = vectors.unsqueeze(1)
    return Encoded(hidden, torch.ones(hidden.shape[:2], dtype=torch.long),
                   lambda h, _m: h[:, 0])


def _head(preset: str):
    torch.manual_seed(0)
    head = build_head(TASK_PRESETS[preset], HIDDEN)
    head.eval()  # dropout off: forward is deterministic
    return head


def test_registry_covers_every_task_type():
    assert set(HEADS) == set(TASK_TYPES)
    assert type(_head("mnli")) is ClassificationHead
    assert type(_head("stsb")) is RegressionHead
    assert type(_head("qnlirank")) is RankingHead


def test_unknown_type_is_a_config_error():
    spec = dataclasses.replace(TASK_PRESETS["rte"], type="tagging")
    with pytest.raises(ConfigError, match="choose one of classification, regression, ranking, "
                                          "multiple_choice, span_qa"):
        build_head(spec, HIDDEN)


def test_dropout_comes_from_the_spec():
    assert build_head(TASK_PRESETS["cola"], HIDDEN).dropout.p == 0.05
    assert build_head(TASK_PRESETS["rte"], HIDDEN).dropout.p == 0.1


@pytest.mark.parametrize(("preset", "shape"), [("mnli", (5, 3)), ("rte", (5, 2)),
                                               ("stsb", (5,)), ("qnlirank", (5,))])
def test_forward_shapes(preset, shape):
    assert _head(preset)(_pooled(torch.randn(5, HIDDEN)), {}).shape == shape


def test_classification_loss_and_predict():
    head = _head("rte")
    logits = torch.tensor([[0.0, LN(3)], [LN(4), 0.0]])
    batch = {"labels": torch.tensor([1, 1])}
    # -log(3/4) and -log(1/5), averaged.
    assert head.loss(logits, batch).item() == pytest.approx((LN(4 / 3) + LN(5)) / 2)
    assert head.predict(logits, batch).tolist() == [1, 0]


def test_regression_loss_and_predict():
    head = _head("stsb")
    scores = torch.tensor([1.0, 2.0])
    batch = {"labels": torch.tensor([0.0, 4.0])}
    assert head.loss(scores, batch).item() == pytest.approx((1 + 4) / 2)
    assert head.predict(scores, batch).tolist() == [1.0, 2.0]


def _ranking_batch():
    # List 10: candidates with scores ln2 (negative), ln3 (positive), interleaved with list 20,
    # one negative candidate scored ln4.
    scores = torch.tensor([LN(2), LN(4), LN(3)], requires_grad=True)
    batch = {"labels": torch.tensor([0, 0, 1]), "group": torch.tensor([10, 20, 10])}
    return scores, batch


def test_ranking_loss_by_hand():
    scores, batch = _ranking_batch()
    loss = _head("qnlirank").loss(scores, batch)
    # List 10 with "no answer" (e^0 = 1): softmax of the positive = 3 / (1 + 2 + 3) -> ln 2.
    # List 20 has no positive, so "no answer" is right: 1 / (1 + 4) -> ln 5. Mean of the lists.
    assert loss.item() == pytest.approx((LN(2) + LN(5)) / 2)
    loss.backward()
    # d/ds = (softmax - target) / number of lists
    assert scores.grad.tolist() == pytest.approx([(2 / 6) / 2, (4 / 5) / 2, (3 / 6 - 1) / 2])


def test_ranking_several_positives_share_the_probability():
    scores = torch.tensor([0.0, LN(2), LN(5)])
    batch = {"labels": torch.tensor([1, 1, 0]), "group": torch.tensor([3, 3, 3])}
    # P(a positive) = (1 + 2) / (1 + 1 + 2 + 5)
    assert _head("qnlirank").loss(scores, batch).item() == pytest.approx(LN(9 / 3))


def test_ranking_single_candidate_lists_are_logistic_loss():
    scores = torch.tensor([1.5, -0.3, 0.7])
    labels = torch.tensor([1, 0, 1])
    batch = {"labels": labels, "group": torch.tensor([1, 2, 3])}
    expected = F.binary_cross_entropy_with_logits(scores, labels.float())
    assert _head("qnlirank").loss(scores, batch).item() == pytest.approx(expected.item())


def test_ranking_loss_is_stable_for_extreme_scores():
    scores = torch.tensor([300.0, -300.0, -250.0, 400.0], requires_grad=True)
    batch = {"labels": torch.tensor([0, 1, 0, 0]), "group": torch.tensor([1, 1, 2, 2])}
    loss = _head("qnlirank").loss(scores, batch)
    # List 1: ln(e^300 + 1 + e^-300) - (-300) ~ 600; list 2 (no positive): ~ 400.
    assert loss.item() == pytest.approx((600 + 400) / 2)
    loss.backward()
    assert torch.isfinite(scores.grad).all()


def test_ranking_predict():
    scores = torch.tensor([LN(2), LN(4), LN(3), -1.0, -2.0, 0.5, 0.5])
    batch = {"group": torch.tensor([10, 20, 10, 30, 30, 40, 40])}
    # List 10: the best (ln3) beats "no answer"; 20: its only candidate does; 30: nobody does;
    # 40: a tie at the top marks both.
    assert _head("qnlirank").predict(scores, batch).tolist() == [0, 1, 1, 0, 0, 1, 1]


@pytest.mark.parametrize("preset", ["rte", "stsb", "qnlirank"])
def test_gradients_reach_the_pooled_input_and_the_head(preset):
    head = build_head(TASK_PRESETS[preset], HIDDEN)
    head.train()
    pooled = torch.randn(4, HIDDEN, requires_grad=True)
    labels = torch.tensor([0.5, 1.0, 2.0, 3.0]) if preset == "stsb" else torch.tensor([0, 1, 1, 0])
    batch = {"labels": labels, "group": torch.tensor([0, 0, 1, 1])}
    loss = head.loss(head(_pooled(pooled), batch), batch)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    assert pooled.grad is not None and pooled.grad.abs().sum() > 0
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in head.parameters())


@pytest.mark.parametrize("preset", ["stsb", "rte", "qnlirank"])
def test_heads_score_in_fp32_under_bf16_autocast(preset):
    head = _head(preset)
    torch.manual_seed(1)
    pooled = torch.randn(16, HIDDEN).to(torch.bfloat16)  # what a bf16 encoder hands over
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scores = head(_pooled(pooled), {})
    assert scores.dtype == torch.float32
    torch.testing.assert_close(scores, head(_pooled(pooled.float()), {}), rtol=0, atol=0)
    # ... and carries digits that bf16 scores would have rounded away.
    assert not torch.equal(scores, scores.to(torch.bfloat16).float())


def _ranking_loss_restated(scores: list[float], labels: list[int], groups: list[int]) -> float:
    """Per list, minus the log-probability of its right answers among its candidates and the
    0-score "no answer" (right where it has no positive); the mean over the lists."""
    losses = []
    for g in dict.fromkeys(groups):
        mine = [(s, y) for s, y, h in zip(scores, labels, groups, strict=True) if h == g]
        everyone = 1.0 + sum(math.exp(s) for s, _ in mine)
        right = sum(math.exp(s) for s, y in mine if y == 1) or 1.0
        losses.append(math.log(everyone) - math.log(right))
    return sum(losses) / len(losses)


@pytest.mark.parametrize("seed", range(5))
def test_ranking_loss_over_interleaved_lists_matches_a_restatement(seed):
    """The loss numbers the lists on the device (fixed shapes, as a CUDA graph captures it):
    interleaved lists, repeated ids far apart, lists without a positive."""
    gen = torch.Generator().manual_seed(seed)
    n = 24
    groups = torch.randint(0, 7, (n,), generator=gen) * 1000 + 3
    labels = (torch.rand(n, generator=gen) < 0.3).long()
    scores = torch.randn(n, generator=gen) * 3
    loss = _head("qnlirank").loss(scores, {"labels": labels, "group": groups})
    expected = _ranking_loss_restated(scores.tolist(), labels.tolist(), groups.tolist())
    assert loss.item() == pytest.approx(expected, rel=1e-5)
