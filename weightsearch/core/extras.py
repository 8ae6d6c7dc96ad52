"""Clear messages for features whose optional dependencies (extras) are not installed."""

from __future__ import annotations

import importlib

from weightsearch.core.errors import MissingExtra


def require_extra(extra: str, *modules: str, feature: str) -> None:
    """MissingExtra (a ConfigError, exit code 2) naming the extra to install when one of
    `modules` cannot be imported (the feature imports them next anyway)."""
    missing = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise MissingExtra(f"{feature} needs {', '.join(missing)}, which the core install lacks; "
                           f"pip install 'weightsearch[{extra}]'")
