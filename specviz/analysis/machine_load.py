"""How much of the processor other programs take while specviz times a run: wait for quiet first, then report it.

On a small machine the page that shows a run is itself a program that needs the processor: a browser
still drawing the last frame, or animating a progress bar, took 40 to 100 CPU-seconds during one
50–110 s measurement of the real pair here and slowed the target to a third of its speed. So the app
waits until the other programs it can see are quiet before it starts the clock, and records how busy
they were while it ran, so a slowed number is flagged instead of shown as the pair's speed.

"Other programs" are the processes this one can see in /proc (on a desktop, the user's browser; in a
container, the container's own processes, not its neighbours'). Where there is no /proc (macOS,
Windows), nothing is measured: the app waits a fixed short time and reports no load.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
QUIET_CORES = 0.25  # others using less than a quarter of one core: quiet enough to time a run
BUSY_CORES = 0.25  # others using more than this while a run was timed: the page says its numbers may be slowed
POLL_S = 0.25


def _ticks_per_s() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (AttributeError, ValueError, OSError):
        return 100


TICKS_PER_S = _ticks_per_s()


def _process_cpu_s(stat: Path) -> float:
    """User + system CPU seconds of one process, all its threads, from /proc/PID/stat."""
    fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def others_cpu_s() -> float | None:
    """CPU seconds used so far by every process this one can see, except itself (None where there is no /proc)."""
    if not (PROC / "self" / "stat").exists():
        return None
    me, total = os.getpid(), 0.0
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            total += _process_cpu_s(entry / "stat")
        except (OSError, ValueError, IndexError):  # the process ended while we looked
            continue
    return total


@dataclass(frozen=True)
class OtherLoad:
    """Other programs' use of the processor during a timed section, in cores (1.0 = one core fully busy)."""

    cores: float | None  # None where it cannot be measured
    settle_s: float  # how long the app waited for quiet before timing

    @property
    def busy(self) -> bool:
        return self.cores is not None and self.cores > BUSY_CORES

    def to_json(self) -> dict:
        return {"other_cores": self.cores, "settle_s": self.settle_s}

    @classmethod
    def from_json(cls, data: dict | None) -> OtherLoad | None:
        return cls(data.get("other_cores"), data.get("settle_s", 0.0)) if data else None


def settle(min_s: float, max_s: float, quiet_cores: float = QUIET_CORES) -> float:
    """Wait at least min_s, then until the other programs are quiet for one poll, at most max_s; return the seconds waited."""
    started = time.perf_counter()
    time.sleep(min_s)
    before = others_cpu_s()
    if before is None:
        return time.perf_counter() - started
    while time.perf_counter() - started < max_s:
        time.sleep(POLL_S)
        now = others_cpu_s()
        if (now - before) / POLL_S <= quiet_cores:
            break
        before = now
    return time.perf_counter() - started


class LoadMeter:
    """Measures the other programs' load over a `with` block."""

    def __init__(self, settle_s: float = 0.0):
        self.settle_s = settle_s
        self.result: OtherLoad | None = None

    def __enter__(self) -> LoadMeter:
        self._cpu, self._wall = others_cpu_s(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        wall = time.perf_counter() - self._wall
        cpu = others_cpu_s()
        cores = None if cpu is None or self._cpu is None or wall <= 0 else max(0.0, (cpu - self._cpu) / wall)
        self.result = OtherLoad(cores, self.settle_s)
