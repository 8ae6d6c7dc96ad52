"""Read one task file into validated columns: texts, label indices (or scores), group ids.

GLUE TSVs are read with CSV quoting off: their sentences contain stray `"` characters, and a
quoting reader silently merges rows (MRPC train then reads as 3570 rows instead of 3667).
`utf-8-sig` drops the BOM that starts MRPC's header. Every problem raises DataError naming
the file, the line or row, and the fix.
"""

from __future__ import annotations

import csv
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainer.tasks import TaskSpec
from weightsearch.errors import DataError


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

    def sample(self, n: int, seed: int) -> TaskRows:
        """n rows drawn at random (seeded), kept in file order. Ranking lists stay whole: whole
        lists are drawn until n rows are reached, so a list is never cut."""
        if n >= len(self):
            return self
        rng = np.random.default_rng(seed)
        if self.groups is None:
            return self.take(np.sort(rng.choice(len(self), size=n, replace=False)))
        ids, inverse, counts = np.unique(self.groups, return_inverse=True, return_counts=True)
        order = rng.permutation(len(ids))
        within = np.cumsum(counts[order]) <= n
        within[0] = True  # at least one list, even one longer than n
        chosen = np.zeros(len(ids), dtype=bool)
        chosen[order[within]] = True
        return self.take(np.flatnonzero(chosen[inverse]))


def resolve_path(data_dir: str | Path | None, path: str) -> Path:
    """A task path is relative to data_dir unless it is absolute."""
    p = Path(path).expanduser()
    if p.is_absolute() or data_dir is None:
        return p
    return Path(data_dir).expanduser() / p


def read_task_file(spec: TaskSpec, path: Path) -> TaskRows:
    """Read and validate one of the task's files against its column mapping and label set."""
    table = read_table(path, spec.format, spec.header)
    if len(table) == 0:
        raise DataError(f"{path}: no data rows (task '{spec.name}'); the file is empty or holds "
                        "only a header. Point the task at a file with examples")
    needed = [c for c in (spec.text_a, spec.text_b, spec.label, spec.group) if c is not None]
    missing = [c for c in needed if c not in table.columns]
    if missing:
        found = ", ".join(repr(c) for c in table.columns)
        hint = ("columns are numbered from 0 because the task says header: false"
                if not spec.header else "set the task's text_a/text_b/label/group to these names")
        raise DataError(f"{path}: column(s) {', '.join(map(repr, missing))} not found for task "
                        f"'{spec.name}'; the file has {found} ({hint})")
    text_a = _texts(table, spec.text_a)
    text_b = _texts(table, spec.text_b) if spec.text_b is not None else None
    labels = _labels(table, spec)
    groups = _group_ids(table, spec.group) if spec.group is not None else None
    return TaskRows(path, text_a, text_b, labels, groups)


def read_table(path: Path, fmt: str, header: bool = True) -> Table:
    """Read a whole tsv/csv/jsonl/parquet file into columns."""
    if not path.is_file():
        raise DataError(f"{path}: file not found; check data_dir and the task's "
                        "train_file/dev_files (relative paths start at data_dir)")
    if fmt in ("tsv", "csv"):
        return _read_delimited(path, fmt, header)
    if fmt in ("jsonl", "parquet"):
        return _read_with_datasets(path, fmt)
    raise DataError(f"{path}: unknown format {fmt!r}; use tsv, csv, jsonl or parquet")


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


def _texts(table: Table, column: str) -> list[str]:
    values = table.columns[column]
    out: list[str] = []
    for i, v in enumerate(values):
        if v is None:
            raise DataError(f"{table.path}, {table.where(i)}: column '{column}' is empty (null); "
                            "give every example a text or drop that row")
        out.append(v if isinstance(v, str) else str(v))
    return out


def _labels(table: Table, spec: TaskSpec) -> np.ndarray:
    values = table.columns[spec.label]
    if spec.type == "regression":
        scores = np.empty(len(values), dtype=np.float32)
        for i, v in enumerate(values):
            try:
                scores[i] = float(v)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise DataError(
                    f"{table.path}, {table.where(i)}: regression target {v!r} in column "
                    f"'{spec.label}' is not a number; fix the value or the task's label "
                    "column") from None
            if not np.isfinite(scores[i]):
                raise DataError(f"{table.path}, {table.where(i)}: regression target {v!r} "
                                "is not finite; fix the value")
        return scores
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
