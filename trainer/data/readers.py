"""Read task files into columns: delimited, JSON lines, Parquet and SQuAD JSON files, and the
column parsers the task types' heads build their rows from (texts, label indices, scores).

GLUE TSVs are read with CSV quoting off: their sentences contain stray `"` characters, and a
quoting reader silently merges rows (MRPC train then reads as 3570 rows instead of 3667).
`utf-8-sig` drops the BOM that starts MRPC's header. Every problem raises DataError naming
the file, the line or row, and the fix.
"""

from __future__ import annotations

import csv
import json
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from weightsearch.core.errors import DataError
from weightsearch.trainer.task_types import task_type
from weightsearch.trainer.tasks import TaskSpec


@dataclass
class Table:
    """A file's columns as lists of raw values; `where(i)` locates data row i for messages."""

    path: Path
    columns: dict[str, list[object]]
    where: Callable[[int], str]

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()), []))


@dataclass
class TaskRows:
    """The columns one task needs, validated: texts, labels, and group ids for ranking."""

    path: Path
    text_a: list[str]
    text_b: list[str] | None
    labels: np.ndarray  # int64 class index (classification, ranking) or float32 score
    groups: np.ndarray | None  # int64 ids, equal for the candidates of one ranking list

    def __len__(self) -> int:
        return len(self.text_a)

    def head(self, n: int | None) -> TaskRows:
        """The first n rows (all of them for None): deterministic example limits."""
        if n is None or n >= len(self):
            return self
        return TaskRows(self.path, self.text_a[:n], None if self.text_b is None else
                        self.text_b[:n], self.labels[:n],
                        None if self.groups is None else self.groups[:n])


    def take(self, index: np.ndarray) -> TaskRows:
        return TaskRows(self.path, [self.text_a[i] for i in index],
                        None if self.text_b is None else [self.text_b[i] for i in index],
                        self.labels[index], None if self.groups is None else self.groups[index])

    def sample(self, n: int, seed: int, nested: bool = False) -> TaskRows:
        """n rows drawn at random (seeded), kept in file order. Ranking lists stay whole: whole
        lists are drawn until n rows are reached, so a list is never cut. `nested`: the first n
        of one seeded permutation, so that with one seed a smaller sample is a subset of a
        larger one (a ladder of training sizes); otherwise numpy's draw without replacement,
        kept as it was so that existing studies train on the rows they trained on."""
        if n >= len(self):
            return self
        if self.groups is None:
            return self.take(np.sort(_draw(len(self), n, seed, nested)))
        rng = np.random.default_rng(seed)
        ids, inverse, counts = np.unique(self.groups, return_inverse=True, return_counts=True)
        order = rng.permutation(len(ids))
        within = np.cumsum(counts[order]) <= n
        within[0] = True  # at least one list, even one longer than n
        chosen = np.zeros(len(ids), dtype=bool)
        chosen[order[within]] = True
        return self.take(np.flatnonzero(chosen[inverse]))


def _draw(size: int, n: int, seed: int, nested: bool) -> np.ndarray:
    """n of range(size) at random: the first n of one seeded permutation (`nested`: the same
    seed gives a subset of every larger draw), or numpy's draw without replacement (the rows
    existing studies trained on)."""
    rng = np.random.default_rng(seed)
    if nested:
        return rng.permutation(size)[:n]
    return rng.choice(size, size=n, replace=False)


def resolve_path(data_dir: str | Path | None, path: str) -> Path:
    """A task path is relative to data_dir unless it is absolute."""
    p = Path(path).expanduser()
    if p.is_absolute() or data_dir is None:
        return p
    return Path(data_dir).expanduser() / p


@dataclass
class ColumnRows:
    """Rows of any shape as named columns of equal length (lists or arrays): the rows of the
    task types whose examples are more than a text pair, such as multiple choice or span QA."""

    path: Path
    columns: dict[str, Any]

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()), []))

    def head(self, n: int | None) -> ColumnRows:
        if n is None or n >= len(self):
            return self
        return self.take(np.arange(n))

    def take(self, index: np.ndarray) -> ColumnRows:
        return ColumnRows(self.path, {
            name: values[index] if isinstance(values, np.ndarray) else [values[i] for i in index]
            for name, values in self.columns.items()})

    def sample(self, n: int, seed: int, nested: bool = False) -> ColumnRows:
        """n rows drawn at random (seeded), kept in file order; `nested` as for TaskRows."""
        if n >= len(self):
            return self
        return self.take(np.sort(_draw(len(self), n, seed, nested)))


def read_task_table(spec: TaskSpec, path: Path) -> Table:
    """The task's file as a table, with every column the task names present (no torch)."""
    table = read_table(path, spec.format, spec.header)
    if len(table) == 0:
        raise DataError(f"{path}: no data rows (task '{spec.name}'); the file is empty or holds "
                        "only a header. Point the task at a file with examples")
    needed = [c for c in (spec.text_a, spec.text_b, spec.label, spec.group, *(spec.choices or ()))
              if c is not None]
    missing = [c for c in needed if c not in table.columns]
    if missing:
        found = ", ".join(repr(c) for c in table.columns)
        hint = ("columns are numbered from 0 because the task says header: false"
                if not spec.header else "set the task's text_a/text_b/label/group/choices to "
                                        "these names")
        raise DataError(f"{path}: column(s) {', '.join(map(repr, missing))} not found for task "
                        f"'{spec.name}'; the file has {found} ({hint}){bom_note(table.columns)}")
    return table


def bom_note(columns: Iterable[object]) -> str:
    """What to say when a header name holds a byte-order mark (U+FEFF): invisible in editors,
    it makes 'label' read as '\ufefflabel'. Empty when none does."""
    marked = [str(c) for c in columns if "\ufeff" in str(c)]
    if not marked:
        return ""
    return (f"; the header name {marked[0].replace(chr(0xFEFF), '')!r} holds a byte-order mark "
            "(U+FEFF, e.g. a file saved twice with a BOM): re-save the file as UTF-8 without "
            "a BOM")


def count_examples(spec: TaskSpec, path: Path) -> int:
    """Examples in one of the task's files (rows; questions of a SQuAD file), without torch."""
    return len(read_task_table(spec, path))


def pair_rows(spec: TaskSpec, table: Table) -> TaskRows:
    """The rows of a sentence(-pair) task: texts, labels parsed for the task's type, and the
    ranking groups."""
    text_a = texts(table, spec.text_a)
    text_b = texts(table, spec.text_b) if spec.text_b is not None else None
    labels = (scores(table, spec) if task_type(spec.type).label_kind == "score"
              else class_indices(table, spec))
    groups = _group_ids(table, spec.group) if spec.group is not None else None
    return TaskRows(table.path, text_a, text_b, labels, groups)


def read_table(path: Path, fmt: str, header: bool = True) -> Table:
    """Read a whole tsv/csv/jsonl/parquet file, or a SQuAD JSON file, into columns."""
    if not path.is_file():
        raise DataError(f"{path}: file not found; check data_dir and the task's "
                        "train_file/dev_files (relative paths start at data_dir)")
    if fmt in ("tsv", "csv"):
        return _read_delimited(path, fmt, header)
    if fmt in ("jsonl", "parquet"):
        return _read_with_datasets(path, fmt)
    if fmt == "squad":
        return _read_squad(path)
    raise DataError(f"{path}: unknown format {fmt!r}; use tsv, csv, jsonl, parquet or squad")


SQUAD_COLUMNS = ("id", "title", "context", "question", "answers", "is_impossible")


def _read_squad(path: Path) -> Table:
    """The official SQuAD (1.1 or 2.0) JSON layout, one row per question: its id, the article
    title, the paragraph's context, the question, its answers ({text, answer_start} each) and
    whether it is unanswerable. Structure is checked here; the answers by the span_qa head."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not valid UTF-8 ({err}); re-save the file as UTF-8") from err
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: not valid JSON ({err}); a SQuAD file is one JSON document "
                        "with a top-level 'data' list") from err
    articles = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(articles, list):
        raise DataError(f"{path}: no top-level 'data' list; this is not a SQuAD file (for JSON "
                        "lines set the task's format: jsonl)")
    columns: dict[str, list[object]] = {name: [] for name in SQUAD_COLUMNS}
    where: list[str] = []
    for a, article in enumerate(articles):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise DataError(f"{path}: data[{a}] has no 'paragraphs' list; fix the file")
        for p, paragraph in enumerate(paragraphs):
            here = f"data[{a}].paragraphs[{p}]"
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
                raise DataError(f"{path}, {here}: no 'qas' list; fix the file")
            context = paragraph.get("context")
            for q, qa in enumerate(paragraph["qas"]):
                if not isinstance(qa, dict):
                    raise DataError(f"{path}, {here}.qas[{q}]: not an object; fix the file")
                columns["id"].append(qa.get("id"))
                columns["title"].append(article.get("title", ""))
                columns["context"].append(context)
                columns["question"].append(qa.get("question"))
                columns["answers"].append(qa.get("answers"))
                columns["is_impossible"].append(qa.get("is_impossible", False))
                where.append(f"question {qa.get('id', f'{here}.qas[{q}]')!r}")
    return Table(path, columns, lambda i: where[i])


def _read_delimited(path: Path, fmt: str, header: bool) -> Table:
    # TSV: no quoting at all (GLUE); CSV: standard quoting, since CSV writers quote commas.
    options: dict[str, object] = (
        {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if fmt == "tsv" else {"delimiter": ","})
    rows: list[list[str]] = []
    lines: list[int] = []
    names: list[str] | None = None
    try:
        with path.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f, **options)  # type: ignore[arg-type]
            for row in reader:
                if not row:  # blank line, e.g. a trailing one
                    continue
                if names is None:
                    names = row if header else [str(i) for i in range(len(row))]
                    if header:
                        continue
                if len(row) != len(names):
                    what = "the header" if header else "the first row"
                    raise DataError(
                        f"{path}, line {reader.line_num}: {len(row)} columns where {what} has "
                        f"{len(names)}; fix or remove that line (a tab or newline inside a text, "
                        "or a missing field)")
                rows.append(row)
                lines.append(reader.line_num)
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not valid UTF-8 ({err}); re-save the file as UTF-8") from err
    except csv.Error as err:
        raise DataError(f"{path}: cannot parse as {fmt} ({err}); check the file's format") from err
    names = names or []
    transposed = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    columns: dict[str, list[object]] = {n: list(c) for n, c in zip(names, transposed, strict=True)}
    return Table(path, columns, lambda i: f"line {lines[i]}")


def _read_with_datasets(path: Path, fmt: str) -> Table:
    import datasets  # heavy import, only for the formats that need it

    datasets.disable_progress_bars()
    # A private builder cache: nothing left behind in ~/.cache, and no stale cache either.
    with tempfile.TemporaryDirectory(prefix="weightsearch-read-") as tmp:
        try:
            if fmt == "jsonl":
                ds = datasets.Dataset.from_json(str(path), cache_dir=tmp, keep_in_memory=True)
            else:
                ds = datasets.Dataset.from_parquet(str(path), cache_dir=tmp, keep_in_memory=True)
        except Exception as err:  # the builder wraps the parser's error; show the parser's
            cause = err.__cause__ or err
            raise DataError(f"{path}: cannot read as {fmt} ({cause}); check the file") from err
        columns = ds.to_dict() if len(ds) else {c: [] for c in ds.column_names}
    return Table(path, columns, lambda i: f"row {i + 1}")


def texts(table: Table, column: str, allow_empty: bool = True) -> list[str]:
    """A text column; a null (or, with allow_empty=False, an empty) value is an error."""
    values = table.columns[column]
    out: list[str] = []
    for i, v in enumerate(values):
        text = None if v is None else v if isinstance(v, str) else str(v)
        if text is None or (not allow_empty and not text.strip()):
            raise DataError(f"{table.path}, {table.where(i)}: column '{column}' is empty; "
                            "give every example a text or drop that row")
        out.append(text)
    return out


def scores(table: Table, spec: TaskSpec) -> np.ndarray:
    """Regression targets: finite numbers."""
    values = table.columns[spec.label]
    out = np.empty(len(values), dtype=np.float32)
    for i, v in enumerate(values):
        try:
            out[i] = float(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise DataError(
                f"{table.path}, {table.where(i)}: regression target {v!r} in column "
                f"'{spec.label}' is not a number; fix the value or the task's label "
                "column") from None
        if not np.isfinite(out[i]):
            raise DataError(f"{table.path}, {table.where(i)}: regression target {v!r} "
                            "is not finite; fix the value")
    return out


def class_indices(table: Table, spec: TaskSpec) -> np.ndarray:
    """Each row's label as its index in the task's label set."""
    values = table.columns[spec.label]
    allowed = spec.labels or ()
    index = {label: i for i, label in enumerate(allowed)}
    out = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        key = v.strip() if isinstance(v, str) else str(v)
        found = index.get(key)
        if found is None:
            bad = sum(1 for w in values if (w.strip() if isinstance(w, str) else str(w))
                      not in index)
            raise DataError(
                f"{table.path}, {table.where(i)}: label {v!r} in column '{spec.label}' is not "
                f"in task '{spec.name}''s label set {list(allowed)} ({bad} row(s) affected); "
                "fix the data, or the task's labels/label column")
        out[i] = found
    return out


def _group_ids(table: Table, column: str) -> np.ndarray:
    ids: dict[object, int] = {}
    return np.fromiter((ids.setdefault(v, len(ids)) for v in table.columns[column]),
                       dtype=np.int64, count=len(table))
