"""What the app's buttons do, as plain functions (no Gradio here): requests, per-session runs, playback, step mode."""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Literal

from specviz.engine.events import Cycle
from specviz.trace import Trace
from specviz.ui.render import PHASES, Phase

PLAYBACK = {"real pace": 1.0, "10× slower": 10.0, "50× slower": 50.0}
DEFAULT_PLAYBACK = "10× slower"
FRAME_INTERVAL_S = 1 / 12  # playback sends at most this many frames a second, whatever the pace
Verification = Literal["exact", "greedy", "lenient"]


@dataclass(frozen=True)
class RunRequest:
    """Everything the user chose for one run, by name."""

    pair: str
    prompt: str
    gamma: int = 4
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 64
    seed: int = 0
    drafter: str = "model"
    verification: Verification = "exact"
    lenience: float = 0.5
    playback: str = DEFAULT_PLAYBACK

    @classmethod
    def from_values(cls, values: dict[str, object]) -> RunRequest:
        """From {field name: value}; names the request does not know are ignored, missing ones keep their defaults."""
        names = {f.name for f in fields(cls)}
        return cls(**{name: value for name, value in values.items() if name in names and value is not None})

    def settings(self):
        """The engine's settings, validated (SettingsError with one sentence if a value is out of range)."""
        from specviz.engine import DecodeSettings, SamplingSettings, SettingsError

        try:
            temperature = 0.0 if self.verification == "greedy" else float(self.temperature)
            return DecodeSettings(
                max_new_tokens=int(self.max_new_tokens),
                gamma=int(self.gamma),
                sampling=SamplingSettings(temperature=temperature, top_k=int(self.top_k or 0), top_p=float(self.top_p)),
                seed=int(self.seed or 0),
                lenience=float(self.lenience) if self.verification == "lenient" else 1.0,
            ).validate()
        except (TypeError, ValueError) as error:
            if isinstance(error, SettingsError):
                raise
            raise SettingsError(f"a setting is not a number: {error}") from None

    @property
    def slowdown(self) -> float:
        return PLAYBACK.get(self.playback, PLAYBACK[DEFAULT_PLAYBACK])


@dataclass(frozen=True)
class Ticket:
    """One run of one session; it stays current until the session starts another run or presses Stop."""

    session: str
    number: int  # unique in this process: the page's data-run-id


class Sessions:
    """Per-session run state: which run is current. Idle sessions are forgotten, so the table stays small."""

    def __init__(self, max_sessions: int = 2000, idle_s: float = 6 * 3600) -> None:
        self.max_sessions, self.idle_s = max_sessions, idle_s
        self._current: OrderedDict[str, tuple[int, float]] = OrderedDict()  # session → (run number, last use)
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()

    def start(self, session: str) -> Ticket:
        """A new run for this session; any older run of the session stops at its next check."""
        with self._lock:
            number = next(self._numbers)
            self._touch(session, number)
            return Ticket(session, number)

    def stop(self, session: str) -> None:
        with self._lock:
            self._touch(session, next(self._numbers))

    def is_current(self, ticket: Ticket) -> bool:
        entry = self._current.get(ticket.session)
        return entry is not None and entry[0] == ticket.number

    def __len__(self) -> int:
        return len(self._current)

    def _touch(self, session: str, number: int) -> None:
        now = time.monotonic()
        self._current[session] = (number, now)
        self._current.move_to_end(session)
        while self._current and (
            len(self._current) > self.max_sessions or now - next(iter(self._current.values()))[1] > self.idle_s
        ):
            self._current.popitem(last=False)


def timeline(trace: Trace, slowdown: float) -> list[tuple[float, int, Phase]]:
    """(seconds after the start of playback, cycles shown, phase) for every phase of every cycle, at the recorded pace."""
    moments, t = [], trace.summary.prefill_s if trace.summary else 0.0
    for n, cycle in enumerate(trace.cycles, start=1):
        moments.append((t * slowdown, n, "draft"))
        t += cycle.draft_s
        moments.append((t * slowdown, n, "verify"))
        t += cycle.verify_s + cycle.overhead_s
        moments.append((t * slowdown, n, "decide"))
    return moments


def playback(
    trace: Trace,
    slowdown: float,
    keep_going=lambda: True,
    frame_interval_s: float = FRAME_INTERVAL_S,
    hold=lambda: False,
) -> Iterator[tuple[int, Phase]]:
    """Cursor positions at the recorded pace × slowdown, at most one per frame interval (phases already past are skipped).

    While hold() is true (another session is being measured) playback freezes, clock included, so
    that our drawing never runs inside someone else's timed section.
    """
    moments = timeline(trace, slowdown)
    started, shown = time.perf_counter(), 0
    while shown < len(moments) and keep_going():
        if hold():
            held_at = time.perf_counter()
            while hold() and keep_going():
                time.sleep(0.02)
            started += time.perf_counter() - held_at
            continue
        now = time.perf_counter() - started
        due = shown
        while due + 1 < len(moments) and moments[due + 1][0] <= now:
            due += 1
        if moments[due][0] > now:
            pause(moments[due][0] - now, keep_going)
            continue
        yield moments[due][1], moments[due][2]
        shown = due + 1
        pause(frame_interval_s, keep_going)


def pause(seconds: float, keep_going=lambda: True) -> None:
    """A wait that ends within 50 ms of keep_going() turning false."""
    deadline = time.perf_counter() + seconds
    while keep_going() and (left := deadline - time.perf_counter()) > 0:
        time.sleep(min(left, 0.05))


def next_cursor(trace: Trace, shown_cycles: int, phase: Phase) -> tuple[int, Phase] | None:
    """Step mode: draft → verify → decide, then the next cycle; None after the last phase."""
    if shown_cycles == 0:
        return (1, "draft") if trace.cycles else None
    index = PHASES.index(phase)
    if index < len(PHASES) - 1:
        return shown_cycles, PHASES[index + 1]
    if shown_cycles < len(trace.cycles):
        return shown_cycles + 1, "draft"
    return None


def inspector_choices(cycles: list[Cycle]) -> list[tuple[str, str]]:
    """(label, "cycle:position") for every drafted token and every target token of the trace."""
    choices = []
    for cycle in cycles:
        for i, position in enumerate(cycle.positions):
            choices.append(
                (f"cycle {cycle.index + 1} · draft {i + 1} {position.text!r} ({position.status})", f"{cycle.index}:{i}")
            )
        if cycle.bonus_token_id is not None:
            choices.append(
                (f"cycle {cycle.index + 1} · target's {cycle.new_token_text!r} (bonus)", f"{cycle.index}:{len(cycle.positions)}")
            )
        else:  # the residual it was drawn from is shown at the rejected position
            choices.append(
                (f"cycle {cycle.index + 1} · target's {cycle.new_token_text!r} (resampled)", f"{cycle.index}:{cycle.n_accepted}")
            )
    return choices
