"""Readers on the real GLUE layouts, custom formats, and every DataError they promise."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from weightsearch.core.errors import DataError
from weightsearch.trainer.data.readers import resolve_path
from weightsearch.trainer.task_rows import read_task_file
from weightsearch.trainer.tasks import TASK_PRESETS, TaskSpec


def read(spec: TaskSpec, data_dir: Path, path: str | None = None):
    return read_task_file(spec, resolve_path(data_dir, path or spec.train_file))


def test_sample_layouts(sample_data_dir: Path) -> None:
    cola = read(TASK_PRESETS["cola"], sample_data_dir)  # no header: every line is data
    assert len(cola) == 300 and cola.text_b is None
    assert cola.text_a[0].startswith("Our friends won't buy this analysis")
    mrpc = read(TASK_PRESETS["mrpc"], sample_data_dir, "MRPC/dev.tsv")  # BOM header, stray quotes
    assert len(mrpc) == 100
    assert mrpc.text_b is not None and mrpc.text_b[0].startswith('" The foodservice pie')
    assert mrpc.labels.dtype == np.int64 and mrpc.labels[:3].tolist() == [1, 0, 0]
    stsb = read(TASK_PRESETS["stsb"], sample_data_dir, "STS-B/dev.tsv")
    assert len(stsb) == 400 and stsb.labels.dtype == np.float32
    assert stsb.labels[:2].tolist() == [5.0, 4.75]
    assert stsb.text_b is not None and '"u2"' in stsb.text_b[267]
    rte = read(TASK_PRESETS["rte"], sample_data_dir)
    assert len(rte) == 300 and set(rte.labels.tolist()) == {0, 1}
    assert len(read(TASK_PRESETS["sst2"], sample_data_dir)) == 300
    assert len(read(TASK_PRESETS["wnli"], sample_data_dir, "WNLI/dev.tsv")) == 71


@pytest.mark.parametrize("task,split,rows", [
    ("mrpc", "train", 3667), ("stsb", "train", 5749), ("cola", "train", 8551),
    ("stsb", "dev", 1500), ("mrpc", "dev", 408), ("cola", "dev", 1043),
])
def test_full_glue_counts(shared_glue_dir: Path, task: str, split: str, rows: int) -> None:
    spec = TASK_PRESETS[task]
    path = spec.train_file if split == "train" else spec.dev_files[0][1]
    assert len(read(spec, shared_glue_dir, path)) == rows


def test_ranking_groups(tmp_path: Path) -> None:
    (tmp_path / "q.tsv").write_text(
        "index\tquestion\tsentence\tlabel\n0\tq1\ta\tentailment\n1\tq1\tb\tnot_entailment\n"
        "2\tq2\tc\tentailment\n3\tq1\td\tnot_entailment\n")
    rows = read(TASK_PRESETS["qnlirank"], tmp_path, "q.tsv")
    assert rows.groups is not None and rows.groups.tolist() == [0, 0, 1, 0]
    assert rows.labels.tolist() == [1, 0, 1, 0]


def _rte_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "RTE" / "train.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("index\tsentence1\tsentence2\tlabel\n" + body)
    return path


def test_ragged_row_names_file_and_line(tmp_path: Path) -> None:
    _rte_file(tmp_path, "0\ta\tb\tentailment\n1\ta\tb\textra\tentailment\n")
    with pytest.raises(DataError, match=r"train\.tsv, line 3: 5 columns where the header has 4"):
        read(TASK_PRESETS["rte"], tmp_path)


def test_missing_column_lists_found_columns(tmp_path: Path) -> None:
    _rte_file(tmp_path, "0\ta\tb\tentailment\n")
    spec = dataclasses.replace(TASK_PRESETS["rte"], text_b="hypothesis")
    with pytest.raises(DataError, match=r"'hypothesis' not found.*'index', 'sentence1'"):
        read(spec, tmp_path)


def test_label_outside_set(tmp_path: Path) -> None:
    _rte_file(tmp_path, "0\ta\tb\tentailment\n1\ta\tb\tcontradiction\n")
    with pytest.raises(DataError, match=r"line 3: label 'contradiction'.*"
                                        r"\['not_entailment', 'entailment'\]"):
        read(TASK_PRESETS["rte"], tmp_path)


def test_non_numeric_regression_target(tmp_path: Path) -> None:
    spec = dataclasses.replace(TASK_PRESETS["rte"], type="regression", labels=None)
    _rte_file(tmp_path, "0\ta\tb\t0.5\n1\ta\tb\thigh\n")
    with pytest.raises(DataError, match=r"line 3: regression target 'high'.* not a number"):
        read(spec, tmp_path)


def test_empty_and_missing_files(tmp_path: Path) -> None:
    _rte_file(tmp_path, "")
    with pytest.raises(DataError, match="no data rows"):
        read(TASK_PRESETS["rte"], tmp_path)
    with pytest.raises(DataError, match="file not found"):
        read(TASK_PRESETS["mrpc"], tmp_path)


def _custom(fmt: str, **fields: object) -> TaskSpec:
    return TaskSpec(name="custom", type="classification", train_file=f"train.{fmt}",
                    dev_files=(("dev", f"train.{fmt}"),), format=fmt, text_a="text",
                    label="y", labels=("0", "1"), **fields)  # type: ignore[arg-type]


def test_custom_csv_with_quoting(tmp_path: Path) -> None:
    (tmp_path / "train.csv").write_text('text,y\n"hello, world",1\nplain,0\n')
    rows = read(_custom("csv"), tmp_path)
    assert rows.text_a == ["hello, world", "plain"] and rows.labels.tolist() == [1, 0]


def test_custom_jsonl_and_parquet(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [{"text": "good", "y": 1}, {"text": "bad", "y": 0}, {"text": "meh", "y": 0}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "train.parquet")
    for fmt in ("jsonl", "parquet"):
        rows = read(_custom(fmt), tmp_path)
        assert rows.text_a == ["good", "bad", "meh"] and rows.labels.tolist() == [1, 0, 0]
    (tmp_path / "train.jsonl").write_text('{"text": "good", "y": 2}\n')
    with pytest.raises(DataError, match=r"row 1: label 2 .*\['0', '1'\]"):
        read(_custom("jsonl"), tmp_path)
