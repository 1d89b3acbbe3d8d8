"""Enumerated codes read off the wire: a code a newer peer may send maps to ``UNKNOWN``."""

from __future__ import annotations

from enum import IntEnum
from typing import TypeVar

E = TypeVar("E", bound=IntEnum)


def from_wire(cls: type[E], code: int) -> E:
    """The member of ``cls`` for ``code``, or ``cls.UNKNOWN`` when there is none."""
    try:
        return cls(int(code))
    except ValueError:
        return cls["UNKNOWN"]
