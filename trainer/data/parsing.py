"""Reading a task file's table into checked rows, for the task types whose rows are not
sentence pairs: multiple choice and span QA. Without torch, so that a study's driver counts and
checks every task's training rows without loading the trainer
(`weightsearch.trainer.task_rows`); the heads' `parse` is these functions."""

from __future__ import annotations

import numpy as np

from weightsearch.core.errors import DataError
from weightsearch.trainer.data.readers import ColumnRows, Table, texts
from weightsearch.trainer.tasks import TaskSpec


def choice_rows(spec: TaskSpec, table: Table) -> ColumnRows:
    """Examples with their context and endings; the label must be a choice's index."""
    assert spec.choices is not None  # validated with the task definition
    n = len(spec.choices)
    lead = texts(table, spec.text_b) if spec.text_b is not None else None
    choices = [texts(table, column, allow_empty=False) for column in spec.choices]
    labels = np.empty(len(table), dtype=np.int64)
    for i, raw in enumerate(table.columns[spec.label]):
        text = raw.strip() if isinstance(raw, str) else raw
        try:
            value = int(text)  # type: ignore[call-overload]  # a cell of any type: caught below
        except (TypeError, ValueError):
            value = -1
        if isinstance(raw, bool) or not 0 <= value < n or str(value) != str(text):
            raise DataError(f"{table.path}, {table.where(i)}: label {raw!r} in column "
                            f"'{spec.label}' is not a choice index 0..{n - 1} (task "
                            f"'{spec.name}' has {n} choices); fix the value")
        labels[i] = value
    endings = [[c[i] if lead is None else f"{lead[i]} {c[i]}".strip() for c in choices]
               for i in range(len(table))]
    return ColumnRows(table.path, {"context": texts(table, spec.text_a), "endings": endings,
                                   "label": labels})


def span_qa_rows(spec: TaskSpec, table: Table) -> ColumnRows:
    """Questions with their context and answers; every answer must sit at its
    answer_start in the context."""
    assert spec.text_b is not None  # validated with the task definition
    if "id" not in table.columns:
        raise DataError(f"{table.path}: no 'id' column; a span_qa file names each question "
                        "with an id (the key of the prediction files)")
    questions = texts(table, spec.text_a, allow_empty=False)
    contexts = _contexts(table, spec.text_b)
    ids = [str(v) for v in table.columns["id"]]
    seen: dict[str, int] = {}
    for i, qid in enumerate(ids):
        if qid in seen:
            raise DataError(f"{table.path}, {table.where(i)}: id {qid!r} is used twice; "
                            "give every question its own id")
        seen[qid] = i
    impossible = table.columns.get("is_impossible", [False] * len(table))
    answers = [_answers(table, i, spec.label, contexts[i], bool(impossible[i]))
               for i in range(len(table))]
    return ColumnRows(table.path, {"id": ids, "question": questions, "context": contexts,
                                   "answers": answers})


def _contexts(table: Table, column: str) -> list[str]:
    out = []
    for i, value in enumerate(table.columns[column]):
        if not isinstance(value, str) or not value.strip():
            raise DataError(f"{table.path}, {table.where(i)}: the question has no context "
                            f"(column '{column}' is empty); give it its paragraph or drop it")
        out.append(value)
    return out


def _answers(table: Table, i: int, column: str, context: str,
             impossible: bool) -> list[tuple[str, int]]:
    """A question's answers as (text, answer_start), each checked against the context. Both
    the official layout (a list of {text, answer_start}) and the column layout of SQuAD's
    Hugging Face copy ({text: [...], answer_start: [...]}) are read."""
    raw = table.columns[column][i]
    where = f"{table.path}, {table.where(i)}"
    if raw is None:
        raw = []
    if isinstance(raw, dict):
        text, start = raw.get("text") or [], raw.get("answer_start") or []
        if len(text) != len(start):
            raise DataError(f"{where}: answers has {len(text)} texts but {len(start)} "
                            "answer_start values; give one start per text")
        raw = [{"text": t, "answer_start": s} for t, s in zip(text, start, strict=True)]
    if not isinstance(raw, list):
        raise DataError(f"{where}: answers must be a list of {{text, answer_start}}, got "
                        f"{type(raw).__name__}")
    if impossible and raw:
        raise DataError(f"{where}: the question is marked is_impossible but has answers; "
                        "remove its answers or the flag")
    out = []
    for answer in raw:
        text = answer.get("text") if isinstance(answer, dict) else None
        start = answer.get("answer_start") if isinstance(answer, dict) else None
        if not isinstance(text, str) or not text or isinstance(start, bool) or not isinstance(
                start, int):
            raise DataError(f"{where}: answer {answer!r} needs a non-empty text and an integer "
                            "answer_start")
        if context[start:start + len(text)] != text:
            found = context.find(text)
            hint = (f"the text occurs at {found}" if found >= 0
                    else "the text does not occur in the context")
            raise DataError(f"{where}: answer_start {start} does not point at the answer text "
                            f"{text!r} (the context there reads "
                            f"{context[start:start + len(text)]!r}; {hint}); fix answer_start")
        out.append((text, start))
    return out
