"""House rules that no linter checks: functions in the packages read top to bottom in one
screenful or two (ruff enforces their complexity, C901)."""

from __future__ import annotations

import ast

from tests.helpers import PACKAGE_FOLDERS, ROOT

PACKAGES = tuple(PACKAGE_FOLDERS.values())
MAX_FUNCTION_LINES = 80


def _functions():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if package == "weightsearch" and path.parent.name in PACKAGES:
                continue  # weightsearch/<package> links to the folder read on its own
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    yield path.relative_to(ROOT), node


def test_no_function_in_the_packages_is_over_80_lines():
    long = [f"{path}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path, node in _functions()
            if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []


def test_the_rule_sees_every_package():
    seen = {str(path).split("/")[0] for path, _ in _functions()}
    assert seen == set(PACKAGES)
