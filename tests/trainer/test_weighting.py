"""Weighting schemes: the SIWLM schedule against hand-computed tables, and config validation.
The conformance suite runs over every registered scheme in tests/testing/test_schemes.py."""

from __future__ import annotations

import dataclasses

import pytest

from weightsearch.core.errors import ConfigError
from weightsearch.trainer.weighting import (
    SCHEMES,
    EqualSettings,
    SiwlmSettings,
    StaticSettings,
    WeightingScheme,
    build_scheme,
    parse_weighting,
    scheme_problems,
)

# ---------------------------------------------------------------------------------------------
# Golden tables. Every expected weight below was worked out by hand from the rules in
# docs/training.md ("SIWLM, exactly"), not by the code under test.
# ---------------------------------------------------------------------------------------------

# Tasks rte (central, 9), mrpc, stsb (aux 1); focus_span 2, so in SWL epochs the focus is
# rte at steps 0-1, mrpc 2-3, stsb 4-5, rte again 6-7 (wrap-around), mrpc 8-9, ...
SHORT_TASKS = ("rte", "mrpc", "stsb")
# (epoch, step, task, reference weight, paper weight, stage, focus)
SHORT_TABLE = [
    (1, 0, "rte", 9.0, 1.0, "swl", "rte"),
    (1, 0, "mrpc", 0.1, 0.1, "swl", "rte"),
    (1, 1, "rte", 9.0, 1.0, "swl", "rte"),
    (1, 1, "stsb", 0.1, 0.1, "swl", "rte"),
    (1, 2, "rte", 0.9, 0.9, "swl", "mrpc"),  # focus moved on: the central task is off focus
    (1, 2, "mrpc", 1.0, 1.0, "swl", "mrpc"),
    (1, 3, "stsb", 0.1, 0.1, "swl", "mrpc"),
    (1, 4, "stsb", 1.0, 1.0, "swl", "stsb"),
    (1, 5, "mrpc", 0.1, 0.1, "swl", "stsb"),
    (1, 5, "rte", 0.9, 0.9, "swl", "stsb"),
    (1, 6, "rte", 9.0, 1.0, "swl", "rte"),  # wrap-around to the central task
    (1, 6, "stsb", 0.1, 0.1, "swl", "rte"),
    (1, 7, "mrpc", 0.1, 0.1, "swl", "rte"),
    (1, 8, "mrpc", 1.0, 1.0, "swl", "mrpc"),
    (2, 0, "rte", 9.0, 1.0, "iwl", "rte"),
    (2, 2, "mrpc", 0.1, 0.1, "iwl", "rte"),  # IWL: no rotation
    (2, 4, "stsb", 0.1, 0.1, "iwl", "rte"),
    (2, 5, "rte", 9.0, 1.0, "iwl", "rte"),
    (3, 0, "rte", 9.0, 1.0, "swl", "rte"),  # the step counter restarts every epoch
    (3, 2, "mrpc", 1.0, 1.0, "swl", "mrpc"),
    (3, 3, "rte", 0.9, 0.9, "swl", "mrpc"),
    (4, 3, "mrpc", 0.1, 0.1, "iwl", "rte"),
    (4, 3, "rte", 9.0, 1.0, "iwl", "rte"),
    (4, 700, "stsb", 0.1, 0.1, "iwl", "rte"),
]

# Four tasks with the default focus_span 20: cola (central, 12), sst2 (1), stsb (2 via
# aux_weights), mrpc (1). SWL focus: cola 0-19, sst2 20-39, stsb 40-59, mrpc 60-79, cola 80-99.
LONG_TASKS = ("cola", "sst2", "stsb", "mrpc")
LONG_TABLE = [
    (1, 0, "cola", 12.0, 1.0, "swl", "cola"),
    (1, 19, "cola", 12.0, 1.0, "swl", "cola"),
    (1, 19, "sst2", 0.1, 0.1, "swl", "cola"),
    (1, 20, "cola", 1.2, 1.2, "swl", "sst2"),  # boundary 19 -> 20
    (1, 20, "sst2", 1.0, 1.0, "swl", "sst2"),
    (1, 39, "sst2", 1.0, 1.0, "swl", "sst2"),
    (1, 40, "sst2", 0.1, 0.1, "swl", "stsb"),
    (1, 40, "stsb", 2.0, 1.0, "swl", "stsb"),
    (1, 59, "stsb", 2.0, 1.0, "swl", "stsb"),
    (1, 60, "stsb", 0.2, 0.2, "swl", "mrpc"),
    (1, 79, "mrpc", 1.0, 1.0, "swl", "mrpc"),
    (1, 80, "cola", 12.0, 1.0, "swl", "cola"),  # wrap-around after 4 * 20 updates
    (1, 80, "mrpc", 0.1, 0.1, "swl", "cola"),
    (1, 100, "sst2", 1.0, 1.0, "swl", "sst2"),
    (2, 0, "cola", 12.0, 1.0, "iwl", "cola"),
    (2, 20, "sst2", 0.1, 0.1, "iwl", "cola"),
    (2, 40, "stsb", 0.2, 0.2, "iwl", "cola"),
    (2, 999, "cola", 12.0, 1.0, "iwl", "cola"),
    (3, 20, "sst2", 1.0, 1.0, "swl", "sst2"),
    (3, 45, "cola", 1.2, 1.2, "swl", "stsb"),
    (4, 60, "mrpc", 0.1, 0.1, "iwl", "cola"),
    (4, 60, "cola", 12.0, 1.0, "iwl", "cola"),
]


def _short(variant: str) -> WeightingScheme:
    settings = SiwlmSettings(central_weight=9, variant=variant, focus_span=2)
    return build_scheme(settings, SHORT_TASKS, "rte")


def _long(variant: str) -> WeightingScheme:
    settings = SiwlmSettings(central_weight=12, variant=variant, aux_weights={"stsb": 2.0})
    return build_scheme(settings, LONG_TASKS, "cola")


@pytest.mark.parametrize("variant", ["reference", "paper"])
@pytest.mark.parametrize(
    ("make", "table"), [(_short, SHORT_TABLE), (_long, LONG_TABLE)], ids=["span2", "span20"]
)
def test_siwlm_golden_table(make, table, variant):
    scheme = make(variant)
    for epoch, step, task, reference, paper, stage, focus in table:
        expected = reference if variant == "reference" else paper
        where = f"epoch {epoch} step {step} task {task}"
        assert scheme.weight(task, epoch, step) == pytest.approx(expected, abs=1e-12), where
        assert scheme.stage(epoch) == stage, where
        assert scheme.focus(epoch, step) == focus, where


def test_siwlm_orders_central_task_first():
    # The focus cycle starts with the central task even if the caller lists it elsewhere.
    scheme = build_scheme(SiwlmSettings(central_weight=9, focus_span=2), ("mrpc", "rte", "stsb"),
                          "rte")
    assert [scheme.focus(1, step) for step in range(0, 8, 2)] == ["rte", "mrpc", "stsb", "rte"]


def test_zero_weights_are_honoured():
    # The reference code's `if weight:` would turn these zeros into the default weight.
    zero = build_scheme(SiwlmSettings(central_weight=0, focus_span=2), SHORT_TASKS, "rte")
    assert zero.weight("rte", 1, 0) == 0.0
    assert zero.weight("rte", 1, 2) == 0.0
    assert zero.weight("rte", 2, 0) == 0.0
    assert zero.weight("mrpc", 1, 2) == 1.0
    paper = build_scheme(SiwlmSettings(central_weight=0, variant="paper", focus_span=2),
                         SHORT_TASKS, "rte")
    assert paper.weight("rte", 1, 0) == 1.0  # the paper variant's favoured batch gets 1.0
    assert paper.weight("rte", 1, 2) == 0.0
    aux_zero = build_scheme(
        SiwlmSettings(central_weight=9, aux_weights={"mrpc": 0}, focus_span=2), SHORT_TASKS, "rte"
    )
    assert aux_zero.weight("mrpc", 1, 2) == 0.0
    assert aux_zero.weight("stsb", 1, 4) == 1.0
    no_off = build_scheme(SiwlmSettings(central_weight=9, off_focus=0, focus_span=2),
                          SHORT_TASKS, "rte")
    assert no_off.weight("mrpc", 1, 0) == 0.0
    assert no_off.weight("rte", 1, 0) == 9.0
    static = build_scheme(StaticSettings(weights={"mrpc": 0, "rte": 3}), SHORT_TASKS, None)
    assert [static.weight(t, 1, 0) for t in SHORT_TASKS] == [3.0, 0.0, 1.0]


def test_aux_weight_applies_to_every_auxiliary_task():
    scheme = build_scheme(SiwlmSettings(central_weight=9, aux_weight=2, focus_span=2),
                          SHORT_TASKS, "rte")
    assert scheme.weight("mrpc", 1, 2) == 2.0
    assert scheme.weight("stsb", 1, 2) == pytest.approx(0.2)
    assert scheme.weight("stsb", 2, 0) == pytest.approx(0.2)


def test_settings_dataclasses_replace_keeps_the_scheme():
    settings = dataclasses.replace(SiwlmSettings(central_weight=6, focus_span=3),
                                   central_weight=15)
    assert (settings.scheme, settings.central_weight) == ("siwlm", 15)


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


def _parse(raw):
    problems: list[str] = []
    return parse_weighting(raw, problems), problems


def test_parse_defaults():
    assert _parse(None) == (EqualSettings(), [])  # no `weighting` key at all
    assert _parse({"scheme": "equal"}) == (EqualSettings(), [])
    settings, problems = _parse({"scheme": "siwlm", "central_weight": 0})
    assert problems == []
    assert settings == SiwlmSettings(central_weight=0)
    assert (settings.variant, settings.aux_weight, settings.focus_span, settings.off_focus) == (
        "reference", 1.0, 20, 0.1)


def test_parse_reports_every_problem_at_once():
    settings, problems = _parse({
        "scheme": "siwlm",
        "central_weight": True,
        "variant": "papers",
        "aux_weight": -1,
        "aux_weights": {"mrpc": float("nan")},
        "focus_span": 2.5,
        "off_focus": float("inf"),
        "focus_spam": 3,
    })
    assert settings is None
    text = "\n".join(problems)
    assert len(problems) == 7, text
    for field in ("central_weight", "variant", "aux_weight", "aux_weights.mrpc", "focus_span",
                  "off_focus", "focus_spam"):
        assert f"weighting.{field}:" in text
    assert "did you mean 'focus_span'" in text
    assert "reference, paper" in text


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ([1, 2], "weighting: must be a mapping"),
        ({"central_weight": 9},
         "weighting.scheme: required; choose one of dwa, equal, siwlm, static, uncertainty"),
        ({"scheme": "siwml"}, "unknown scheme 'siwml'; choose one of dwa, equal, siwlm, static, "
                             "uncertainty"),
        ({"scheme": "siwlm"}, "weighting.central_weight: required for scheme 'siwlm'"),
        ({"scheme": "siwlm", "central_weight": "9"},
         "weighting.central_weight: must be a number from 0 to 1000"),
        ({"scheme": "siwlm", "central_weight": 9, "focus_span": 0}, "weighting.focus_span"),
        ({"scheme": "siwlm", "central_weight": 9, "focus_span": True}, "weighting.focus_span"),
        ({"scheme": "siwlm", "central_weight": 9, "aux_weights": [1]}, "weighting.aux_weights:"),
        ({"scheme": "equal", "central_weight": 9}, "not a setting of scheme 'equal'"),
        ({"scheme": "static"}, "weighting.weights: required for scheme 'static'"),
        ({"scheme": "static", "weights": {"rte": -0.5}}, "weighting.weights.rte: must be"),
        ({"scheme": "static", "weights": {"rte": False}}, "weighting.weights.rte: must be"),
    ],
)
def test_parse_rejects(raw, fragment):
    settings, problems = _parse(raw)
    assert settings is None
    assert any(fragment in p for p in problems), problems


def test_build_scheme_checks_tasks():
    with pytest.raises(ConfigError) as err:
        build_scheme(StaticSettings(weights={"rtee": 2}), SHORT_TASKS, None)
    assert "weighting.weights.rtee: not one of the run's tasks" in str(err.value)
    assert "did you mean 'rte'" in str(err.value)

    problems = scheme_problems(
        SiwlmSettings(central_weight=9, aux_weights={"qnli": 1, "rte": 2}), SHORT_TASKS, "rte"
    )
    assert any(p.startswith("weighting.aux_weights.qnli: not one of") for p in problems)
    assert any(p.startswith("weighting.aux_weights.rte: rte is the central task") for p in problems)

    with pytest.raises(ConfigError, match="central_task: required by weighting scheme 'siwlm'"):
        build_scheme(SiwlmSettings(central_weight=9), SHORT_TASKS, None)
    with pytest.raises(ConfigError, match="central_task: 'qnli' is not one of the tasks"):
        build_scheme(SiwlmSettings(central_weight=9), SHORT_TASKS, "qnli")
    # Settings built in code (e.g. by a sweep) are checked as thoroughly as parsed ones.
    with pytest.raises(ConfigError,
                       match=r"weighting\.central_weight: must be a number from 0 to 1000"):
        build_scheme(SiwlmSettings(central_weight=-3), SHORT_TASKS, "rte")
    with pytest.raises(ConfigError, match="names must be unique"):
        build_scheme(EqualSettings(), ("rte", "rte"), None)


# ---------------------------------------------------------------------------------------------
# Declared settings
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_a_schemes_keys_are_its_declared_settings(name):
    from weightsearch.core.fields import DOC, RULE

    settings_type = SCHEMES[name].settings_type
    declared = [f for f in dataclasses.fields(settings_type) if f.init]
    assert tuple(f.name for f in declared) == settings_type.KEYS
    for f in declared:  # every setting says what it is and what it must be
        assert f.metadata.get(DOC) and f.metadata.get(RULE) is not None, f.name


def test_a_scheme_settings_problems_are_its_rules_in_declaration_order():
    settings = SiwlmSettings(central_weight=-1, variant="x", aux_weight=2,
                             aux_weights={"a": -1, 3: 1, "b": "x"}, focus_span=0, off_focus=-2)
    assert settings.problems() == [
        "weighting.central_weight: must be a number from 0 to 1000 (the paper sweeps 1-15), "
        "got -1",
        "weighting.variant: must be one of reference, paper, got 'x'",
        "weighting.aux_weights.a: must be a number from 0 to 1000 (the paper sweeps 1-15), "
        "got -1",
        "weighting.aux_weights: task names must be strings, got 3",
        "weighting.aux_weights.b: must be a number from 0 to 1000 (the paper sweeps 1-15), "
        "got 'x'",
        "weighting.focus_span: must be a whole number of updates >= 1, got 0",
        "weighting.off_focus: must be a number from 0 to 1000 (the paper sweeps 1-15), got -2",
    ]
    # A value that passes is kept as given: the run config's digest reads it.
    settings, problems = _parse({"scheme": "siwlm", "central_weight": 9})
    assert problems == [] and type(settings.central_weight) is int


def test_a_scheme_whose_from_mapping_takes_0_1s_arguments_still_parses():
    from dataclasses import dataclass, field

    from weightsearch.trainer.weighting import Scheme, Settings, register_scheme, unregister_scheme

    @dataclass(frozen=True)
    class OldSettings(Settings):
        factor: float = 1.0
        scheme: str = field(default="old", init=False)

        @classmethod
        def from_mapping(cls, raw, problems):  # 0.1's signature
            if raw.get("factor", 1) < 0:
                problems.append("weighting.factor: must be >= 0")
                return None
            return cls(raw.get("factor", 1.0))

    class OldScheme(Scheme):
        name = "old"
        settings_type = OldSettings

        def weight(self, task, epoch, step):
            return float(self.settings.factor)

    register_scheme(OldScheme)
    try:
        assert OldSettings.KEYS == ("factor",)  # declared by its fields, rule or none
        assert _parse({"scheme": "old", "factor": 2}) == (OldSettings(2), [])
        assert _parse({"scheme": "old", "factor": -1}) == (None, ["weighting.factor: must be >= 0"])
    finally:
        unregister_scheme("old")
