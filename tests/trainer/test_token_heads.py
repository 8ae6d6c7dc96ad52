"""Heads over token states: SAN, multiple choice, span QA (windows, decoding), MMoE."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from weightsearch.core.errors import DataError
from weightsearch.trainer.encoders import load_tokenizer
from weightsearch.trainer.heads import EvalSplit, build_head, head_class
from weightsearch.trainer.heads.base import Encoded
from weightsearch.trainer.heads.span_qa import _window_starts
from weightsearch.trainer.mixture import MixtureSettings
from weightsearch.trainer.model import MixtureOfExperts
from weightsearch.trainer.task_rows import read_task_file
from weightsearch.trainer.tasks import TASK_PRESETS

HIDDEN = 8


@pytest.fixture(scope="module")
def tokenizer(minilm_path: str) -> Any:
    return load_tokenizer(minilm_path)


def _states(n: int, t: int, lengths: list[int] | None = None) -> Encoded:
    torch.manual_seed(0)
    hidden = torch.randn(n, t, HIDDEN)
    mask = torch.ones(n, t, dtype=torch.long)
    for i, length in enumerate(lengths or []):
        mask[i, length:] = 0
    return Encoded(hidden, mask, lambda h, _m: h[:, 0])


# ---- SAN ----------------------------------------------------------------------------------

def _san():
    torch.manual_seed(0)
    return build_head(dataclasses.replace(TASK_PRESETS["mnli"], head="san"), HIDDEN)


def test_san_gives_log_probabilities_and_averages_its_steps():
    head = _san().eval()
    states = _states(4, 6, [6, 4, 5, 2])
    types = torch.tensor([[0, 0, 0, 1, 1, 1]] * 4)
    out = head(states, {"token_type_ids": types})
    assert out.shape == (4, 3)
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(4))
    torch.testing.assert_close(out, head(states, {"token_type_ids": types}))  # no dropout
    # Padding does not change the answer: row 1 padded further gives the same result.
    longer = Encoded(torch.cat([states.hidden, torch.randn(4, 3, HIDDEN)], 1),
                     torch.cat([states.mask, torch.zeros(4, 3, dtype=torch.long)], 1),
                     states.pool)
    wide_types = torch.cat([types, torch.zeros(4, 3, dtype=torch.long)], 1)
    torch.testing.assert_close(head(longer, {"token_type_ids": wide_types}), out)


def test_san_drops_whole_steps_in_training_but_keeps_one():
    """The reference's generate_mask: each step kept with probability 0.9 and scaled by 1/0.9,
    one random step per example always kept; the answer is the mean over all 5 steps."""
    san = _san().san.train()
    torch.manual_seed(3)
    weights = san._step_weights(torch.zeros(2000, 5, 3))
    assert all(w == 0 or w == pytest.approx(1 / 0.9) for w in weights.unique().tolist())
    kept = weights > 0
    assert kept.sum(1).min() >= 1  # at least one step per example
    # each step kept with probability 0.9, one of five forced: 0.9 + 0.1 / 5 = 0.92
    assert abs(kept.float().mean().item() - 0.92) < 0.01
    assert san.eval()._step_weights(torch.zeros(3, 5, 3)).eq(1).all()


def _siwlm_masks(mask, types):
    """The SIWLM code's masks for one batch (`mt_dnn/batcher.py`, `_prepare_model_input`):
    1 marks an excluded token; `premise_mask` keeps the first `plen` tokens (those of token
    type 0), `hypothesis_mask` the tokens from `plen` to the sample's length."""
    n, width = mask.shape
    premise, hypothesis = torch.ones(n, width), torch.ones(n, width)
    for i in range(n):
        select_len = int(mask[i].sum())
        type_id = types[i, :select_len].tolist()
        plen = len(type_id) - sum(type_id)
        premise[i, :plen] = 0
        hypothesis[i, plen:select_len] = 0
    return premise.bool(), hypothesis.bool()


def _reference_san(san, hidden, x_mask, h_mask):
    """SANClassifier.forward(x, h0, x_mask, h_mask) at inference, as the SIWLM code calls it
    (`tasks/__init__.py`: x and h0 both the encoder's tokens): s0 the self-attentive summary of
    h0 where h_mask is 0, memory x where x_mask is 0; each step classifies
    [x; s; |x - s|; x * s] from the state before the GRU update; bilinear attention with bias;
    the answer log(mean of the 5 steps' distributions)."""
    import torch.nn.functional as F

    out = []
    for n in range(hidden.shape[0]):
        h0 = hidden[n, ~h_mask[n]]
        s = F.softmax(san.summary(h0).squeeze(-1), 0) @ h0
        memory = hidden[n, ~x_mask[n]]
        probs = []
        for _ in range(5):
            beta = F.softmax(memory @ (san.attend.weight @ s + san.attend.bias), 0)
            x = beta @ memory
            probs.append(F.softmax(san.classify(torch.cat([x, s, (x - s).abs(), x * s])), 0))
            s = san.cell(x.unsqueeze(0), s.unsqueeze(0)).squeeze(0)
        out.append(torch.stack(probs).mean(0).log())
    return torch.stack(out)


def test_san_is_the_reference_answer_module():
    """The SIWLM code's roles: memory the first segment (its `premise_mask`), initial state the
    summary of the second (its `hypothesis_mask`); the other way round is another model."""
    san = _san().san.eval()
    torch.manual_seed(1)
    hidden = torch.randn(3, 7, HIDDEN)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1]])
    types = torch.tensor([[0, 0, 0, 1, 1, 1, 0], [0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 1]])
    premise, hypothesis = _siwlm_masks(mask, types)
    got = san(hidden, mask, types)
    torch.testing.assert_close(got, _reference_san(san, hidden, premise, hypothesis),
                               rtol=1e-5, atol=1e-6)
    swapped = _reference_san(san, hidden, hypothesis, premise)
    assert (got - swapped).abs().max() > 1e-3  # the roles matter: the check can fail


def test_san_dropout_on_token_sequences_is_variational():
    san = _san().san.train()
    san.p = 0.5
    torch.manual_seed(0)
    out = san._sequence_dropout(torch.ones(3, 6, HIDDEN))
    # one mask per sequence and feature: every token of a sequence dropped alike
    assert (out == out[:, :1, :]).all()
    assert set(out.unique().tolist()) <= {0.0, 2.0} and (out == 0).any()


def test_san_trains_end_to_end():
    head = _san().train()
    states = _states(4, 6)
    states.hidden.requires_grad_()
    labels = torch.tensor([0, 1, 2, 1])
    loss = head.loss(head(states, {"token_type_ids": torch.ones(4, 6).long()}), {"labels": labels})
    loss.backward()
    assert torch.isfinite(loss) and states.hidden.grad.abs().sum() > 0
    assert all(p.grad is not None for p in head.parameters())


def test_san_is_refused_on_a_regression_task():
    from weightsearch.trainer.task_parsing import parse_tasks

    problems: list[str] = []
    parse_tasks([{"preset": "stsb", "head": "san"}], problems)
    assert problems and "head" in problems[0] and "classification" in problems[0]


# ---- multiple choice ----------------------------------------------------------------------

def test_multiple_choice_scores_each_choice_and_softmaxes_over_them():
    torch.manual_seed(0)
    head = build_head(TASK_PRESETS["swag"], HIDDEN).eval()
    pooled = torch.randn(2 * 4, HIDDEN)  # two examples, four choices each, example-major
    batch = {"labels": torch.tensor([2, 0])}
    scores = head(Encoded(pooled.unsqueeze(1), torch.ones(8, 1).long(), lambda h, _m: h[:, 0]),
                  batch)
    expected = (pooled @ head.proj.weight.T + head.proj.bias).view(2, 4)
    torch.testing.assert_close(scores, expected)
    by_hand = -(F.log_softmax(expected, -1)[0, 2] + F.log_softmax(expected, -1)[1, 0]) / 2
    torch.testing.assert_close(head.loss(scores, batch), by_hand)
    assert head.predict(scores, batch).tolist() == expected.argmax(-1).tolist()


def _write_swag(path: Path, rows: list[list[str]]) -> Path:
    header = "video-id,sent1,sent2,ending0,ending1,ending2,ending3,label\n"
    path.write_text(header + "".join(",".join(r) + "\n" for r in rows))
    return path


def test_multiple_choice_rows_and_batches(tmp_path, tokenizer):
    from weightsearch.trainer.task_data import load_task_data

    _write_swag(tmp_path / "train.csv", [
        ["v1", "A man sits.", "He", "stands up.", "eats.", "sleeps.", "runs away fast.", "3"],
        ["v2", "A dog barks.", "It", "wags.", "runs.", "sits.", "jumps.", "0"]])
    spec = dataclasses.replace(TASK_PRESETS["swag"], train_file=str(tmp_path / "train.csv"),
                               dev_files=(("dev", str(tmp_path / "train.csv")),))
    data = load_task_data(spec, None, tokenizer, 64, None)
    batch = data.collate(data.train, np.array([0, 1]), tokenizer.pad_token_id)
    assert batch["input_ids"].shape[0] == 8 and batch["labels"].tolist() == [3, 0]
    first = tokenizer.decode(batch["input_ids"][3][batch["attention_mask"][3].bool()])
    assert first == "[CLS] a man sits. [SEP] he runs away fast. [SEP]"
    assert tokenizer.decode(batch["input_ids"][4], skip_special_tokens=True).startswith("a dog")


@pytest.mark.parametrize(("row", "words"), [
    (["v", "ctx", "lead", "a", "b", "c", "d", "4"], ["label '4'", "0..3"]),
    (["v", "ctx", "lead", "a", "b", "c", "d", "x"], ["label 'x'"]),
    (["v", "ctx", "lead", "a", "", "c", "d", "1"], ["ending1", "empty"]),
])
def test_multiple_choice_bad_rows(tmp_path, row, words):
    path = _write_swag(tmp_path / "t.csv", [row])
    spec = dataclasses.replace(TASK_PRESETS["swag"], train_file=str(path))
    with pytest.raises(DataError) as err:
        read_task_file(spec, path)
    assert all(w in str(err.value) for w in words), err.value
    assert "line 2" in str(err.value)


# ---- span QA: reading and windows ---------------------------------------------------------

def _squad(path: Path, context: str, qas: list[dict]) -> Path:
    path.write_text(json.dumps({"version": "v2.0", "data": [
        {"title": "T", "paragraphs": [{"context": context, "qas": qas}]}]}))
    return path


def _qa_spec(path: Path, **changes: Any):
    return dataclasses.replace(TASK_PRESETS["squad2"], train_file=str(path),
                               dev_files=(("dev", str(path)),), **changes)


LONG = " ".join(f"word{i}" for i in range(60)) + " the answer is here ok " + " ".join(
    f"tail{i}" for i in range(60))


def test_windows_cover_the_context_and_label_the_answer_where_it_fits(tmp_path, tokenizer):
    start = LONG.index("the answer is here")
    path = _squad(tmp_path / "q.json", LONG, [
        {"id": "a", "question": "where?", "is_impossible": False,
         "answers": [{"text": "the answer is here", "answer_start": start}]},
        {"id": "b", "question": "what not?", "is_impossible": True, "answers": []}])
    spec = _qa_spec(path, max_seq_len=64, doc_stride=20, max_query_len=8)
    head = head_class("span_qa")
    features = head.featurize(spec, read_task_file(spec, path), tokenizer, 64, train=True)
    cols = {k: v.to_pylist() for k, v in features.columns.items()}
    windows = features.notes["windows"]
    assert windows == len(cols["input_ids"]) and windows > 4 and features.examples == 2
    assert all(len(ids) <= 64 for ids in cols["input_ids"])
    found = [i for i in range(windows) if cols["label"][i]]
    assert found, "the answer fits in some window"
    for i in range(windows):
        ids, s, e = cols["input_ids"][i], cols["start"][i], cols["end"][i]
        if i in found:
            assert tokenizer.decode(ids[s:e + 1]) == "the answer is here"
        else:  # windows that do not hold the whole answer, and the unanswerable question
            assert (s, e) == (0, 0)
    # windows of one question overlap: every context token is in some window
    assert features.notes["answers_outside_every_window"] == 0


def test_answer_longer_than_any_window_is_counted(tmp_path, tokenizer):
    text = " ".join(f"w{i}" for i in range(80))
    path = _squad(tmp_path / "q.json", text, [
        {"id": "a", "question": "all?", "answers": [{"text": text, "answer_start": 0}]}])
    spec = _qa_spec(path, max_seq_len=40, doc_stride=10, max_query_len=8)
    features = head_class("span_qa").featurize(spec, read_task_file(spec, path), tokenizer, 40,
                                                train=True)
    assert features.notes["answers_outside_every_window"] == 1


def test_window_starts_follow_berts_rule():
    assert _window_starts(10, 20, 5) == [0]
    assert _window_starts(50, 20, 10) == [0, 10, 20, 30]  # the last reaches the end
    assert _window_starts(50, 20, 30) == [0, 20, 40]  # a stride beyond the window is capped


@pytest.mark.parametrize(("qas", "context", "words"), [
    ([{"id": "a", "question": "q", "answers": [{"text": "cat", "answer_start": 1}]}],
     "a cat sat", ["answer_start 1", "'cat'", "occurs at 2"]),
    ([{"id": "a", "question": "q", "answers": [{"text": "dog", "answer_start": 0}]}],
     "a cat sat", ["does not occur"]),
    ([{"id": "a", "question": "q", "answers": []}], "", ["no context"]),
    ([{"id": "a", "question": "q", "answers": []}, {"id": "a", "question": "r", "answers": []}],
     "a cat", ["id 'a' is used twice"]),
    ([{"id": "a", "question": "q", "is_impossible": True,
       "answers": [{"text": "cat", "answer_start": 2}]}], "a cat", ["is_impossible"]),
])
def test_bad_squad_records(tmp_path, qas, context, words):
    path = _squad(tmp_path / "q.json", context, qas)
    with pytest.raises(DataError) as err:
        read_task_file(_qa_spec(path), path)
    assert all(w in str(err.value) for w in words), err.value
    assert "question 'a'" in str(err.value) or "twice" in str(err.value)


def test_squad_answer_start_off_by_one_names_the_question(tmp_path):
    path = _squad(tmp_path / "q.json", "a cat sat", [
        {"id": "q1", "question": "who?", "answers": [{"text": "cat", "answer_start": 3}]}])
    with pytest.raises(DataError, match=r"question 'q1': answer_start 3 does not point at the "
                                        r"answer text 'cat'.*occurs at 2"):
        read_task_file(_qa_spec(path), path)


# ---- span QA: decoding -------------------------------------------------------------------

def _eval_split(tmp_path: Path, windows: list[dict], reference: list[dict]) -> EvalSplit:
    ds = datasets.Dataset.from_dict({
        "example": [w["example"] for w in windows],
        "context_start": [w["context_start"] for w in windows],
        "offset_start": [w["offsets"][0] for w in windows],
        "offset_end": [w["offsets"][1] for w in windows]})
    return EvalSplit("qa", "dev", np.arange(len(windows)), ds, reference, tmp_path, 3, True)


def _prediction(k: int, starts: list[tuple[int, float]], ends: list[tuple[int, float]],
                null: float) -> np.ndarray:
    def pad(pairs):
        pairs = pairs + [(0, -math.inf)] * (k - len(pairs))
        return [p[0] for p in pairs], [p[1] for p in pairs]

    s_idx, s_val = pad(starts)
    e_idx, e_val = pad(ends)
    return np.array([*s_idx, *s_val, *e_idx, *e_val, null], dtype=np.float32)


def test_decoding_picks_the_best_span_over_windows_and_maps_it_to_characters(tmp_path):
    context = "The Normans lived in Normandy, a region in France."
    # Word-level "tokens" with character offsets; two windows of one question: tokens 0-5 and
    # tokens 4-9 of the context, each after 3 question/special tokens.
    words = [(m.start(), m.end()) for m in __import__("re").finditer(r"\w+|[^\w\s]", context)]
    w1, w2 = words[0:6], words[4:10]
    windows = [
        {"example": 0, "context_start": 3, "offsets": ([a for a, _ in w1], [b for _, b in w1])},
        {"example": 0, "context_start": 3, "offsets": ([a for a, _ in w2], [b for _, b in w2])},
        {"example": 1, "context_start": 3, "offsets": ([a for a, _ in w1], [b for _, b in w1])},
    ]
    reference = [{"id": "q1", "context": context, "answers": ["region"]},
                 {"id": "q2", "context": context, "answers": []}]
    k = 3
    preds = np.stack([
        # window 1: "Normans lived" (tokens 4..5 of the window, i.e. words 1-2) scores 2 + 1
        _prediction(k, [(4, 2.0)], [(5, 1.0)], null=0.5),
        # window 2: "region" (word 7 = window token 6) scores 3 + 2.5; an end before the
        # start is never chosen, nor "Normandy" (window token 3), which has more context in
        # window 1 (BERT's max-context rule), though it scores 4 + 2.5
        _prediction(k, [(3, 4.0), (6, 3.0), (8, 9.0)], [(6, 2.5), (3, 2.5), (4, 1.0)],
                    null=1.0),
        # question 2: the null score beats every span
        _prediction(k, [(3, 0.1)], [(4, 0.2)], null=5.0),
    ])
    head = build_head(dataclasses.replace(TASK_PRESETS["squad2"], n_best=k, max_answer_len=5,
                                          metrics=("exact", "f1", "has_ans_f1", "no_ans_f1",
                                                   "best_f1", "best_f1_thresh")), HIDDEN)
    split = _eval_split(tmp_path, windows, reference)
    answers, odds = head.decode(preds, split)
    assert answers[0] == "region"
    assert odds[0] == pytest.approx(0.5 - 5.5)  # lowest null over the windows - best span
    assert odds[1] == pytest.approx(5.0 - 0.3)
    metrics = head.score(preds, np.zeros(3), split)
    # best threshold, as the official search finds it: the odds of the last question it answers
    assert metrics == {"exact": 1.0, "f1": 1.0, "has_ans_f1": 1.0, "no_ans_f1": 1.0,
                       "best_f1": 1.0, "best_f1_thresh": pytest.approx(-5.0)}
    written = json.loads((tmp_path / "predictions-squad2-epoch-3.json").read_text())
    assert written == {"q1": "region", "q2": ""}
    odds_file = json.loads((tmp_path / "null-odds-squad2-epoch-3.json").read_text())
    assert odds_file == pytest.approx({"q1": -5.0, "q2": 4.7})


def test_predict_takes_candidates_from_the_whole_window():
    """As BERT's decoder: the n_best over every token; decode drops those outside the context."""
    head = build_head(dataclasses.replace(TASK_PRESETS["squad2"], n_best=2), HIDDEN)
    outputs = torch.zeros(1, 6, 2)
    outputs[0, :, 0] = torch.tensor([9.0, 8.0, 1.0, 2.0, 3.0, 7.0])  # start logits
    outputs[0, :, 1] = torch.tensor([4.0, 0.0, 5.0, 1.0, 6.0, 0.0])  # end logits
    batch = {"context_start": torch.tensor([2]), "context_end": torch.tensor([5])}
    got = head.predict(outputs, batch)[0].tolist()
    # starts 0 (9.0), 1 (8.0); ends 4 (6.0), 2 (5.0); null 9 + 4
    assert got == [0, 1, 9.0, 8.0, 4, 2, 6.0, 5.0, 13.0]


@pytest.mark.parametrize("seed", [0, 2, 3, 7])  # 2, 3 and 7: the max-context rule decides
def test_decoding_is_berts_on_random_logits(tmp_path, seed):
    """Re-stated from BERT's write_predictions and _check_is_max_context: for each window, its
    n_best start and end indexes over the whole window; a pair counts when both are context
    tokens, the start has its maximal context in this window (score min(left, right) + 0.01 *
    span length, the first window on ties), end >= start and the length is at most the limit;
    the best pair over the windows wins."""
    rng = np.random.default_rng(seed)
    context = " ".join(f"w{i}" for i in range(30))
    offsets = [(m.start(), m.end()) for m in __import__("re").finditer(r"\S+", context)]
    spans = [(0, 12), (8, 12), (16, 12), (24, 6)]  # doc token start, length: overlapping
    q_len, k, limit = 4, 5, 6
    windows, logits = [], []
    for doc_start, length in spans:
        part = offsets[doc_start:doc_start + length]
        windows.append({"example": 0, "context_start": q_len,
                        "offsets": ([a for a, _ in part], [b for _, b in part])})
        logits.append(rng.normal(size=(q_len + length + 1, 2)))  # + a [SEP]
    head = build_head(dataclasses.replace(TASK_PRESETS["squad2"], n_best=k, max_answer_len=limit),
                      HIDDEN)
    preds = np.stack([head.predict(torch.tensor(w[None], dtype=torch.float32),
                                   {})[0].numpy() for w in logits])
    split = _eval_split(tmp_path, windows, [{"id": "q", "context": context, "answers": []}])
    got, _ = head.decode(preds, split)

    def is_max_context(w, doc_index):
        best, best_w = None, None
        for i, (start, length) in enumerate(spans):
            if not start <= doc_index < start + length:
                continue
            score = min(doc_index - start, start + length - 1 - doc_index) + 0.01 * length
            if best is None or score > best:
                best, best_w = score, i
        return best_w == w

    best, answer = -math.inf, ""
    for w, ((doc_start, length), x) in enumerate(zip(spans, logits, strict=True)):
        s_top = np.argsort(-x[:, 0], kind="stable")[:k]
        e_top = np.argsort(-x[:, 1], kind="stable")[:k]
        for s in s_top:
            for e in e_top:
                if not (q_len <= s < q_len + length and q_len <= e < q_len + length):
                    continue
                if not is_max_context(w, doc_start + s - q_len) or e < s or e - s + 1 > limit:
                    continue
                if x[s, 0] + x[e, 1] > best:
                    best = x[s, 0] + x[e, 1]
                    answer = context[offsets[doc_start + s - q_len][0]:
                                     offsets[doc_start + e - q_len][1]]
    assert got == [answer] and answer


def test_span_loss_is_the_mean_of_start_and_end_cross_entropy():
    head = build_head(TASK_PRESETS["squad2"], HIDDEN).eval()
    states = _states(2, 5, [5, 3])
    outputs = head(states, {})
    assert outputs.shape == (2, 5, 2)
    assert (outputs[1, 3:] < -1e3).all()  # padding is never a start or an end
    batch = {"start": torch.tensor([1, 0]), "end": torch.tensor([3, 2])}
    start, end = outputs.unbind(-1)
    expected = (F.cross_entropy(start, batch["start"]) + F.cross_entropy(end, batch["end"])) / 2
    torch.testing.assert_close(head.loss(outputs, batch), expected)


# ---- MMoE ---------------------------------------------------------------------------------

def test_the_token_gate_with_a_residual_starts_close_to_the_encoder():
    """The named departure (gate: token, residual: true): a gate per token, and the heads
    read the encoder's states plus the mixture."""
    torch.manual_seed(0)
    moe = MixtureOfExperts(MixtureSettings(experts=3, expert_hidden=16, gate="token",
                                           residual=True), HIDDEN, ["a", "b"])
    states = torch.randn(2, 4, HIDDEN)
    gate_a, gate_b = moe.gate("a", states), moe.gate("b", states)
    assert gate_a.shape == (2, 4, 3)
    torch.testing.assert_close(gate_a.sum(-1), torch.ones(2, 4))
    assert not torch.allclose(gate_a, gate_b)  # each task has its own gate
    out = moe("a", states)
    assert out.shape == states.shape
    assert (out - states).abs().max() < 0.2  # residual: the experts add a small correction
    # the mixture is the gate-weighted sum of the experts
    experts = torch.stack([e(states) for e in moe.experts], -1)
    torch.testing.assert_close(out, states + (experts * gate_a.unsqueeze(-2)).sum(-1))


def test_the_default_mixture_is_ma_et_al_s_mmoe():
    """Re-stated from Ma et al. (2018): task k's input to its head is
    f^k(x) = sum_i g^k(x)_i f_i(x) with g^k(x) = softmax(W_gk x), one gate per example; here x
    is the mean of the example's unmasked token states, and no residual is added."""
    torch.manual_seed(1)
    moe = MixtureOfExperts(MixtureSettings(experts=3, expert_hidden=16), HIDDEN, ["a", "b"])
    states = torch.randn(2, 5, HIDDEN)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])
    out = moe("a", states, mask)
    for n in range(2):
        x = states[n, mask[n].bool()].mean(0)
        w, b = moe.gates["a"].weight, moe.gates["a"].bias
        g = torch.softmax(w @ x + b, dim=0)
        for t in range(5):
            expected = sum(g[i] * moe.experts[i](states[n, t]) for i in range(3))
            torch.testing.assert_close(out[n, t], expected, rtol=1e-5, atol=1e-6)
    # Padding does not move the gate: the second example's gate ignores its masked tokens.
    changed = states.clone()
    changed[1, 2:] = 100.0
    torch.testing.assert_close(moe.gate("a", changed, mask)[1], moe.gate("a", states, mask)[1])
    assert not torch.allclose(moe.gate("a", states, mask), moe.gate("b", states, mask))
