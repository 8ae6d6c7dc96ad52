"""`--set key=value` overrides of a run config's or a study file's settings, as the command
line gives them (a dotted key reaches into a nested mapping)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from weightsearch.core.errors import ConfigError
from weightsearch.core.yamlio import load_yaml


def apply_overrides(
    raw: Mapping[str, Any], overrides: Iterable[str], label: str | None = None
) -> dict[str, Any]:
    """`--set a.b=value`: the value is parsed as YAML, so numbers, lists and nulls work."""
    out = json.loads(json.dumps(raw, default=str))  # deep copy of plain data
    problems = []
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            problems.append(f"--set {item!r}: expected key=value, e.g. --set epochs=3")
            continue
        try:
            value = load_yaml(text)
        except yaml.YAMLError:
            value = text
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
    if problems:
        raise ConfigError(problems, label)
    return out
