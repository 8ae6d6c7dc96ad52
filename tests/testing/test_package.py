"""weightsearch.testing as a plug-in's tests use it: every name it lists loads, importing it
loads nothing heavy, and the suites run without pytest (a test extra a plug-in may not use)."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

import weightsearch.testing
from tests.helpers import ROOT
from weightsearch.testing.suite import Conformance

PACKAGE = ROOT / "weightsearch" / "testing"


def test_every_listed_name_loads() -> None:
    for name in weightsearch.testing.__all__:
        assert getattr(weightsearch.testing, name).__module__.startswith("weightsearch.testing.")
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        weightsearch.testing.nope  # noqa: B018


def test_importing_the_package_loads_no_suite() -> None:
    code = "import sys, weightsearch.testing; print(sorted(m for m in sys.modules if " \
           "m.startswith(('torch', 'weightsearch.trainer', 'weightsearch.testing.'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         check=True).stdout.strip()
    assert out == "[]"


def test_no_suite_imports_pytest() -> None:
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.split(".")[0] == "pytest" for n in names), path


def test_the_suites_run_without_pytest(monkeypatch: pytest.MonkeyPatch) -> None:
    from weightsearch.testing import check_sampler, check_scheme

    monkeypatch.setitem(sys.modules, "pytest", None)  # `import pytest` now fails
    check_scheme("equal")
    check_sampler("shuffle")


def test_each_suite_lists_its_checks_in_declaration_order() -> None:
    class First(Conformance):
        def test_b(self) -> None: ...

        def test_a(self) -> None: ...

    class Second(First):
        def test_c(self) -> None: ...

        def test_a(self) -> None: ...

    assert Second.checks() == ["test_b", "test_a", "test_c"]
