"""Write docs/settings.md, the settings reference, from the settings declarations.

    python scripts/settings_reference.py           # write docs/settings.md
    python scripts/settings_reference.py --check   # exit 1 when docs/settings.md is stale

One table per group of settings: the run config's own keys (`RunConfig`), each settings mapping
nested in it (`adamax`, `finetune`, `finetune.adversarial`, the `tasks` list's items, ...),
each registered weighting scheme and batch sampler, and each search strategy of a study file.
A row gives the key as a YAML file writes it, its type, default, allowed values (from the
field's rule: its `describe()`, else its JSON Schema, else the rule's docstring), the release
it appeared in and its `doc`. A scheme, sampler or strategy whose settings are plain dataclass
fields lists its `KEYS` with the fields' defaults. Only the classes this project declares are
read, so a plug-in registered in the same process changes nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, NamedTuple

from weightsearch.core.fields import DOC, RULE, resume_free_keys, since

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "settings.md"
COMMAND = "python scripts/settings_reference.py"
NONE = "—"


class Group(NamedTuple):
    title: str  # the heading; its slug is the group's anchor
    where: str  # the key prefix, as a YAML file writes it (`finetune.`, `tasks[].`)
    cls: type
    intro: str
    keys: tuple[str, ...] | None = None  # None: the dataclass's fields


def slug(heading: str) -> str:
    """The #anchor GitHub gives a heading (as tests/test_docs.py computes it)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _hint(cls: type, f: dataclasses.Field) -> Any:
    """A field's annotation as an object (None where it cannot be evaluated)."""
    if not isinstance(f.type, str):
        return f.type
    try:
        return eval(f.type, vars(sys.modules[cls.__module__]))  # the annotations of our own classes
    except Exception:
        return None


def _nested(hint: Any) -> tuple[type, bool] | None:
    """The settings dataclass a field holds, and whether as a list of them."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint, False
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return next((n for a in args if a is not type(None) and (n := _nested(a))), None)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        inner = _nested(args[0])
        return (inner[0], True) if inner else None
    return None


def nested_groups(cls: type, where: str = "") -> list[Group]:
    """The settings mappings nested in `cls`, depth first in declaration order."""
    out = []
    for f in dataclasses.fields(cls):
        found = _nested(_hint(cls, f))
        if found is None:
            continue
        inner, many = found
        key = f"{where}{f.name}{'[]' if many else ''}"
        what = f"Each item of the list `{f.name}`" if many else f"The mapping `{key}`"
        out.append(Group(f"`{key}`", f"{key}.", inner,
                         f"{what} of a run config (`{_name(inner)}`)."))
        out.extend(nested_groups(inner, f"{key}."))
    return out


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _ours(cls: type) -> bool:
    return cls.__module__.startswith("weightsearch.")


def registry_groups(key: str, selector: str, registry: dict, intro: str) -> list[Group]:
    """One group per registered class of a registry: its settings, under `key`."""
    out = []
    for name, registered in registry.items():
        cls = registered.settings_type
        if not (_ours(registered) and _ours(cls)):
            continue
        names = [f.name for f in dataclasses.fields(cls) if f.init and f.name != selector]
        keys = tuple(getattr(cls, "KEYS", names))
        out.append(Group(f"`{key}.{selector}: {name}`", f"{key}.", cls,
                         f"{intro} `{{{selector}: {name}}}` (`{_name(cls)}`).", keys))
    return out


def all_groups() -> tuple[Group, list[Group], list[tuple[str, list[Group]]]]:
    """The run config's group, its nested groups, and the sections of registered choices."""
    from weightsearch.sweep.strategies import STRATEGIES
    from weightsearch.sweep.study_file import StudyFile
    from weightsearch.trainer.config import RunConfig
    from weightsearch.trainer.sampling import SAMPLERS
    from weightsearch.trainer.weighting import SCHEMES

    run = Group("Run config", "", RunConfig, "The keys of a run config file, and of a study "
                f"file's `train:` (`{_name(RunConfig)}`).")
    choices = [
        ("`weighting`", registry_groups("weighting", "scheme", SCHEMES,
                                        "The loss-weighting scheme")),
        ("`sampling`", registry_groups("sampling", "scheme", SAMPLERS, "The batch sampler")),
        ("Study file `search`", registry_groups("search", "strategy", STRATEGIES,
                                                "A study file's search strategy")),
    ]
    study = Group("Study file", "", StudyFile, "The keys of a study file "
                  f"(`{_name(StudyFile)}`): `train:` holds a run config, `search:` a strategy "
                  "and its space (below).")
    return run, [*nested_groups(RunConfig), study], choices


def _number(value: float) -> str:
    """A number as a config writes it: 5e-5, not 5e-05."""
    if isinstance(value, float) and math.isfinite(value):
        return re.sub(r"e([+-])0*(\d)", r"e\1\2", repr(value)).replace("e+", "e")
    return str(value)


def plain(value: Any) -> str:
    """A default value in YAML's flow style."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _number(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(plain(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {plain(v)}" for k, v in value.items()) + "}"
    return str(value)


def default_text(f: dataclasses.Field | None, anchors: dict[str, str], key: str) -> str:
    if f is None or (f.default is dataclasses.MISSING
                     and f.default_factory is dataclasses.MISSING):
        return NONE
    if f.default is not dataclasses.MISSING:
        return f"`{plain(f.default)}`"
    factory = f.default_factory
    if isinstance(factory, type) and dataclasses.is_dataclass(factory):
        return f"[`{key}`](#{anchors[key]})" if key in anchors else factory.__name__
    if isinstance(factory, types.FunctionType):
        return " ".join((factory.__doc__ or factory.__name__).split())
    return f"`{plain(factory())}`"


def allowed_text(rule: Any) -> str:
    """What a rule accepts: its own words (`describe`), else its JSON Schema's; a rule with
    neither leaves the cell empty (its doc says it)."""
    if hasattr(rule, "describe"):
        return str(rule.describe())
    if hasattr(rule, "schema"):
        return from_schema(rule.schema())
    return ""


KINDS = {"boolean": "true, false", "object": "mapping", "array": "list"}


def from_schema(schema: dict[str, Any]) -> str:
    """Allowed values as a JSON Schema states them."""
    if "anyOf" in schema:
        return ", or ".join(from_schema(s) for s in schema["anyOf"])
    if "enum" in schema:
        return ", ".join(plain(v) for v in schema["enum"])
    kinds = schema.get("type", "any value")
    kind = " or ".join(KINDS.get(k, k) for k in ([kinds] if isinstance(kinds, str) else kinds))
    if "items" in schema:
        kind += f" of {from_schema(schema['items'])}"
    bounds = [f"{sign} {_number(schema[k])}" for k, sign in
              (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<=")) if k in schema]
    return " ".join([kind, " and ".join(bounds)]).strip()


def type_text(cls: type, f: dataclasses.Field, key: str, anchors: dict[str, str]) -> str:
    """The field's annotation; a group's (a nested mapping, or a registered choice's) kind."""
    found = _nested(_hint(cls, f))
    kind = ("list" if found[1] else "mapping") if found else "mapping" if key in anchors else ""
    if kind:
        return f"{kind} or null" if f.default is None else kind
    return f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def link_groups(doc: str, anchors: dict[str, str]) -> str:
    """`(`adamax`)` in a doc becomes a link to the group's table."""
    return re.sub(r"\(`([\w.\[\]]+)`\)",
                  lambda m: f"([`{m[1]}`](#{anchors[m[1]]}))" if m[1] in anchors else m[0], doc)


def table(group: Group, anchors: dict[str, str]) -> list[str]:
    fields = {f.name: f for f in dataclasses.fields(group.cls)}
    keys = group.keys if group.keys is not None else tuple(fields)
    if not keys:
        return ["No settings."]
    lines = ["| key | type | default | allowed | since | what it is |",
             "|---|---|---|---|---|---|"]
    for key in keys:
        f = fields.get(key)
        path = f"{group.where}{key}"
        doc = link_groups(f.metadata.get(DOC, ""), anchors) if f is not None else ""
        row = [f"`{path}`",
               f"`{type_text(group.cls, f, path, anchors)}`" if f is not None else "",
               default_text(f, anchors, path),
               allowed_text(f.metadata.get(RULE)) if f is not None else "",
               since(f) if f is not None else "", doc]
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    return lines


HEADER = """# Settings reference

Generated by `python scripts/settings_reference.py` from the settings declarations: do not
edit it by hand; after changing a setting, run that command (`--check` says whether this page
is current). What the settings do in a run: [training.md](training.md); study files:
[studies.md](studies.md).

`allowed` is what a setting's rule accepts (settings with a structure of their own are checked
by their parser); `since` is the release it appeared in.
"""


def render() -> str:
    run, nested, sections = all_groups()
    # The groups a doc may name as (`key`): the nested mappings and the registered choices.
    anchors = {t.strip("`"): slug(t) for t in [*(g.title for g in nested),
                                               *(t for t, _ in sections)]}
    out = [HEADER, "## Contents", "",
           *(f"- [{t}](#{slug(t)})" for t in [run.title, *(g.title for g in nested),
                                               *(t for t, _ in sections)]), ""]
    free = ", ".join(f"`{k}`" for k in resume_free_keys(run.cls))
    out += [f"## {run.title}", "", run.intro, "", *table(run, anchors), "",
            f"A run may resume with these changed, since they do not change what it computes: "
            f"{free}.", ""]
    for g in nested:
        out += [f"## {g.title}", "", g.intro, "", *table(g, anchors), ""]
    for title, groups in sections:
        out += [f"## {title}", ""]
        for g in groups:
            out += [f"### {g.title}", "", g.intro, "", *table(g, anchors), ""]
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when docs/settings.md differs from the declarations")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not OUTPUT.is_file() or OUTPUT.read_text() != text:
            print(f"docs/settings.md is stale: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
