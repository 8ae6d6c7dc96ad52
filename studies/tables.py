"""Read small tabular files (CSV, TSV, JSONL, Parquet) for `import` and `recommend --data`."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from weightsearch.core.errors import DataError

FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}


def table_format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise DataError(
            f"{path}: unknown file type {path.suffix or '(none)'!r}; use one of "
            f"{', '.join(sorted(FORMATS))}"
        )
    return fmt


def read_frame(path: str | Path, as_text: bool = False):
    """A pandas DataFrame of the file. TSV is read with quoting off, as GLUE files need.

    `as_text`: keep every cell as a string (empty cells as ""), so the caller can validate
    numbers itself and name the offending line.
    """
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    fmt = table_format(path)
    if as_text and fmt == "jsonl":
        return read_jsonl_text(path)
    if as_text and fmt in ("csv", "tsv"):
        _refuse_repeated_columns(path, "," if fmt == "csv" else "\t")
    dtype = str if as_text else None
    try:
        if fmt in ("csv", "tsv"):
            df = pd.read_csv(
                path, sep="," if fmt == "csv" else "\t", dtype=dtype, keep_default_na=not as_text,
                quoting=csv.QUOTE_NONE if fmt == "tsv" else csv.QUOTE_MINIMAL,
                encoding="utf-8-sig",  # GLUE's MRPC starts with a BOM
            )
        elif fmt == "jsonl":
            df = pd.read_json(path, lines=True, dtype=not as_text)
            if as_text:
                df = df.astype(object).where(df.notna(), "").astype(str)
        else:
            df = pd.read_parquet(path)
            if as_text:
                df = df.astype(object).where(df.notna(), "").astype(str)
    except (ValueError, OSError, pd.errors.ParserError, ImportError) as exc:
        raise DataError(f"{path}: cannot read it as {fmt}: {exc}") from None
    df.columns = [str(c).strip() for c in df.columns]
    return df


def _refuse_repeated_columns(path: Path, sep: str) -> None:
    """A header naming a column twice: pandas would rename the second (`metric.1`) and keep
    both, so which one holds the value would be a guess."""
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            header = next(csv.reader(handle, delimiter=sep), [])
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{path}: cannot read its header: {exc}") from None
    names = [name.strip() for name in header]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise DataError(f"{path}: line 1 names the column(s) {', '.join(repeated)} more than "
                        "once; keep one of each and run it again")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object_pairs_hook: an object that gives a key twice is refused (json.loads
    would keep the last one silently)."""
    out: dict[str, Any] = {}
    for raw, value in pairs:
        key = str(raw).strip()  # as the columns of a table are named
        if key in out:
            raise _RepeatedKey(key)
        out[key] = value
    return out


class _RepeatedKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _as_cell(value: Any) -> str:
    """A JSON value as the text cell a CSV would hold: numbers as written (an int exactly,
    however large), null as blank."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value) if not isinstance(value, float) else repr(value)
    return json.dumps(value)


def read_jsonl_text(path: Path):
    """A JSONL file as a DataFrame of text cells (see `read_frame`), each line an object whose
    keys appear once; blank lines are skipped, and `attrs["lines"]` holds each row's line
    number and `attrs["nested"]` each row's columns whose value was a JSON object or list
    (kept as its JSON text, which no declared column takes)."""
    import pandas as pd

    records, lines, nested = [], [], []
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read it as jsonl: {exc}") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line, object_pairs_hook=_unique_keys)
        except _RepeatedKey as exc:
            raise DataError(f"{path}: line {number} gives the key {exc.key!r} more than once; "
                            "keep one (which one holds the value would be a guess)") from None
        except ValueError as exc:
            raise DataError(f"{path}: line {number} is not JSON ({exc})") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}: line {number} is not a JSON object; write one object "
                            "({\"column\": value, ...}) per line")
        records.append({k: _as_cell(v) for k, v in record.items()})
        lines.append(number)
        nested.append({k for k, v in record.items() if isinstance(v, dict | list)})
    df = pd.DataFrame.from_records(records).fillna("").astype(str) if records \
        else pd.DataFrame()
    df.attrs["lines"] = lines
    df.attrs["nested"] = nested
    return df


def count_rows(path: str | Path) -> int:
    """Data rows of a file (the header of a CSV/TSV is not counted).

    Parquet: read from the file footer without loading the data.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if table_format(path) == "parquet":
        try:
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(path).metadata.num_rows)
        except (OSError, ImportError, ValueError) as exc:
            raise DataError(f"{path}: cannot read it as parquet: {exc}") from None
    return len(read_frame(path))


def count_preset_rows(spec, data_dir: str | Path) -> int:
    """Training examples of a task preset's train file (rows; questions of a SQuAD file), read
    as the trainer reads it, through `weightsearch.trainer.data.readers` (numpy only): the task
    types' heads would import torch, seconds of start-up for a count."""
    from weightsearch.trainer.data.readers import count_examples, resolve_path

    return count_examples(spec, resolve_path(data_dir, spec.train_file))
