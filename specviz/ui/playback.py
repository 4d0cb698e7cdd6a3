"""Playing a recorded trace back: the timeline of its phases at the recorded pace, and step mode's cursor (no Gradio)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from specviz.run.trace import Trace
from specviz.ui.render import PHASES, Phase

FRAME_INTERVAL_S = 1 / 12  # playback sends at most this many frames a second, whatever the pace


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


def recorded_s(trace: Trace) -> float:
    """Seconds from the start of the recorded run to its last decision: what playback stretches by the slowdown."""
    moments = timeline(trace, 1.0)
    return moments[-1][0] if moments else 0.0


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
        now = time.perf_counter()  # moments are compared as clock readings, so a wait and its check agree to the bit
        due = shown
        while due + 1 < len(moments) and started + moments[due + 1][0] <= now:
            due += 1
        if started + moments[due][0] > now:
            pause_until(started + moments[due][0], keep_going)
            continue
        yield moments[due][1], moments[due][2]
        shown = due + 1
        pause(frame_interval_s, keep_going)


def pause(seconds: float, keep_going=lambda: True) -> None:
    """A wait that ends within 50 ms of keep_going() turning false."""
    pause_until(time.perf_counter() + seconds, keep_going)


def pause_until(deadline: float, keep_going=lambda: True) -> None:
    """Wait until the clock reads `deadline`, ending within 50 ms of keep_going() turning false."""
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
