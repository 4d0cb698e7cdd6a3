"""The process-wide measuring slot: runs share the processor, so one measurement at a time, and nothing else of ours.

The recorder holds it while a Run's models run; the pair cache takes it to load compiled packages between Runs, so
no Run switches engines halfway. Its own module, so both can import it without importing each other.
"""

from __future__ import annotations

import threading

MEASURING_SLOT = threading.Lock()


def slot_is_busy() -> bool:
    """Whether a measurement (or a package load) holds the slot now."""
    return MEASURING_SLOT.locked()
