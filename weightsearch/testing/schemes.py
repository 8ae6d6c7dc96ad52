"""The conformance suite of weighting schemes: what every scheme registered with
`register_scheme` must keep, as the training loop, the fused runs, CUDA graphs and checkpoints
use it (the `Scheme` docstring gives the order of calls).

    from weightsearch.testing import SchemeConformance, check_scheme

    class TestMyScheme(SchemeConformance):      # pytest collects it as it stands
        scheme = "my-scheme"
        settings = {"factor": 2}                # the YAML `weighting` mapping, less `scheme`

    check_scheme("my-scheme", {"factor": 2})    # the same checks, without pytest

The suite builds the scheme as a run does (`parse_weighting`, `build_scheme`, `setup`), hands
it the epoch losses a run would (`end_epoch`), and checks its weights over many positions.
"""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import torch

from weightsearch.testing.suite import (
    Conformance,
    ConformanceError,
    expect,
    refuses,
    registered,
    run_suite,
)
from weightsearch.trainer.weighting import (
    SCHEMES,
    Settings,
    WeightingScheme,
    build_scheme,
    parse_weighting,
    scheme_problems,
)

# The run the suite builds: its tasks (central first), their types, and each epoch's mean task
# losses as the loop hands them to `end_epoch` (mrpc had no batch in epoch 2).
TASKS = ("rte", "mrpc", "stsb")
TASK_TYPES = MappingProxyType({"rte": "classification", "mrpc": "classification",
                               "stsb": "regression"})
HISTORY = MappingProxyType({1: {"rte": 0.7, "mrpc": 0.6, "stsb": 2.0},
                            2: {"rte": 0.5, "stsb": 1.6},
                            3: {"rte": 0.45, "mrpc": 0.5, "stsb": 0.8}})
POSITIONS = tuple((epoch, step) for epoch in range(1, 5) for step in (0, 1, 2, 5, 19, 20, 61))
# Positions a caller may not ask for: before the first epoch or step, an unknown task, a bool.
MISTAKES = (("rte", 0, 0), ("rte", 1, -1), ("nope", 1, 0), ("rte", True, 0))

Weights = dict[tuple[int, int, str], float]


class SchemeConformance(Conformance):
    """Checks of one weighting scheme; set `scheme` (its registered name) and, where its
    settings have no defaults, `settings` (the YAML mapping without `scheme`)."""

    scheme: ClassVar[str]
    settings: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    tasks: ClassVar[tuple[str, ...]] = TASKS  # central task first
    central_task: ClassVar[str | None] = TASKS[0]
    task_types: ClassVar[Mapping[str, str]] = TASK_TYPES
    history: ClassVar[Mapping[int, Mapping[str, float]]] = HISTORY
    positions: ClassVar[tuple[tuple[int, int], ...]] = POSITIONS

    # --- building it as a run does --------------------------------------------------------
    def parsed(self) -> Settings:
        problems: list[str] = []
        settings = parse_weighting({"scheme": self.scheme, **self.settings}, problems)
        expect(settings is not None and not problems,
               f"weighting {{scheme: {self.scheme}, ...}} does not parse: {problems}")
        assert settings is not None
        return settings

    def built(self) -> tuple[Any, list[dict[str, Any]]]:
        """The scheme as the loop builds and drives it, its epochs of `history` trained; and
        the optimizer parameter groups of what it learns."""
        scheme: Any = build_scheme(self.parsed(), self.tasks, self.central_task)
        groups = scheme.setup(dict(self.task_types), torch.device("cpu"))
        for epoch, losses in self.history.items():
            scheme.end_epoch(epoch, dict(losses))
        return scheme, groups

    def weights(self, scheme: Any) -> Weights:
        return {(e, s, t): scheme.weight(t, e, s) for e, s in self.positions for t in self.tasks}

    # --- checks ---------------------------------------------------------------------------
    def test_registered(self) -> None:
        cls = registered(SCHEMES, self.scheme)
        settings = self.parsed()
        expect(type(settings) is cls.settings_type,
               f"its settings parse to {type(settings).__name__}, not {cls.settings_type}")
        expect(getattr(settings, "scheme", None) == self.scheme,
               f"settings.scheme is {getattr(settings, 'scheme', None)!r}, not {self.scheme!r}")
        expect(refuses(dataclasses.FrozenInstanceError, setattr, settings, "scheme", "other"),
               "its settings must be a frozen dataclass (a run's config is immutable)")
        expect(isinstance(settings.has_central_weight, bool), "has_central_weight is not a bool")
        scheme, _ = self.built()
        expect(isinstance(scheme, WeightingScheme) and type(scheme) is cls,
               f"build_scheme gave {scheme!r}")
        expect(isinstance(cls.capturable, bool), "capturable is not a bool")

    def test_settings_round_trip(self) -> None:
        """config.yaml holds the settings as `dataclasses.asdict` gives them: they parse back
        to the same settings, which fit the run's tasks."""
        settings = self.parsed()
        problems: list[str] = []
        again = parse_weighting(dataclasses.asdict(settings), problems)  # type: ignore[call-overload]
        expect(again == settings and not problems,
               f"asdict(settings) parses to {again!r} ({problems}), not {settings!r}")
        found = scheme_problems(settings, self.tasks, self.central_task)
        expect(found == [], f"the settings do not fit tasks {self.tasks}: {found}")

    def test_weights_are_finite_pure_and_deterministic(self) -> None:
        scheme, _ = self.built()
        seen = self.weights(scheme)
        for (epoch, step, task), value in seen.items():
            expect(type(value) is float and math.isfinite(value) and value >= 0,
                   f"weight({task!r}, {epoch}, {step}) = {value!r}: want a finite float >= 0")
        for epoch, step in self.positions:
            stage, focus = scheme.stage(epoch), scheme.focus(epoch, step)
            expect(stage is None or isinstance(stage, str), f"stage({epoch}) = {stage!r}")
            expect(focus is None or focus in self.tasks, f"focus({epoch}, {step}) = {focus!r}")
        # Pure: asked again in reverse order, and of a second scheme driven the same way.
        for (epoch, step, task), value in reversed(seen.items()):
            expect(scheme.weight(task, epoch, step) == value,
                   f"weight({task!r}, {epoch}, {step}) changed when asked again")
        expect(self.weights(self.built()[0]) == seen,
               "a second scheme built and driven the same way gives other weights")

    def test_caller_mistakes_are_refused(self) -> None:
        scheme, _ = self.built()
        for task, epoch, step in MISTAKES:
            expect(refuses(ValueError, scheme.weight, task, epoch, step),
                   f"weight({task!r}, {epoch!r}, {step!r}) must raise ValueError (call "
                   "self._check_position(epoch, step, task) first)")

    def test_setup_gives_learnable_parameter_groups(self) -> None:
        _, groups = self.built()
        expect(isinstance(groups, list), f"setup returned {groups!r}, not a list")
        for group in groups:
            params = group.get("params") if isinstance(group, dict) else None
            expect(params and all(p.requires_grad and p.is_leaf for p in params),
                   f"each group needs 'params': leaf tensors that require grad; got {group!r}")
            lr = group.get("lr", 1.0)
            expect(isinstance(lr, float) and lr > 0, f"a group's lr must be a float > 0: {lr!r}")

    def test_weighted_loss(self) -> None:
        """The batch's contribution to the loss: finite, differentiable in the loss, which
        enters with the weight the update logs; for a scheme that learns nothing, the loss
        times its weight. A capturable one takes the weight as a device scalar too (CUDA
        graphs hold it in a tensor)."""
        scheme, groups = self.built()
        for (_, _, task), weight in self.weights(scheme).items():
            if weight == 0:
                continue  # the loop skips the batch
            loss = torch.tensor(0.8, requires_grad=True)
            total = scheme.weighted_loss(task, loss, weight)
            expect(isinstance(total, torch.Tensor) and total.shape == ()
                   and bool(torch.isfinite(total)), f"weighted_loss gave {total!r}")
            total.backward()
            expect(loss.grad is not None and math.isclose(loss.grad.item(), weight,
                                                          rel_tol=1e-5),
                   f"d weighted_loss / d loss = {loss.grad}, not the weight {weight}")
            if not groups:
                expect(math.isclose(total.item(), 0.8 * weight, rel_tol=1e-5),
                       f"weighted_loss = {total.item()}, not loss * weight = {0.8 * weight}")
            if type(scheme).capturable:
                held = scheme.weighted_loss(task, loss.detach(), torch.tensor(weight))
                expect(math.isclose(float(held.detach()), total.item(), rel_tol=1e-5),
                       "a tensor weight gives another loss; capturable schemes must take both")

    def test_state_resumes_the_weights(self) -> None:
        """A resumed run rebuilds the scheme, sets it up and loads the state its checkpoint
        saved (left out when empty; read with torch.load(weights_only=True)): it gives the
        weights of the uninterrupted one."""
        scheme, groups = self.built()
        for group in groups:  # a learned state away from its start
            with torch.no_grad():
                for p in group["params"]:
                    p.copy_(torch.linspace(-1.0, 0.5, p.numel()).reshape(p.shape))
        before = self.weights(scheme)
        state = scheme.state_dict()
        expect(isinstance(state, dict), f"state_dict gave {type(state).__name__}, not a dict")
        saved = io.BytesIO()
        torch.save({"scheme": state} if state else {}, saved)
        try:
            loaded = torch.load(io.BytesIO(saved.getvalue()), weights_only=True)
        except Exception as err:  # torch's unpickler raises its own types
            raise ConformanceError(f"state_dict holds what torch.load(weights_only=True) refuses "
                                 f"(only tensors, numbers, strings and containers): {err}") from err
        resumed: Any = build_scheme(self.parsed(), self.tasks, self.central_task)
        resumed.setup(dict(self.task_types), torch.device("cpu"))
        resumed.load_state_dict(loaded.get("scheme") or {})
        expect(self.weights(resumed) == before, "a resumed scheme gives other weights")


def check_scheme(scheme: str, settings: Mapping[str, Any] | None = None, **options: Any) -> None:
    """Every check of `SchemeConformance` on the scheme registered as `scheme`, with
    `settings` (the YAML mapping without `scheme`) and any other of its attributes."""
    given = {"settings": settings} if settings is not None else {}
    run_suite(SchemeConformance, {"scheme": scheme, **given, **options})
