"""Random draws that the members of a stacked model share (`weightsearch.trainer.stacked`).

A stacked model runs K members on their shared batch replicated K times along its first
dimension, member-major. Inside its forward pass each random site draws for the first 1/K of
the rows, exactly the numbers a stand-alone run with the same random state draws for its batch,
and repeats them over the members. Outside a stacked forward pass (one member) each helper is
the plain draw, so a stand-alone run computes what it always did.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from contextvars import ContextVar

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclasses.dataclass
class Stack:
    """The stacked forward pass under way: its members and the rows of the wide batch."""

    members: int = 1
    rows: int = 0  # the encoder's input rows, all members together
    attention_calls: int = 0  # attention layers that drew their dropout through `dropout`


_NONE = Stack()
_CURRENT: ContextVar[Stack] = ContextVar("stack", default=_NONE)


@contextlib.contextmanager
def stacked(members: int, rows: int) -> Iterator[Stack]:
    """Mark a stacked forward pass of `members` members over `rows` wide rows."""
    state = Stack(members, rows)
    token = _CURRENT.set(state)
    try:
        yield state
    finally:
        _CURRENT.reset(token)


def current() -> Stack:
    return _CURRENT.get()


def member_rows(rows: int) -> int:
    """One member's share of `rows` rows of the wide batch (all of them outside one)."""
    return rows // current().members


def repeat_members(drawn: Tensor) -> Tensor:
    """`drawn`, drawn for one member's rows, repeated for every member."""
    members = current().members
    return drawn if members == 1 else drawn.repeat(members, *[1] * (drawn.dim() - 1))


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """`F.dropout`, with one mask for every member: the mask a stand-alone run draws, since
    a mask of ones times x is x times the mask, to the last bit."""
    members = current().members
    if members == 1 or not training or p == 0:
        return F.dropout(x, p, training)
    keep = F.dropout(torch.ones_like(x[:x.shape[0] // members]), p, True)
    return x * repeat_members(keep)


__all__ = ["Stack", "current", "dropout", "member_rows", "repeat_members", "stacked"]
