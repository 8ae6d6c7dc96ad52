"""A search space's ranges and lists are checked by the settings walker: every problem of every
path at once, each named by its path."""

from __future__ import annotations

from weightsearch.sweep.space import CENTRAL_WEIGHT, GROUP, Dimension
from weightsearch.sweep.space_parsing import parse_space

TASKS = ("rte", "mrpc", "stsb")
WHERE = "search.space"


def test_every_problem_of_every_path_is_reported_at_once() -> None:
    problems: list[str] = []
    parse_space({
        CENTRAL_WEIGHT: [0, "abc", 3, 3],
        "lr": {"lo": 1.0e-4, "high": 1.0e-3, "step": 0, "log": 1},
        "warmup": {"low": 0.1, "high": "x", "int": "yes"},
        "pooling": [None, "mean"],
        GROUP: {"subsets_of": ["qnli", "mrpc", "mrpc"]},
    }, TASKS, problems)
    fix = "use a weight from 1 to 15"
    assert problems == [
        f"{WHERE}.{CENTRAL_WEIGHT}[0]: 0 is out of range; {fix}",
        f"{WHERE}.{CENTRAL_WEIGHT}[1]: 'abc' is not a number; {fix}",
        f"{WHERE}.{CENTRAL_WEIGHT}[3]: 3 is listed twice",
        f"{WHERE}.lr.lo: unknown setting (did you mean log, low?); known settings: high, int, "
        "log, low, step",
        f"{WHERE}.lr.low: expected a number, got None",
        f"{WHERE}.lr.step: 0 is out of range; use a value > 0",
        f"{WHERE}.lr.log: expected true or false, got 1",
        f"{WHERE}.warmup.high: expected a number, got 'x'",
        f"{WHERE}.warmup.int: expected true or false, got 'yes'",
        f"{WHERE}.pooling[0]: None: a searched value must be a number, a string or true/false",
        f"{WHERE}.{GROUP}.subsets_of[0]: 'qnli' is not among train.tasks (rte, mrpc, stsb); "
        "add it there or leave it out",
        f"{WHERE}.{GROUP}.subsets_of[2]: 'mrpc' is listed twice",
    ]


def test_a_range_fine_setting_by_setting_is_checked_as_a_whole() -> None:
    for spec, problem in [
        ({"low": 9, "high": 3}, ": low (9) must be below high (3)"),
        ({"low": 1, "high": 5, "step": 1, "log": True},
         ".log: a log range needs low > 0 and no step"),
        ({"low": 1, "high": 5.5, "int": True}, ".int: low, high and step must be whole numbers"),
    ]:
        problems: list[str] = []
        parse_space({"batch_size": spec}, TASKS, problems)
        assert problems == [f"{WHERE}.batch_size{problem}"]
    problems = []
    parse_space({CENTRAL_WEIGHT: {"low": 1, "high": 15, "int": True}}, TASKS, problems)
    assert problems == [f"{WHERE}.{CENTRAL_WEIGHT}.int: the central weight is a real number; "
                        "use a step of 1"]


def test_the_central_weights_range_defaults_to_the_weight_range() -> None:
    problems: list[str] = []
    space = parse_space({CENTRAL_WEIGHT: {"step": 2}, "batch_size": {"low": 8, "high": 32,
                                                                     "step": 8, "int": True}},
                        TASKS, problems)
    assert problems == []
    assert space.dims == (Dimension(CENTRAL_WEIGHT, low=1.0, high=15.0, step=2.0),
                          Dimension("batch_size", low=8, high=32, step=8, integer=True))
    assert space.to_plain() == {CENTRAL_WEIGHT: {"low": 1.0, "high": 15.0, "step": 2.0},
                                "batch_size": {"low": 8, "high": 32, "step": 8, "int": True}}
