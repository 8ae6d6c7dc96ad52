"""Span extraction QA with unanswerable questions (SQuAD 2.0), as BERT and the MT-DNN SQuAD
paper (He 2019) do it.

Input: [CLS] question [SEP] context window [SEP]. A context longer than the window is cut into
overlapping windows whose starts are `doc_stride` tokens apart; the question keeps at most
`max_query_len` tokens. Each token gets a start and an end logit; the null answer ("no answer")
is scored at [CLS] (start and end both there). Training: each window is one example whose
target is the answer's first and last token when the whole answer lies inside the window, else
[CLS]; the loss is the mean of the start and end cross-entropies (over the real tokens).

Decoding, per question over all its windows: the best non-null span (start <= end, at most
`max_answer_len` tokens, both ends inside the context, among the `n_best` best starts and ends
of each window), scored start + end logit, mapped back to the context's characters through the
fast tokenizer's offsets; the null score is the lowest [CLS] score over the windows. The score
difference null - best span is the question's null odds: the answer is "" when it is above the
threshold 0. The official evaluation's metrics follow, written fresh from the published
definition of SQuAD 2.0's evaluate-v2.0.py: answers normalised (lower case, punctuation and
the articles a/an/the removed, whitespace collapsed), exact match and token F1 each the maximum
over the gold answers ("" for an unanswerable question), overall and split into answerable
(HasAns) and unanswerable (NoAns) questions, and the best exact/F1 over all null thresholds on
the odds (`best_*`, with the threshold that reaches it). Scores are fractions in [0, 1], like
the other metrics (the official script prints percentages).

Each evaluation writes the official files: `predictions-<task>-epoch-N.json` (question id ->
answer text, "" for no answer) and `null-odds-<task>-epoch-N.json` (question id -> null odds), so
that evaluate-v2.0.py --na-prob-file scores them to the same numbers.
"""

from __future__ import annotations

import collections
import json
import re
import string
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch
import torch.nn.functional as F
from torch import Tensor

from weightsearch.core.errors import DataError
from weightsearch.trainer.data.parsing import span_qa_rows
from weightsearch.trainer.data.readers import ColumnRows, Table
from weightsearch.trainer.heads.base import (
    Encoded,
    EvalSplit,
    Head,
    refuse_soft_targets,
    symmetric_kl,
)
from weightsearch.trainer.heads.featurize import Features, list_array
from weightsearch.trainer.tasks import TaskSpec

_NO_SPAN = np.float32(1e9)  # null odds of a question with no valid span: surely "no answer"


class SpanQAHead(Head):
    task_type = "span_qa"
    drops_overlong = False  # long contexts are windowed (doc_stride), long questions cut

    def __init__(self, hidden_size: int, spec: TaskSpec) -> None:
        torch.nn.Module.__init__(self)
        self.spec = spec
        self.dropout = torch.nn.Dropout(spec.dropout)
        self.proj = torch.nn.Linear(hidden_size, 2)  # start and end logit of every token

    # ---- data --------------------------------------------------------------------------

    @classmethod
    def parse(cls, spec: TaskSpec, table: Table) -> ColumnRows:
        return span_qa_rows(spec, table)

    @classmethod
    def featurize(cls, spec: TaskSpec, rows: ColumnRows, tokenizer: Any, max_len: int, *,
                  train: bool, drop_overlong: bool = False) -> Features:
        assert spec.doc_stride and spec.max_query_len  # defaults filled by the task definition
        layout = _Layout(tokenizer)
        questions = tokenizer(rows.columns["question"], add_special_tokens=False, verbose=False)
        long_questions = sum(len(q) > spec.max_query_len for q in questions["input_ids"])
        unique = list(dict.fromkeys(rows.columns["context"]))
        encoded = tokenizer(unique, add_special_tokens=False, return_offsets_mapping=True,
                            verbose=False)
        context_at = {c: i for i, c in enumerate(unique)}
        out: dict[str, list[Any]] = collections.defaultdict(list)
        outside = windows_of_long = 0
        for example, (question, context, answers) in enumerate(zip(
                questions["input_ids"], rows.columns["context"], rows.columns["answers"],
                strict=True)):
            question = question[:spec.max_query_len]
            c = context_at[context]
            ids, offsets = encoded["input_ids"][c], encoded["offset_mapping"][c]
            budget = max_len - len(question) - layout.specials
            starts = _window_starts(len(ids), budget, spec.doc_stride)
            windows_of_long += len(starts) > 1
            target = _token_span(offsets, answers[0]) if answers else None
            found = False
            for s in starts:
                piece = ids[s:s + budget]
                first = layout.before_question + len(question) + layout.between
                out["input_ids"].append(layout.before + question + layout.middle + piece
                                        + layout.after)
                out["token_type_ids"].append([layout.types[0]] * first
                                             + [layout.types[1]] * (len(piece) + layout.after_n))
                # The answer's tokens, where this window holds all of them.
                inside = (target if target is not None and s <= target[0]
                          and target[1] < s + len(piece) else None)
                found |= inside is not None
                out["start"].append(first + inside[0] - s if inside is not None else 0)
                out["end"].append(first + inside[1] - s if inside is not None else 0)
                out["label"].append(int(inside is not None))
                if not train:
                    out["example"].append(example)
                    out["context_start"].append(first)
                    out["offset_start"].append([o[0] for o in offsets[s:s + len(piece)]])
                    out["offset_end"].append([o[1] for o in offsets[s:s + len(piece)]])
            outside += bool(answers) and not found
        return Features(_columns(out, train), examples=len(rows), overlong=long_questions,
                        notes={"windows": len(out["input_ids"]),
                               "examples_with_several_windows": windows_of_long,
                               "answers_outside_every_window": outside},
                        reference=None if train else [
                            {"id": qid, "context": ctx, "answers": [a[0] for a in ans]}
                            for qid, ctx, ans in zip(rows.columns["id"], rows.columns["context"],
                                                     rows.columns["answers"], strict=True)])

    @classmethod
    def describe_split(cls, spec: TaskSpec, split: str, overlong: int, notes: dict[str, int],
                       limit: int, dropped: bool) -> list[str]:
        # Contexts are windowed, never cut or dropped; only over-long questions lose tokens.
        lines = []
        if overlong:
            lines.append(f"{overlong} {split} questions cut to max_query_len="
                         f"{spec.max_query_len} tokens")
        several, outside = (notes.get("examples_with_several_windows", 0),
                            notes.get("answers_outside_every_window", 0))
        if several:
            lines.append(f"{split}: {notes.get('windows', 0)} windows of at most {limit} tokens "
                         f"(doc_stride {spec.doc_stride}); {several} contexts span several")
        if outside:
            effect = ("train as unanswerable" if split == "train"
                      else "cannot be found; raise max_seq_len or lower max_query_len")
            lines.append(f"{split}: {outside} answers lie outside every window and {effect}")
        return lines

    # ---- model -------------------------------------------------------------------------

    def forward(self, states: Encoded, batch: dict[str, Tensor]) -> Tensor:
        """Start and end logits [N, T, 2]; padding gets a large negative logit."""
        logits = self.project(states.hidden)
        return logits.masked_fill(~states.mask.bool().unsqueeze(-1), -1e4)

    def loss(self, outputs: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """The mean of the start and end cross-entropies, as BERT's and MT-DNN's code compute
        it. He et al. (2019) write the sum; the sum is twice this, which would act as a loss
        weight of 2 on every span-QA batch, so the code's convention keeps the weights that
        SIWLM and the sampling weights set comparable across task types."""
        start, end = outputs.unbind(-1)
        return (F.cross_entropy(start, batch["start"]) + F.cross_entropy(end, batch["end"])) / 2

    def predict(self, outputs: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """Per window, on the device: the n_best best start and end tokens of the whole window
        with their logits (as BERT's decoder picks them; `decode` drops those outside the
        context), and the null score: [N, 4 * n_best + 1]."""
        k = self.spec.n_best or 20
        start, end = outputs.float().unbind(-1)
        null = start[:, 0] + end[:, 0]
        picks = []
        for logits in (start, end):
            if logits.shape[1] < k:  # a short batch: fewer tokens than candidates
                logits = F.pad(logits, (0, k - logits.shape[1]), value=-torch.inf)
            values, index = logits.topk(k, dim=1)
            picks += [index.float(), values]
        return torch.cat([*picks, null.unsqueeze(1)], dim=1)

    def score(self, predictions: np.ndarray, references: np.ndarray,
              split: EvalSplit) -> dict[str, float]:
        answers, odds = self.decode(predictions, split)
        reference = split.reference or []
        qids = [r["id"] for r in reference]
        preds = [answers[i] if odds[i] <= 0 else "" for i in range(len(reference))]
        metrics = squad_metrics([r["answers"] for r in reference], preds, odds)
        if split.output_dir is not None:
            tag = self.spec.name if split.first else f"{self.spec.name}-{split.name}"
            write_json(split.output_dir / f"predictions-{tag}-epoch-{split.epoch}.json",
                       dict(zip(qids, preds, strict=True)))
            write_json(split.output_dir / f"null-odds-{tag}-epoch-{split.epoch}.json",
                       {q: float(o) for q, o in zip(qids, odds, strict=True)})
        return {m: metrics[m] for m in self.spec.metrics}

    def decode(self, predictions: np.ndarray, split: EvalSplit) -> tuple[list[str], np.ndarray]:
        """Each question's best non-null answer text and its null odds (null - best span), as
        BERT's SQuAD decoder finds them: of each window's n_best starts and ends, a span counts
        when both lie in the context, the start's window is the one where that token has the
        most context (`max_context`), the end is not before the start and the span is at most
        max_answer_len tokens; the null score is the lowest over the windows."""
        k = self.spec.n_best or 20
        max_answer = self.spec.max_answer_len or 30
        table = split.dataset.with_format("arrow")[split.rows.tolist()]
        example = table.column("example").to_numpy()
        first = table.column("context_start").to_numpy()
        starts = _ragged(table.column("offset_start"))
        ends = _ragged(table.column("offset_end"))
        central = max_context(example, starts)
        n = len(split.reference or [])
        best = np.full(n, -np.inf)
        text = [""] * n
        null = np.full(n, np.inf)
        for row in range(len(predictions)):
            q = int(example[row])
            p = predictions[row]
            null[q] = min(null[q], p[4 * k])
            size = len(starts[row])
            s_at = p[:k].astype(np.int64) - first[row]  # positions in the context
            e_at = p[2 * k:3 * k].astype(np.int64) - first[row]
            s_ok = (s_at >= 0) & (s_at < size)
            s_ok[s_ok] &= central[row][s_at[s_ok]]
            e_ok = (e_at >= 0) & (e_at < size)
            score = p[k:2 * k][:, None] + p[3 * k:4 * k][None, :]
            length = e_at[None, :] - s_at[:, None] + 1
            score[~s_ok[:, None] | ~e_ok[None, :] | (length < 1) | (length > max_answer)
                  | ~np.isfinite(score)] = -np.inf
            top = np.unravel_index(int(np.argmax(score)), score.shape)
            if score[top] > best[q]:
                best[q] = score[top]
                lo, hi = s_at[top[0]], e_at[top[1]]
                context = split.reference[q]["context"]  # type: ignore[index]
                text[q] = context[starts[row][lo]:ends[row][hi]]
        odds = np.where(np.isfinite(best), null - best, _NO_SPAN)
        return text, odds

    soft_loss = refuse_soft_targets("span_qa")

    def smoothness(self, a: Tensor, b: Tensor) -> Tensor:
        """Symmetric KL of the start and of the end distributions."""
        return sum((symmetric_kl(x, y) for x, y in zip(a.unbind(-1), b.unbind(-1), strict=True)),
                   start=a.new_zeros(()))


HEAD = SpanQAHead


# ---- the official SQuAD 2.0 metrics ------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, punctuation removed, articles removed, whitespace collapsed."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(gold: str, pred: str) -> float:
    return float(normalize_answer(gold) == normalize_answer(pred))


def token_f1(gold: str, pred: str) -> float:
    gold_tokens, pred_tokens = normalize_answer(gold).split(), normalize_answer(pred).split()
    if not gold_tokens or not pred_tokens:  # a no-answer gold or prediction: all or nothing
        return float(gold_tokens == pred_tokens)
    same = sum((collections.Counter(gold_tokens) & collections.Counter(pred_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_metrics(golds: list[list[str]], preds: list[str],
                  odds: np.ndarray) -> dict[str, float]:
    """Exact match and F1 of the predictions (fractions), overall, on answerable (has_ans) and
    unanswerable (no_ans) questions, and the best of each over every null threshold on `odds`
    (with the threshold). A question's gold answers: its non-empty ones, else [""]."""
    has_answer = np.array([bool(g) for g in golds])  # as given, before normalising
    golds = [[a for a in g if normalize_answer(a)] or [""] for g in golds]
    exact = np.array([max(exact_match(a, p) for a in g) for g, p in zip(golds, preds,
                                                                         strict=True)])
    f1 = np.array([max(token_f1(a, p) for a in g) for g, p in zip(golds, preds, strict=True)])
    out = {"exact": _mean(exact), "f1": _mean(f1),
           "has_ans_exact": _mean(exact[has_answer]), "has_ans_f1": _mean(f1[has_answer]),
           "no_ans_exact": _mean(exact[~has_answer]), "no_ans_f1": _mean(f1[~has_answer])}
    answered = np.array([bool(p) for p in preds])
    for name, raw in (("exact", exact), ("f1", f1)):
        out[f"best_{name}"], out[f"best_{name}_thresh"] = best_threshold(
            raw, np.asarray(odds, dtype=np.float64), has_answer, answered)
    return out


def best_threshold(raw: np.ndarray, odds: np.ndarray, has_answer: np.ndarray,
                   answered: np.ndarray) -> tuple[float, float]:
    """The best score over null thresholds, as the official evaluation searches it: start from
    predicting "no answer" everywhere, then answer the questions in increasing order of their
    null odds; a threshold at a question's odds answers it and every question before it."""
    if len(raw) == 0:
        return 0.0, 0.0
    gain = np.where(has_answer, raw, np.where(answered, -1.0, 0.0))
    order = np.argsort(odds, kind="stable")
    running = (~has_answer).sum() + np.cumsum(gain[order])
    best = int(np.argmax(running))  # the first maximum, as the official loop keeps it
    if running[best] <= (~has_answer).sum():
        return float((~has_answer).sum() / len(raw)), 0.0
    return float(running[best] / len(raw)), float(odds[order[best]])


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else 0.0


# ---- helpers ---------------------------------------------------------------------------

class _Layout:
    """Where a tokenizer's special tokens go around (question, context): read off the
    tokenizer's own encoding of a short pair, so BERT-, RoBERTa- and other layouts all work."""

    def __init__(self, tokenizer: Any) -> None:
        pair = tokenizer("question", "context", return_token_type_ids=True)
        ids, types, which = pair["input_ids"], pair["token_type_ids"], pair.sequence_ids(0)
        q_first, q_last = which.index(0), len(which) - 1 - which[::-1].index(0)
        c_first, c_last = which.index(1), len(which) - 1 - which[::-1].index(1)
        self.before, self.middle = ids[:q_first], ids[q_last + 1:c_first]
        self.after = ids[c_last + 1:]
        self.before_question, self.between, self.after_n = (
            len(self.before), len(self.middle), len(self.after))
        self.specials = self.before_question + self.between + self.after_n
        self.types = (types[0], types[c_first])


def _window_starts(n_tokens: int, budget: int, stride: int) -> list[int]:
    """Start tokens of the windows over a context of n_tokens, `stride` apart, until one
    reaches the end (BERT's rule); one window for a context that fits."""
    if budget < 1:
        raise DataError("a span_qa window holds no context tokens: max_seq_len is too small for "
                        "the question; raise max_seq_len or lower max_query_len")
    starts = [0]
    while starts[-1] + budget < n_tokens:
        starts.append(starts[-1] + min(stride, budget))
    return starts


def _token_span(offsets: list[tuple[int, int]], answer: tuple[str, int]) -> tuple[int, int] | None:
    """First and last context token of the answer's characters (None: no token covers it)."""
    text, start = answer
    end = start + len(text)
    covered = [i for i, (a, b) in enumerate(offsets) if b > start and a < end and b > a]
    return (covered[0], covered[-1]) if covered else None


def _columns(out: dict[str, list[Any]], train: bool) -> dict[str, pa.Array]:
    lengths = np.fromiter((len(x) for x in out["input_ids"]), dtype=np.int32,
                          count=len(out["input_ids"]))
    columns: dict[str, pa.Array] = {
        "input_ids": list_array(out["input_ids"], lengths, pa.int32()),
        "token_type_ids": list_array(out["token_type_ids"], lengths, pa.int8()),
        "length": pa.array(lengths),
        "label": pa.array(np.asarray(out["label"], dtype=np.int64)),
        "start": pa.array(np.asarray(out["start"], dtype=np.int64)),
        "end": pa.array(np.asarray(out["end"], dtype=np.int64)),
    }
    if not train:
        spans = np.fromiter((len(x) for x in out["offset_start"]), dtype=np.int32,
                            count=len(out["offset_start"]))
        first = np.asarray(out["context_start"], dtype=np.int64)
        columns.update({
            "example": pa.array(np.asarray(out["example"], dtype=np.int64)),
            "context_start": pa.array(first),
            "context_end": pa.array(first + spans),
            "offset_start": list_array(out["offset_start"], spans, pa.int32()),
            "offset_end": list_array(out["offset_end"], spans, pa.int32()),
        })
    return columns


def max_context(example: np.ndarray, starts: list[np.ndarray]) -> list[np.ndarray]:
    """Per window, whether each context token has its most context there (BERT's
    `_check_is_max_context`): a token in several windows belongs to the one where
    min(tokens left of it, tokens right of it) + 0.01 * the window's context length is largest,
    the earlier window on a tie. Windows of one question are recognised by their example id
    and their tokens across windows by their character offsets."""
    out = [np.zeros(len(s), dtype=bool) for s in starts]
    rows: dict[int, list[int]] = {}
    for row, q in enumerate(example):
        rows.setdefault(int(q), []).append(row)
    for members in rows.values():
        tokens = np.unique(np.concatenate([starts[r] for r in members]))
        best = np.full(len(tokens), -np.inf)
        owner = np.full(len(tokens), -1)
        for r in members:  # in window order: a later window must do strictly better
            size = len(starts[r])
            at = np.arange(size)
            score = np.minimum(at, size - 1 - at) + 0.01 * size
            ids = np.searchsorted(tokens, starts[r])
            better = score > best[ids]
            best[ids[better]], owner[ids[better]] = score[better], r
        for r in members:
            out[r] = owner[np.searchsorted(tokens, starts[r])] == r
    return out


def _ragged(column: pa.ChunkedArray) -> list[np.ndarray]:
    array = column.combine_chunks()
    values = array.flatten().to_numpy(zero_copy_only=False)
    offsets = array.offsets.to_numpy()
    return [values[offsets[i]:offsets[i + 1]] for i in range(len(array))]


def write_json(path: Path, value: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, ensure_ascii=False))
    tmp.replace(path)
