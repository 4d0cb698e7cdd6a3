"""Values from outside (a request, a shared file) checked against their field's type and range, before anything uses them.

Each check is a function (value, field name) → the value, cleaned (a whole number, a finite float, text, a tuple,
a record of known keys); a wrong value raises InputError, whose message is one sentence that names the field and
what it may be. A sentence never repeats text it was sent (that text is hostile until checked): it describes the
value instead ("got text", "got a list", "got 2.5"). Light: no torch, no Gradio.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable
from dataclasses import MISSING, fields
from typing import Any

Check = Callable[[Any, str], Any]


class InputError(ValueError):
    """A value from a request or a file that is not allowed; the message is one sentence for the user."""


def got(value: object) -> str:
    """What was sent, described without repeating any text of it."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        digits = int(value.bit_length() * math.log10(2)) + 1  # str() of a 10^5000 would itself raise
        return f"{value}" if digits <= 15 else f"a whole number of about {digits:,} digits"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, str):
        return f"text of {len(value):,} characters" if len(value) > 40 else "text"
    if isinstance(value, list | tuple):
        return f"a list of {len(value):,} items"
    if isinstance(value, dict):
        return "a record"
    return f"a {type(value).__name__}"


def fail(name: str, allowed: str, value: object) -> InputError:
    return InputError(f"{name} must be {allowed} (got {got(value)}).")


def _number_text(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.6g}"


def whole(low: int, high: int) -> Check:
    """An int from low to high (a float with no fraction, such as a slider's 4.0, counts; true/false do not)."""
    allowed = f"a whole number from {low:,} to {high:,}"

    def check(value: Any, name: str) -> int:
        if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 2**63:
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise fail(name, allowed, value)
        return value

    return check


def number(low: float, high: float, *, above_low: bool = False, allowed: str | None = None) -> Check:
    """A finite float from low (or above it) to high."""
    if allowed is None:
        allowed = (
            f"a number above {_number_text(low)} and at most {_number_text(high)}"
            if above_low
            else f"a number from {_number_text(low)} to {_number_text(high)}"
        )

    def check(value: Any, name: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise fail(name, allowed, value)
        if isinstance(value, int) and abs(value) > 2**1000:  # float() of a 10^400 raises
            raise fail(name, allowed, value)
        as_float = float(value)
        in_range = low < as_float <= high if above_low else low <= as_float <= high
        if not (math.isfinite(as_float) and in_range):
            raise fail(name, allowed, value)
        return as_float

    return check


def text(max_chars: int) -> Check:
    """A str of at most max_chars characters (it stays a str: whoever shows it escapes it)."""

    def check(value: Any, name: str) -> str:
        if not isinstance(value, str):
            raise fail(name, f"text of at most {max_chars:,} characters", value)
        if len(value) > max_chars:
            raise InputError(f"{name} is {len(value):,} characters; the limit is {max_chars:,}.")
        return value

    return check


def choice(options: Iterable[str] | Callable[[], Iterable[str]]) -> Check:
    """One of the options (a callable is asked each time: the catalogue's pairs, say)."""

    def check(value: Any, name: str) -> str:
        allowed = list(options() if callable(options) else options)
        if not isinstance(value, str) or value not in allowed:
            raise fail(name, "one of " + ", ".join(repr(option) for option in allowed), value)
        return value

    return check


def flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise fail(name, "true or false", value)
    return value


def optional(check: Check) -> Check:
    """None, or a value that passes `check`."""
    return lambda value, name: None if value is None else check(value, name)


def items(check: Check, max_items: int) -> Check:
    """A list of at most max_items values, each passing `check`: a tuple (the frozen events hold tuples)."""

    def check_list(value: Any, name: str) -> tuple:
        if not isinstance(value, list | tuple):
            raise fail(name, f"a list of at most {max_items:,} items", value)
        if len(value) > max_items:
            raise InputError(f"{name} has {len(value):,} items; the limit is {max_items:,}.")
        return tuple(check(item, f"{name}[{i}]") for i, item in enumerate(value))

    return check_list


def fixed(*checks: Check, says: str) -> Check:
    """A list of exactly len(checks) values, the i-th passing checks[i] (says: what the list is, for the sentence)."""

    def check(value: Any, name: str) -> tuple:
        if not isinstance(value, list | tuple) or len(value) != len(checks):
            raise fail(name, says, value)
        return tuple(part(item, f"{name}[{i}]") for i, (part, item) in enumerate(zip(checks, value)))

    return check


def record(checks: dict[str, Check], required: Collection[str] = ()) -> Check:
    """A JSON object: the known keys checked, the required ones present, unknown keys dropped."""

    def check(value: Any, name: str) -> dict:
        if not isinstance(value, dict):
            raise fail(name, "a record (a JSON object)", value)
        for key in required:
            if key not in value:
                raise InputError(f"{name}.{key} is missing.")
        return {key: part(value[key], f"{name}.{key}") for key, part in checks.items() if key in value}

    return check


def record_of(kind: type, checks: dict[str, Check]) -> Check:
    """A record of a dataclass's fields: those without a default are required; every field must have a check."""
    missing = {f.name for f in fields(kind)} - checks.keys()
    if missing:
        raise TypeError(f"no check for {kind.__name__}'s fields {sorted(missing)}")
    required = [f.name for f in fields(kind) if f.default is MISSING and f.default_factory is MISSING]
    return record(checks, required)
