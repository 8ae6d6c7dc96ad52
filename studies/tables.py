"""Read small tabular files (CSV, TSV, JSONL, Parquet) for `import` and `recommend --data`."""

from __future__ import annotations

import csv
from pathlib import Path

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
