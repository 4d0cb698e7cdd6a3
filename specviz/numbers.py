"""How a number is written for people: one function for every view (page, lessons, CLI)."""

from __future__ import annotations

MISSING = "—"  # a number not measured (yet)


def number(value: float | None, digits: int = 3, missing: str = MISSING) -> str:
    """`value` with `digits` decimals, or `missing` when there is none."""
    return missing if value is None else f"{value:.{digits}f}"
