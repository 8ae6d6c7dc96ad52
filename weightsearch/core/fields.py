"""Settings declared on their dataclass, checked by one walker.

A settings dataclass states each plain setting's rule beside its default
(`epochs: int = setting(5, Number(integer=True, low=1))`); `check_fields` walks the fields in
declaration order and turns a raw mapping (parsed YAML, `--set` overrides) into the values that
passed, adding one problem per bad value, worded the same way for every setting:
`<path>: <what is wrong>; <the fix>`. The same declarations give a JSON Schema
(`json_schema`), which the HTTP service publishes for the bodies it reads, and the settings
reference (docs/settings.md, written by scripts/settings_reference.py). What a setting means for
records and resumption is declared with it too (`since`, `resume_free`, `omit_when`), so that
the keys a run may resume with changed and the keys a record leaves out are read from the
declarations (`resume_free_keys`, `drop_unrecorded`) rather than listed apart. Settings with
structure of their own (task lists, weighting schemes, samplers) keep their own parsers, which
may be rules too (any object with `check`); cross-field rules stay explicit in the parser of the
owning config.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

# Seeds reach numpy (which takes 0 to 2**32 - 1) offset by an epoch or a worker: keep headroom.
MAX_SEED = 2**31 - 1

RULE = "rule"  # the metadata key of a field's rule
DOC = "doc"  # the metadata key of a field's one-line description (the schema's)
SINCE = "since"  # the metadata key of the release a setting appeared in
FREE_ON_RESUME = "resume_free"  # the metadata key: a resumed run may change it
OMIT = "omit_when"  # the metadata key: when a settings record leaves the setting out

FIRST_RELEASE = "0.1.0"
AT_DEFAULT = "at default"  # omit_when: while the setting holds its default


class Rule(Protocol):
    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        """The value to keep and None, or (None, the problem with `value` at `key`)."""


def setting(default: Any = dataclasses.MISSING, rule: Rule | None = None, *,
            factory: Any = dataclasses.MISSING, doc: str | None = None,
            since: str = FIRST_RELEASE, resume_free: bool = False,
            omit_when: str | Callable[[Any], bool] | None = None) -> Any:
    """A dataclass field with its default, the rule its raw value must pass and, for the
    schema and the settings reference, what it is and the release it appeared in (`since`).

    `resume_free`: the setting does not change what a run computes (where it writes, how fast,
    what it logs), so a run may resume with it changed. `omit_when`: when the settings record
    (`drop_unrecorded`) leaves it out, so that records made before it existed read, and digest,
    the same: AT_DEFAULT (while it holds its default) or a predicate of the settings object
    that holds it."""
    metadata: dict[str, Any] = {RULE: rule} if rule is not None else {}
    if doc:
        metadata[DOC] = doc
    metadata[SINCE] = since
    if resume_free:
        metadata[FREE_ON_RESUME] = True
    if omit_when is not None:
        metadata[OMIT] = omit_when
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def since(f: dataclasses.Field) -> str:
    """The release the setting of field `f` appeared in (a plain field: the first)."""
    return str(f.metadata.get(SINCE, FIRST_RELEASE))


def resume_free_keys(cls: type) -> tuple[str, ...]:
    """The settings of `cls` declared `resume_free`, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get(FREE_ON_RESUME))


def omitted(settings: Any, f: dataclasses.Field) -> bool:
    """Whether the record of `settings` leaves its field `f` out now (`setting`'s omit_when)."""
    when = f.metadata.get(OMIT)
    if when is None:
        return False
    if when == AT_DEFAULT:
        default = (f.default_factory() if f.default_factory is not dataclasses.MISSING
                   else f.default)
        return bool(getattr(settings, f.name) == default)
    return bool(when(settings))


def drop_unrecorded(settings: Any, plain: dict[str, Any]) -> dict[str, Any]:
    """`plain` (`dataclasses.asdict(settings)`, changed in place) without the settings that
    `omitted` leaves out, in nested settings too."""
    for f in dataclasses.fields(settings):
        if f.name not in plain:
            continue
        if omitted(settings, f):
            del plain[f.name]
            continue
        value = getattr(settings, f.name)
        if (dataclasses.is_dataclass(value) and not isinstance(value, type)
                and isinstance(plain[f.name], dict)):
            drop_unrecorded(value, plain[f.name])
    return plain


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or float, not a bool: YAML turns `yes`/`no` into booleans silently."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """A finite number (numpy's too), not a bool."""
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(float(value)))


def _nullable(schema: dict[str, Any], optional: bool) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]} if optional else schema


def _or_null(text: str, optional: bool) -> str:
    """A rule's allowed values as the settings reference reads them (`describe`)."""
    return f"{text}, or null" if optional else text


def _bound(value: float) -> str:
    """A range bound as written in a config: whole numbers in full (a seed's 2147483647)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


# The largest magnitudes torch's default tensors hold: a number beyond them fails inside a
# trial instead of here.
FLOAT32_MAX = 3.4028234663852886e38
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Number:
    """An integer or a finite number in [low, high] ((low, high] with `low_open`) that a
    float32 (an int64) holds; None allowed where `optional`."""

    integer: bool
    low: float
    high: float = math.inf
    low_open: bool = False
    optional: bool = False

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if value is None and self.optional:
            return None, None
        ok = is_int(value) if self.integer else is_number(value)
        # An int is finite however large (math.isfinite would overflow converting it).
        if not ok or not (isinstance(value, int) or math.isfinite(value)):
            kind = "an integer" if self.integer else "a number"
            return None, f"{key}: expected {kind}, got {value!r}"
        if abs(value) > (INT64_MAX if self.integer else FLOAT32_MAX):
            what = "a 64-bit integer" if self.integer else "a float32 (about 3.4e38)"
            shown = repr(value) if len(repr(value)) <= 24 else f"a {len(str(value))}-digit number"
            return None, (f"{key}: {shown} is beyond what {what} holds, and the trainer "
                          f"computes in those; use a value within {self.describe()}")
        below = value <= self.low if self.low_open else value < self.low
        if below or value > self.high:
            low = f"> {self.low:g}" if self.low_open else f">= {self.low:g}"
            high = f" and <= {self.high:g}" if self.high != math.inf else ""
            return None, f"{key}: {value!r} is out of range; use a value {low}{high}"
        return (int(value) if self.integer else float(value)), None

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "integer" if self.integer else "number",
                               "exclusiveMinimum" if self.low_open else "minimum": self.low}
        if self.high != math.inf:
            out["maximum"] = self.high
        return _nullable(out, self.optional)

    def describe(self) -> str:
        kind = "integer" if self.integer else "number"
        if self.high == math.inf:
            text = f"{kind} {'>' if self.low_open else '>='} {_bound(self.low)}"
        else:
            text = (f"{kind} in {'(' if self.low_open else '['}{_bound(self.low)}, "
                    f"{_bound(self.high)}]")
        return _or_null(text, self.optional)


@dataclass(frozen=True)
class Choice:
    """One of a few names, in any letter case (kept in lower case); null (the default) where
    `optional`."""

    options: tuple[str, ...]
    optional: bool = False

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if not isinstance(value, str) or value.lower() not in self.options:
            return None, f"{key}: {value!r} is not one of {', '.join(self.options)}"
        return value.lower(), None

    def schema(self) -> dict[str, Any]:
        return _nullable({"type": "string", "enum": list(self.options)}, self.optional)

    def describe(self) -> str:
        return _or_null(", ".join(self.options), self.optional)


@dataclass(frozen=True)
class Switch:
    """auto, on or off. YAML reads a bare on, off, yes, no, true or false as a boolean: true is
    on, false is off."""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if isinstance(value, bool):
            return ("on" if value else "off"), None
        if isinstance(value, str) and value.lower() in SWITCH:
            return value.lower(), None
        return None, f"{key}: {value!r} is not one of auto, on, off"

    def schema(self) -> dict[str, Any]:
        return {"anyOf": [{"type": "string", "enum": list(SWITCH)}, {"type": "boolean"}]}

    def describe(self) -> str:
        return "auto, on or off"


SWITCH = ("auto", "on", "off")


@dataclass(frozen=True)
class Flag:
    optional: bool = False  # null allowed too

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if value is None and self.optional:
            return None, None
        if not isinstance(value, bool):
            nullable = ", or null" if self.optional else ""
            return None, f"{key}: expected true or false{nullable}, got {value!r}"
        return value, None

    def schema(self) -> dict[str, Any]:
        return _nullable({"type": "boolean"}, self.optional)

    def describe(self) -> str:
        return _or_null("true, false", self.optional)


@dataclass(frozen=True)
class Text:
    """A non-blank string (kept stripped), matching `pattern` where given; `what` names it in
    the message (`expected <what>, got ...`), `noun` in `... is not a valid <noun>`, and `fix`
    says what a valid one looks like."""

    what: str = "a non-empty string"
    pattern: str | None = None
    fix: str = ""
    noun: str = "value"
    optional: bool = False
    strip: bool = True  # False: surrounding whitespace is part of the value (and so refused)

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if value is None and self.optional:
            return None, None
        if not isinstance(value, str) or not value.strip():
            return None, f"{key}: expected {self.what}, got {value!r}"
        text = value.strip() if self.strip else value
        if self.pattern is not None and not re.fullmatch(self.pattern, text):
            return None, f"{key}: {text[:40]!r} is not a valid {self.noun}; {self.fix}"
        return text, None

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string", "minLength": 1}
        if self.pattern is not None:
            out["pattern"] = f"^(?:{self.pattern})$"
        return _nullable(out, self.optional)

    def describe(self) -> str:
        return _or_null(self.what, self.optional)


def check_fields(raw: Mapping[str, Any], cls: type, problems: list[str],
                 prefix: str = "") -> dict[str, Any]:
    """The settings of `raw` that `cls` declares with a rule, checked in declaration order. A
    null given for an optional setting leaves its default."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        rule = f.metadata.get(RULE)
        if rule is None or f.name not in raw:
            continue
        if raw[f.name] is None and getattr(rule, "optional", False):
            if f.default is None:
                values[f.name] = None
            continue
        value, problem = rule.check(prefix + f.name, raw[f.name])
        if problem is not None:
            problems.append(problem)
        else:
            values[f.name] = value
    return values


def unknown_keys(raw: Mapping[str, Any], known: Iterable[str], problems: list[str],
                 prefix: str = "", noun: str = "setting", owner: str | None = None) -> bool:
    """One problem per key outside `known`, with the known keys that start alike; the last
    one lists every known key (once, however many keys are unknown). With `owner` (`scheme
    'equal'`), a key is `not a setting of <owner>` and the list keeps `known`'s order, since
    what a choice accepts depends on the choice. True when some key was unknown."""
    known = list(known) if owner else sorted(known)
    unknown = sorted(set(raw) - set(known), key=str)
    for i, key in enumerate(unknown):
        close = [k for k in known if k.startswith(str(key)[:3])]
        # A choice's own settings are quoted, as the choice is (`scheme 'siwlm'`).
        named = ", ".join(repr(k) if owner else k for k in close)
        hint = f" (did you mean {named}?)" if close else ""
        what = f"not a {noun} of {owner}" if owner else f"unknown {noun}"
        if i < len(unknown) - 1:
            listed = ""
        else:
            listed = (f"; its {noun}s are " if owner else f"; known {noun}s: ") + ", ".join(known)
        problems.append(f"{prefix}{key}: {what}{hint}{listed}")
    return bool(unknown)


def check_section(raw: Any, cls: type, where: str, problems: list[str], example: str,
                  known: Iterable[str] | None = None, noun: str = "setting"
                  ) -> dict[str, Any] | None:
    """A settings mapping such as `mixture: {experts: 4}`: its unknown keys and the values of
    the fields `cls` declares with a rule. None (and a problem) when `raw` is no mapping."""
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: expected a mapping such as {example}, got {raw!r}")
        return None
    names = known if known is not None else [f.name for f in dataclasses.fields(cls)]
    unknown_keys(raw, names, problems, prefix=f"{where}.", noun=noun)
    return check_fields(raw, cls, problems, prefix=f"{where}.")


def json_schema(cls: type, keys: Iterable[str] | None = None,
                parts: Mapping[str, dict[str, Any]] | None = None,
                required: Iterable[str] = ()) -> dict[str, Any]:
    """The JSON Schema of a settings mapping that `cls` declares: each field's rule (or the
    schema `parts` gives for a structured one; anything for the rest), with its description.
    `keys` are the mapping's keys when they are not exactly the dataclass's fields."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    properties: dict[str, Any] = {}
    for key in keys if keys is not None else fields:
        f = fields.get(key)
        rule = f.metadata.get(RULE) if f is not None else None
        schema = dict((parts or {}).get(key) or (rule.schema() if rule is not None and
                                                 hasattr(rule, "schema") else {}))
        if f is not None and DOC in f.metadata:
            schema["description"] = f.metadata[DOC]
        properties[key] = schema
    return {"type": "object", "properties": properties, "additionalProperties": False,
            **({"required": list(required)} if required else {})}
