"""Which run of each session is current: a newer Run or Stop retires the older run at its next check."""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class Ticket:
    """One run of one session; it stays current until the session starts another run or presses Stop."""

    session: str
    number: int  # unique in this process: the page's data-run-id


class Sessions:
    """Per-session run state: which run is current. Idle sessions are forgotten, so the table stays small."""

    def __init__(self, max_sessions: int = 2000, idle_s: float = 6 * 3600) -> None:
        self.max_sessions, self.idle_s = max_sessions, idle_s
        self._current: OrderedDict[str, tuple[int, float, bool]] = OrderedDict()  # session → (run number, last use, by Stop)
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()

    def start(self, session: str) -> Ticket:
        """A new run for this session; any older run of the session stops at its next check."""
        with self._lock:
            number = next(self._numbers)
            self._touch(session, number, by_stop=False)
            return Ticket(session, number)

    def stop(self, session: str) -> None:
        with self._lock:
            self._touch(session, next(self._numbers), by_stop=True)

    def is_current(self, ticket: Ticket) -> bool:
        entry = self._current.get(ticket.session)
        return entry is not None and entry[0] == ticket.number

    def was_stopped(self, ticket: Ticket) -> bool:
        """True when Stop (not a newer run) retired this run: its handler then has the last word on the page."""
        entry = self._current.get(ticket.session)
        return entry is not None and entry[2] and entry[0] > ticket.number

    def __len__(self) -> int:
        return len(self._current)

    def _touch(self, session: str, number: int, by_stop: bool) -> None:
        now = time.monotonic()
        self._current[session] = (number, now, by_stop)
        self._current.move_to_end(session)
        while self._current and (
            len(self._current) > self.max_sessions or now - next(iter(self._current.values()))[1] > self.idle_s
        ):
            self._current.popitem(last=False)
