"""Figures of the code's shape: the longest functions, and the lines that validate user input.

    python scripts/house_figures.py [--top 10] [ROOT]

A function's length is its lines from `def` to its last statement (decorators excluded);
nested functions count in their parent too. Validation code is every function whose name says
it checks input (`parse_*`, `*_problems`, `check_*`, `from_mapping`, `validate*`, `_check*`)
plus the models that declare settings, when a module is named `*settings*` or `*models*`.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

PACKAGES = ("weightsearch", "trainer", "studies", "recommender", "sweep", "service")
VALIDATION = re.compile(r"^_?(parse|check|validate)|_problems$|^from_mapping$|^_?check_")


def functions(root: Path):
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield path.relative_to(root), node


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


if __name__ == "__main__":
    main()
