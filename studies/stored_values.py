"""Stored values as the study readers can use them: anything may share the database (another
tool's study, an edited file), so a value counts as a number, a count or a string only where it
is one, and as a score only where it is finite and within USABLE_LIMIT."""

from __future__ import annotations

import math

# A stored score beyond this (or not finite) is no measurement: another tool, or an edited
# database, wrote it. Left out with a note, since means and variances of such values overflow
# (statistics.fmean raised OverflowError on two trials at 1e308). The importer's own limits are
# far inside it.
USABLE_LIMIT = 1e12


def usable(v) -> float | None:
    """A stored number as a score the readers can average: finite and within USABLE_LIMIT
    (a bool, a string or an int too large for a float is none); else None."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        number = float(v)
    except OverflowError:  # an int beyond a float's range, from another tool's JSON
        return None
    return number if math.isfinite(number) and abs(number) <= USABLE_LIMIT else None


def as_int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):  # int(inf) overflows
        return None


def as_float(v) -> float | None:
    """A finite float, or None (an infinite or NaN stored value means nothing here)."""
    try:
        number = float(v) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError, OverflowError):
        return None
    return number if number is not None and math.isfinite(number) else None


def as_str(v) -> str | None:
    return v if isinstance(v, str) else None


def as_count(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
