"""House rules that no linter checks: functions in the packages read top to bottom in one
screenful or two (ruff enforces their complexity, C901); a module holds one job, small enough to
read whole; and a module's private names (a leading underscore) stay its own, so that what one
module needs of another is a public name the owner answers for (import-linter sees modules,
not names)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from tests.helpers import PACKAGE_FOLDERS, ROOT

PACKAGES = tuple(PACKAGE_FOLDERS.values())
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500


def _modules():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if package == "weightsearch" and path.parent.name in PACKAGES:
                continue  # weightsearch/<package> links to the folder read on its own
            yield path


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for all the rules (they only read it)."""
    return ast.parse(path.read_text(), str(path))


def _functions():
    for path in _modules():
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield path.relative_to(ROOT), node


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_name(path: Path) -> str:
    """The dotted name a module of the packages is imported by (`weightsearch.trainer.loop`)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] != "weightsearch":
        parts.insert(0, "weightsearch")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_from(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module an `from X import y` reads, relative forms resolved."""
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base[:len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _private_names_taken(path: Path, importer: str):
    """(module, name) for each private name the module `importer` (at `path`) takes from
    another module of the packages: `from weightsearch.x import _y`, or `_y` read off a module
    it imported whole."""
    tree = _tree(path)
    whole_modules: dict[str, str] = {}  # local name -> module, for `import a.b as c`
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _imported_from(node, importer, path.name == "__init__.py")
            if not source.startswith("weightsearch") or source == importer:
                continue
            for alias in node.names:
                if _is_private(alias.name):
                    yield source, alias.name
                else:  # `from weightsearch.trainer import loop` binds a module, maybe
                    whole_modules[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("weightsearch") and alias.asname:
                    whole_modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _is_private(node.attr)
                and isinstance(node.value, ast.Name) and node.value.id in whole_modules):
            yield whole_modules[node.value.id], node.attr


def test_no_function_in_the_packages_is_over_80_lines():
    long = [f"{path}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path, node in _functions()
            if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []


def test_no_module_in_the_packages_is_over_500_lines():
    long = [f"{path.relative_to(ROOT)} ({lines} lines)" for path in _modules()
            if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert long == []


def test_no_module_takes_another_modules_private_names():
    taken = [f"{path.relative_to(ROOT)}: {module}.{name}" for path in _modules()
             for module, name in _private_names_taken(path, _module_name(path))]
    assert taken == []


def test_the_private_name_rule_sees_both_import_forms(tmp_path):
    """The rule above would pass vacuously if it missed an import form: run it on a module
    that takes private names both ways."""
    module = tmp_path / "probe.py"
    module.write_text("from weightsearch.trainer import loop as lp\n"
                      "from weightsearch.trainer.loop import _hidden, public\n"
                      "from . import space\n"
                      "from .space import _also_hidden\n"
                      "x = lp._inner + space._deep + lp.fine\n")
    taken = set(_private_names_taken(module, "weightsearch.sweep.probe"))
    assert taken == {("weightsearch.trainer.loop", "_hidden"), ("weightsearch.sweep.space",
                     "_also_hidden"), ("weightsearch.trainer.loop", "_inner"),
                     ("weightsearch.sweep.space", "_deep")}


def test_the_rule_sees_every_package():
    seen = {str(path).split("/")[0] for path, _ in _functions()}
    assert seen == set(PACKAGES)
