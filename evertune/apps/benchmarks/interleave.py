"""Interleaved repeats: repeat r measures every configuration, in an order rotated by r.

A machine's speed drifts over a benchmark (other work, heat, caches); measuring A, B, C, then
B, C, A, then C, A, B spreads that drift over every configuration instead of charging it to
whichever comes last.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def rotated(items: Sequence[T], by: int) -> list[T]:
    """`items` started at index `by` (modulo their count) and wrapped round; empty stays empty."""
    if not items:
        return []
    shift = by % len(items)
    return [*items[shift:], *items[:shift]]
