"""Figures of the code's shape: the longest functions, and the lines that validate user input.

    python scripts/house_figures.py [--top 10] [ROOT]

A function's length is its lines from `def` to its last statement (decorators excluded);
nested functions count in their parent too. Validation code is every function whose name says
it checks input (`parse_*`, `*_problems`, `check_*`, `from_mapping`, `validate*`, `_check*`),
plus the lines of every field declared with its rule (`name: type = setting(...)`), which
replace hand-written checks, and the settings walker's own module (`weightsearch/fields.py`),
so that moving a check into a declaration does not hide it.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

PACKAGES = ("weightsearch", "trainer", "studies", "recommender", "sweep", "service")
# `check_x`, `_parse`, but not `_checkpoint_to_resume`.
VALIDATION = re.compile(r"^_?(parse|check|validate)(_|$)|_problems$|^from_mapping$")


def modules(root: Path):
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            yield path.relative_to(root), ast.parse(path.read_text())


def functions(root: Path):
    for path, tree in modules(root):
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path, node


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=".")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    root = Path(args.root)
    found = [(n.end_lineno - n.lineno + 1, str(p), n.name, n.lineno) for p, n in functions(root)]
    print(f"{len(found)} functions; the {args.top} longest (lines, where):")
    for lines, path, name, line in sorted(found, reverse=True)[: args.top]:
        print(f"  {lines:4d}  {path}:{line} {name}")
    over = [f for f in found if f[0] > 80]
    print(f"functions over 80 lines: {len(over)}")
    # Outermost validation functions only, so nested checks are not counted twice.
    spans: dict[str, list[tuple[int, int]]] = {}
    for path, node in functions(root):
        if VALIDATION.search(node.name):
            spans.setdefault(str(path), []).append((node.lineno, node.end_lineno))
    total = 0
    for ranges in spans.values():
        covered: set[int] = set()
        for start, end in ranges:
            covered.update(range(start, end + 1))
        total += len(covered)
    print(f"validation lines (functions named parse_/check_/validate/*_problems/from_mapping): "
          f"{total} in {len(spans)} files")
    declared = sum(declaration_lines(root))
    walker = root / "weightsearch" / "fields.py"
    # The walker's functions are counted above when their names say they check.
    rest = _uncounted(walker) if walker.exists() else 0
    print(f"declared settings: {declared} lines; the walker's other lines: {rest}")
    print(f"validation in all: {total + declared + rest} lines")


def declaration_lines(root: Path):
    """Lines of each dataclass field whose default is `setting(...)`."""
    for _path, tree in modules(root):
        for node in ast.walk(tree):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, "id", None) == "setting"):
                yield node.end_lineno - node.lineno + 1


def _uncounted(path: Path) -> int:
    """Non-blank lines of a module outside its validation-named functions."""
    tree = ast.parse(path.read_text())
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and VALIDATION.search(
                node.name):
            inside.update(range(node.lineno, node.end_lineno + 1))
    lines = path.read_text().splitlines()
    return sum(1 for i, line in enumerate(lines, 1) if line.strip() and i not in inside)


if __name__ == "__main__":
    main()
