"""An import file's rows are checked cell by cell against the declared columns, every problem
of every row listed at once, before anything is written."""

from __future__ import annotations

import pytest

from weightsearch.core.errors import DataError
from weightsearch.studies.import_columns import OPTIONAL, REQUIRED
from weightsearch.studies.import_rows import parse_rows
from weightsearch.trainer.task_types import TaskType, register_task_type, unregister_task_type

HEADER = "central_task,task_type,train_size,central_weight,seed,metric,stage\n"


def _problems(tmp_path, body: str) -> list[str]:
    f = tmp_path / "rows.csv"
    f.write_text(HEADER + body)
    with pytest.raises(DataError) as err:
        parse_rows(f)
    return [line.removeprefix("  - ") for line in str(err.value).splitlines()[1:]]


def test_the_declared_columns_are_the_file_format():
    assert REQUIRED == ("central_task", "task_type", "train_size", "central_weight", "seed",
                        "metric")
    assert OPTIONAL == ("metric_name", "encoder", "stage", "variant", "dataset", "grad_clip",
                        "grad_clip_mode", "clip_share", "central_norm", "saturates_in_focus",
                        "saturates_off_focus", "weight_acts_on")


def test_every_cell_of_every_row_is_reported_at_once_in_column_order(tmp_path):
    found = _problems(tmp_path, "a/b,Classification,-3,abc,1.5,,pretrained\n"
                                "rte,classification,2490,20,0,70,\n"
                                "rte,classification,2490,1,0,70,\n"
                                "rte,classification,2490,1,0,71,\n"
                                "rte,regression,2490,2,0,71,\n")
    assert found == [
        "line 2: central_task 'a/b' must be a non-empty name without '/'",
        "line 2: task_type 'Classification' is not one of classification, regression, ranking, "
        "multiple_choice, span_qa",
        "line 2: train_size '-3' is not a positive whole number",
        "line 2: central_weight 'abc' is not a number",
        "line 2: seed '1.5' is not a whole number",
        "line 2: metric '' is not a number",
        "line 2: stage 'pretrained' is not one of multitask, finetuned",
        "line 3: central_weight 20 is outside 1..15",
        "line 5: duplicate of line 4 (central_task rte, central_weight 1, seed 0)",
        "line 6: task rte: task_type regression differs from line 4 (classification); one task "
        "has one of each",
    ]


def test_a_task_type_registered_after_import_is_accepted(tmp_path):
    f = tmp_path / "rows.csv"
    f.write_text(HEADER + "rte,late_kind,2490,9,0,70,finetuned\n")
    with pytest.raises(DataError, match="task_type 'late_kind' is not one of"):
        parse_rows(f)
    register_task_type(TaskType("late_kind", __name__, "score", ("corr",), ("corr",), "corr"))
    try:
        (row,) = parse_rows(f)
    finally:
        unregister_task_type("late_kind")
    assert (row.task_type, row.weight, row.seed, row.regime) == \
        ("late_kind", 9.0, 0, {"stage": "finetuned"})


def test_a_task_mixing_fractions_and_percentages_is_refused_naming_both_lines(tmp_path):
    f = tmp_path / "rows.csv"
    f.write_text("central_task,task_type,train_size,central_weight,seed,metric,metric_name\n"
                 "rte,classification,2490,1,1,0.61,accuracy\n"
                 "rte,classification,2490,9,1,63,accuracy\n"
                 "mrpc,classification,3668,1,1,0.80,accuracy\n"
                 "mrpc,classification,3668,9,1,0.82,accuracy\n"
                 "cola,classification,8551,1,1,-0.5,mcc\n"
                 "cola,classification,8551,9,1,52,mcc\n"
                 "sst2,classification,67349,1,1,0.5,loss\n"
                 "sst2,classification,67349,9,1,3.5,loss\n")
    with pytest.raises(DataError) as err:
        parse_rows(f)
    found = [line.removeprefix("  - ") for line in str(err.value).splitlines()[1:]]
    assert found == [
        "line 3: task rte: accuracy 0.61 (line 2) reads as a fraction and 63 (line 3) as a "
        "percentage; give every row of a task on one scale (0..1 or 0..100)",
        "line 7: task cola: mcc -0.5 (line 6) reads as a fraction and 52 (line 7) as a "
        "percentage; give every row of a task on one scale (0..1 or 0..100)"]


def test_one_scale_per_task_may_differ_between_tasks(tmp_path):
    f = tmp_path / "rows.csv"
    f.write_text("central_task,task_type,train_size,central_weight,seed,metric,metric_name\n"
                 "rte,classification,2490,1,1,0.61,accuracy\n"
                 "mrpc,classification,3668,1,1,84.2,accuracy\n")
    assert [r.metric for r in parse_rows(f)] == [0.61, 84.2]
