"""The weighting schemes' conformance suite (weightsearch.testing.schemes) on every built-in
scheme, each as a plug-in's tests would write it, and on a broken scheme, which it rejects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from tests.helpers import plugged_in
from weightsearch.testing import ConformanceError, SchemeConformance, check_scheme
from weightsearch.trainer.weighting import (
    SCHEMES,
    Scheme,
    Settings,
    register_scheme,
    unregister_scheme,
)


class TestSiwlm(SchemeConformance):
    scheme = "siwlm"
    settings: ClassVar[dict] = {"central_weight": 6, "aux_weights": {"mrpc": 0.5}, "focus_span": 3}


class TestEqual(SchemeConformance):
    scheme = "equal"


class TestStatic(SchemeConformance):
    scheme = "static"
    settings: ClassVar[dict] = {"weights": {"rte": 4, "stsb": 0}}


class TestUncertainty(SchemeConformance):
    scheme = "uncertainty"


class TestDwa(SchemeConformance):
    scheme = "dwa"


def test_every_registered_scheme_has_a_conformance_class() -> None:
    cases = (TestSiwlm, TestEqual, TestStatic, TestUncertainty, TestDwa)
    assert {case.scheme for case in cases} == set(SCHEMES)


# --- a broken scheme: weights below 0, and positions it never checks -----------------------
@dataclass(frozen=True)
class DebtSettings(Settings):
    scheme: str = field(default="debt", init=False)


class DebtScheme(Scheme):
    """The central task's batches count against the loss."""

    name = "debt"
    settings_type = DebtSettings

    def weight(self, task: str, epoch: int, step: int) -> float:
        return -1.0 if task == self.central_task else 1.0


def test_the_suite_rejects_a_broken_scheme() -> None:
    with (plugged_in(register_scheme, unregister_scheme, DebtScheme, "debt"),
          pytest.raises(ConformanceError) as info):
        check_scheme("debt")
    text = str(info.value)
    assert text.splitlines() == [
        "SchemeConformance: 2 of 7 checks failed",
        "test_weights_are_finite_pure_and_deterministic: weight('rte', 1, 0) = -1.0: want a "
        "finite float >= 0",
        "test_caller_mistakes_are_refused: weight('rte', 0, 0) must raise ValueError (call "
        "self._check_position(epoch, step, task) first)"]


def test_an_unregistered_scheme_or_an_unknown_setting_is_named() -> None:
    with pytest.raises(ConformanceError, match="test_registered: no weighting scheme is "
                                               "registered as 'nonesuch'"):
        check_scheme("nonesuch")
    with pytest.raises(TypeError, match="SchemeConformance has no setting task"):
        check_scheme("equal", task=("rte",))
