"""Task presets and the validation of the YAML `tasks` list."""

from __future__ import annotations

import pytest

from weightsearch.trainer.task_parsing import parse_tasks
from weightsearch.trainer.tasks import METRICS, TASK_PRESETS, TASK_TYPES, preset_key


def parse(raw: object) -> tuple[tuple, list[str]]:
    problems: list[str] = []
    return parse_tasks(raw, problems), problems


def test_presets_are_consistent() -> None:
    assert set(TASK_PRESETS) == {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "qnlirank",
                            "rte", "wnli", "snli", "scitail", "squad2", "swag"}
    for name, spec in TASK_PRESETS.items():
        assert preset_key(spec.name) == name  # keys are spelt as lookups normalise them
        assert spec.type in TASK_TYPES
        assert spec.primary_metric in spec.metrics
        assert set(spec.metrics) <= set(METRICS)
    assert TASK_PRESETS["cola"].primary_metric == "mcc" and TASK_PRESETS["cola"].dropout == 0.05
    assert TASK_PRESETS["cola"].header is False and TASK_PRESETS["cola"].text_a == "3"
    assert TASK_PRESETS["stsb"].type == "regression" and TASK_PRESETS["stsb"].labels is None
    assert TASK_PRESETS["stsb"].primary_metric == "corr" and TASK_PRESETS["stsb"].num_labels == 1
    assert TASK_PRESETS["mnli"].num_labels == 3
    assert TASK_PRESETS["mnli"].dev_files == (("matched", "MNLI/dev_matched.tsv"),
                                         ("mismatched", "MNLI/dev_mismatched.tsv"))
    qnli, ranked = TASK_PRESETS["qnli"], TASK_PRESETS["qnlirank"]
    assert ranked.type == "ranking" and ranked.group == "question"
    assert qnli.labels is not None and qnli.labels[1] == "entailment"
    assert TASK_PRESETS["mrpc"].metrics == ("accuracy", "f1")
    assert TASK_PRESETS["snli"].label == "gold_label" and TASK_PRESETS["scitail"].header is False


@pytest.mark.parametrize("spelling,name", [("SST-2", "sst2"), ("STS-B", "stsb"), ("rte", "rte"),
                                           ("CoLA", "cola"), ("sts_b", "stsb")])
def test_preset_spellings(spelling: str, name: str) -> None:
    specs, problems = parse([spelling])
    assert problems == [] and specs == (TASK_PRESETS[name],)


def test_preset_with_overrides() -> None:
    specs, problems = parse([{"preset": "rte", "dropout": 0.2},
                             {"preset": "rte", "name": "rte_small", "train_file": "/x/t.tsv"},
                             {"preset": "mrpc", "metrics": ["f1"]}])
    assert problems == []
    assert specs[0].dropout == 0.2 and specs[0].labels == TASK_PRESETS["rte"].labels
    assert specs[1].name == "rte_small" and specs[1].train_file == "/x/t.tsv"
    assert specs[2].metrics == ("f1",) and specs[2].primary_metric == "f1"


def test_full_definition() -> None:
    specs, problems = parse([
        {"name": "Sentiment", "type": "classification", "train_file": "s/train.csv",
         "dev_files": "s/dev.csv", "text_a": "review", "label": "stars", "labels": [1, 2, 3]},
        {"name": "sim", "type": "regression", "train_file": "a.jsonl",
         "dev_files": {"test_a": "b.jsonl", "test_b": "c.jsonl"}, "text_a": "x", "text_b": "y",
         "label": "score"},
        {"name": "qa", "type": "ranking", "train_file": "q.parquet", "dev_files": "qd.parquet",
         "text_a": "q", "text_b": "a", "group": "q", "labels": ["no", "yes"]},
    ])
    assert problems == []
    s, r, q = specs
    assert s.name == "sentiment" and s.format == "csv" and s.labels == ("1", "2", "3")
    assert s.dev_files == (("dev", "s/dev.csv"),) and s.num_labels == 3
    assert r.format == "jsonl" and r.dev_splits == ("test_a", "test_b")
    assert r.metrics == ("pearson", "spearman", "corr") and r.primary_metric == "corr"
    assert q.format == "parquet" and q.num_labels == 1


def test_all_problems_reported_at_once() -> None:
    specs, problems = parse([
        "rtee",
        "rte",
        "RTE",
        {"name": "x", "type": "clasification", "train_file": "a.txt", "dev_files": 3,
         "metrics": ["acc"], "colour": "red"},
        {"name": "c", "type": "classification", "train_file": "a.tsv", "dev_files": "b.tsv",
         "primary_metric": "f1", "metrics": ["accuracy"]},
        {"name": "r", "type": "regression", "train_file": "a.tsv", "dev_files": "b.tsv",
         "metrics": ["accuracy"]},
        {"type": "classification"},
        {"preset": "nope"},
    ])
    assert specs == (TASK_PRESETS["rte"],)
    text = "\n".join(problems)
    expected = [
        "tasks[0]: unknown preset 'rtee'",
        "tasks[2].name: task name 'rte' is already used by tasks[1]",
        "tasks[3].colour: unknown key",
        "tasks[3].type: unknown task type 'clasification'",
        "tasks[3].dev_files:",
        "tasks[3].format: cannot tell the format",
        "tasks[3].metrics: unknown metric(s) 'acc'",
        "tasks[4].primary_metric: 'f1' is not in metrics",
        "tasks[4].labels: a classification task needs its label set",
        "tasks[5].metrics: accuracy cannot score a regression task",
        "tasks[6].name: missing",
        "tasks[6].train_file: missing",
        "tasks[7].preset: unknown preset 'nope'",
    ]
    for fragment in expected:
        assert fragment in text, f"{fragment!r} not in:\n{text}"


@pytest.mark.parametrize("item,fragment", [
    ({"preset": "stsb", "labels": ["a", "b"]}, "tasks[0].labels: a regression task has no label"),
    ({"preset": "rte", "group": "sentence1"}, "tasks[0].group: only ranking tasks use group"),
    ({"preset": "qnli_rank", "group": None}, "tasks[0].group: a ranking task needs"),
    ({"preset": "mnli", "metrics": ["accuracy", "f1"]}, "f1 is computed for binary tasks only"),
    ({"preset": "cola", "text_a": "sentence"}, "tasks[0].text_a: 'sentence' is not a column index"),
    ({"preset": "rte", "dropout": 1.5}, "tasks[0].dropout: must be a number in [0, 1)"),
    ({"preset": "rte", "labels": ["a", "a"]}, "tasks[0].labels: must be a list of distinct"),
    ({"preset": "rte", "format": "xml"}, "tasks[0].format: unknown format 'xml'"),
    ({"preset": "rte", "header": "yes"}, "tasks[0].header: must be true or false"),
])
def test_single_problem(item: dict, fragment: str) -> None:
    specs, problems = parse([item])
    assert specs == ()
    assert any(fragment in p for p in problems), problems


@pytest.mark.parametrize("raw", [None, [], 3, {"rte": 1}])
def test_bad_list(raw: object) -> None:
    specs, problems = parse(raw)
    assert specs == () and len(problems) == 1 and problems[0].startswith("tasks")


def test_every_bad_field_of_a_task_is_reported_with_its_path() -> None:
    specs, problems = parse([
        "rte",
        {"name": "bad name", "type": "classification", "train_file": 3, "dev_files": {},
         "text_a": -1, "text_b": 1.5, "header": "yes", "labels": ["a", "a"],
         "metrics": ["acc"], "dropout": 1.5, "head": "deep", "max_seq_len": 4},
    ])
    assert specs == (TASK_PRESETS["rte"],)
    fields = ("name", "train_file", "dev_files", "text_a", "text_b", "header", "labels",
              "metrics", "dropout", "head", "max_seq_len")
    for field in fields:
        assert any(p.startswith(f"tasks[1].{field}: ") for p in problems), (field, problems)
    assert not any(p.startswith(("tasks[0]", "tasks[1].type")) for p in problems), problems


def test_names_of_types_formats_and_heads_take_any_letter_case() -> None:
    specs, problems = parse([{"preset": "rte", "type": "Classification", "format": "CSV",
                              "head": "SAN", "name": "RTE_csv"}])
    assert problems == []
    assert (specs[0].type, specs[0].format, specs[0].head, specs[0].name) == (
        "classification", "csv", "san", "rte_csv")


def test_the_tasks_schema_follows_the_declarations_and_the_registry() -> None:
    import dataclasses
    import json

    import jsonschema

    from weightsearch.trainer.task_parsing import tasks_schema
    from weightsearch.trainer.task_types import TaskType, register_task_type, unregister_task_type

    validator = jsonschema.Draft202012Validator(tasks_schema())
    presets = [json.loads(json.dumps({**dataclasses.asdict(p), "dev_files": dict(p.dev_files)}))
               for p in TASK_PRESETS.values()]  # as config.yaml writes them
    assert validator.is_valid(["rte", {"preset": "rte", "dropout": 0.2}, *presets])
    for bad in ([], [{"preset": "rte", "dropout": 1.5}], [{"name": "x", "type": "classification"}],
                [{"preset": "rte", "colour": "red"}]):
        assert not validator.is_valid(bad), bad
    register_task_type(TaskType("tagging", __name__, "classes", ("accuracy",), ("accuracy",),
                                "accuracy"))
    try:
        schema = tasks_schema()["items"]["anyOf"][1]["properties"]["type"]
        assert "tagging" in schema["enum"]
    finally:
        unregister_task_type("tagging")
    assert "tagging" not in tasks_schema()["items"]["anyOf"][1]["properties"]["type"]["enum"]


def test_qnli_is_two_class_classification_as_both_reference_codes_train_it():
    """SIWLM's and MT-DNN's glue_task_def.yml train QNLI as two classes per pair; MT-DNN
    v0.1's ranking of a question's candidates is the `qnli_rank` preset, on the same files."""
    from weightsearch.trainer.tasks import TASK_PRESETS, dataset_name

    qnli, ranked = TASK_PRESETS["qnli"], TASK_PRESETS["qnlirank"]
    assert (qnli.type, qnli.group, qnli.labels) == ("classification", None,
                                                    ("not_entailment", "entailment"))
    assert (ranked.name, ranked.type, ranked.group) == ("qnli_rank", "ranking", "question")
    assert ranked.train_file == qnli.train_file
    assert dataset_name(ranked) == dataset_name(qnli) == "qnli"
