"""The process-wide measuring slot: runs share the processor, so one measurement at a time, and nothing else of ours.

The recorder holds it while a Run's models run; the pair cache takes it to load compiled packages between Runs, so
no Run switches engines halfway. Its own module, so both can import it without importing each other.

Work this server does in the background on the same cores (loading a pair: converting, packing and warming its
weights) is declared with `background_work`. The two exclude each other: a measurement (`measuring`) waits until
the background work under way has finished or stepped aside at its next `pause_point` (between a load's stages), and
background work waits while a measurement runs or waits for its turn, so a Run is never timed beside it, waits for
one stage of it at most, and a stream of loads can never keep a Run waiting for ever.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

MEASURING_SLOT = threading.Lock()
POLL_S = 0.25  # how often a waiting measurement says what it waits for (and checks whether it was stopped)

_state = threading.Condition()
_background: Counter[str] = Counter()  # what the server does in the background now, by what it is
_measurements_waiting = 0  # measurements that asked for the slot and wait for it or for the background work


def slot_is_busy() -> bool:
    """Whether a measurement (or a package load) holds the slot now."""
    return MEASURING_SLOT.locked()


def background_now() -> str:
    """What this server does in the background now ("loading pycode-distilled"), "" for nothing."""
    with _state:
        return ", ".join(what for what, count in _background.items() if count > 0)


@contextmanager
def background_work(what: str) -> Iterator[None]:
    """Declare work on the processor beside the Runs (`what`: "loading NAME"): it starts once no measurement runs or
    waits, and measurements wait for it to finish, or for its next `pause_point`."""
    with _state:
        _wait_for_measurements()
        _background[what] += 1
    _held.__dict__.setdefault("work", []).append(what)
    try:
        yield
    finally:
        _held.work.pop()
        with _state:
            _leave(what)


def pause_point() -> bool:
    """Called by background work between its stages (a pair loaded, each warm-up run): where a measurement runs or
    waits, the work of this thread steps aside (it no longer counts as running) until the measurement is done, so a
    Run waits for one stage at most. Whether it paused."""
    mine = list(getattr(_held, "work", []))
    with _state:
        if not mine or not (MEASURING_SLOT.locked() or _measurements_waiting):
            return False
        for what in mine:
            _leave(what)
        _wait_for_measurements()
        for what in mine:
            _background[what] += 1
    return True


_held = threading.local()  # the background work this thread declared, innermost last


def _wait_for_measurements() -> None:
    """Under _state: until no measurement runs or waits."""
    while MEASURING_SLOT.locked() or _measurements_waiting:
        _state.wait(POLL_S)


def _leave(what: str) -> None:
    """Under _state: one piece of `what` no longer runs."""
    _background[what] -= 1
    if _background[what] <= 0:
        del _background[what]
    _state.notify_all()


@contextmanager
def announced() -> Iterator[None]:
    """A measurement on its way to the slot (queued for the server's timed thread, serving/torch_threads.py): background
    work steps aside from now on, not only once the measurement starts."""
    global _measurements_waiting
    with _state:
        _measurements_waiting += 1
    try:
        yield
    finally:
        with _state:
            _measurements_waiting -= 1
            _state.notify_all()


@contextmanager
def measuring(
    waiting: Callable[[str], None] = lambda what: None, should_stop: Callable[[], bool] = lambda: False
) -> Iterator[float]:
    """Hold the slot, once the background work under way has finished (no new work starts meanwhile); `waiting` is
    told what it waits for at every poll. Yields the seconds waited for background work. A stopped wait holds the slot
    at once (the run it guards stops too)."""
    global _measurements_waiting
    with _state:
        _measurements_waiting += 1
    try:
        MEASURING_SLOT.acquire()
    except BaseException:
        with _state:
            _measurements_waiting -= 1
        raise
    try:
        started = time.perf_counter()
        with _state:
            try:
                while _background and not should_stop():
                    waiting(", ".join(_background))
                    _state.wait(POLL_S)
            finally:
                _measurements_waiting -= 1
        yield time.perf_counter() - started
    finally:
        MEASURING_SLOT.release()
        with _state:
            _state.notify_all()
