"""What `python -m specviz hardware --save` measured on this machine, as the page shows it; a missing or stale
measurement is logged and shown as nothing, never an error."""

from __future__ import annotations

import logging

from specviz.analysis.hardware_cache import hardware_sentence, saved_batch_curve
from specviz.serving import pair_cache

log = logging.getLogger("specviz")


def hardware_line(pair_name: str) -> str | None:
    """A sentence on this pair's real architectures on this machine, if `python -m specviz hardware --save` measured it."""
    try:
        return hardware_sentence(pair_name)
    except Exception:  # a missing or stale measurement must never break a run
        log.exception("reading the hardware measurements failed")
        return None


def saved_batches(pair_name: str, device: str | None) -> dict | None:
    """This pair's batch curve, if `python -m specviz hardware --batch ... --save` measured one on this kind of device."""
    try:
        return saved_batch_curve(pair_name, device or "cpu")
    except Exception:
        log.exception("reading the saved batch curve failed")
        return None


def hardware_lines() -> str:
    """Every catalogue pair measured on this machine by `python -m specviz hardware --save`, one line each."""
    lines = [line for name in pair_cache.catalogue().pairs if (line := hardware_line(name))]
    if not lines:
        return "No real-architecture timings saved on this machine yet: `python -m specviz hardware --pair NAME --save` adds one."
    return "**On this machine** (random-weight real architectures, timed by `python -m specviz hardware`):\n\n" + "\n".join(
        f"- {line}" for line in lines
    )
