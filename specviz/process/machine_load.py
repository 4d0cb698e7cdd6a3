"""How much of the processor other programs take while specviz times a run: wait for quiet first, then report it.

On a small machine the page that shows a run is itself a program that needs the processor: a browser
still drawing the last frame, or animating a progress bar, took 40 to 100 CPU-seconds during one
50–110 s measurement of the real pair on 2 cores and slowed the target to a third of its speed. So the
app waits until the other programs it can see are quiet before it starts the clock, and records how busy
they were while it ran, so a slowed number is flagged instead of shown as the pair's speed.

"Other programs" are the processes this one can see in /proc (on a desktop, the user's browser; in a
container, the container's own processes, not its neighbours'). Each is told apart by its pid and start
time, so a process that ends or a pid that is reused during the window never skews the sum. Where there
is no /proc (macOS, Windows), nothing is measured: the app waits a fixed short time and reports no load.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

PROC = Path("/proc")
POLL_S = 0.25
Snapshot = dict[tuple[int, int], float]  # (pid, start time in ticks) → CPU seconds used so far


def _ticks_per_s() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (AttributeError, ValueError, OSError):
        return 100


TICKS_PER_S = _ticks_per_s()


def quiet_cores(cores: int | None = None) -> float:
    """Other programs' load below which timing is fair: a quarter of a core, or a tenth of the machine if more."""
    return max(0.25, 0.1 * (cores or os.cpu_count() or 1))


BUSY_KEPT_S = 600.0  # a choice measured beside other work (γ auto's, a weight form's) serves this long, then is measured again


def still_kept(busy: bool, kept_at: float) -> bool:
    """Whether a kept measurement still serves: always where the machine was quiet, for BUSY_KEPT_S where it was busy."""
    return not busy or 0 <= time.time() - float(kept_at) < BUSY_KEPT_S


def process_cpu_s(pid: int) -> tuple[int, float] | None:
    """(start time in ticks, user + system CPU seconds so far) of one process, all its threads; None if it is gone."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()  # after the name, which may hold spaces
        return int(fields[19]), (int(fields[11]) + int(fields[12])) / TICKS_PER_S
    except (OSError, ValueError, IndexError):  # the process ended while we looked
        return None


def snapshot() -> Snapshot | None:
    """CPU seconds used so far by every process this one can see, except itself (None where there is no /proc)."""
    if not (PROC / "self" / "stat").exists():
        return None
    me, seen = os.getpid(), {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and int(entry.name) != me and (read := process_cpu_s(int(entry.name))) is not None:
            seen[(int(entry.name), read[0])] = read[1]
    return seen


def cpu_between(before: Snapshot, after: Snapshot) -> float:
    """CPU seconds the other programs used between two snapshots: growth of those in both, all of those that started."""
    return sum(used - before.get(process, 0.0) for process, used in after.items() if used >= before.get(process, 0.0))


@dataclass(frozen=True)
class OtherLoad:
    """Other programs' use of the processor during a timed section, in cores (1.0 = one core fully busy)."""

    other_cores: float | None  # None where it cannot be measured
    settle_s: float = 0.0  # how long the app waited for quiet before timing
    own_work: str = ""  # what this very process did meanwhile, unseen by other_cores ("loading a pair"); "" if nothing

    @property
    def busy(self) -> bool:
        return bool(self.own_work) or (self.other_cores is not None and self.other_cores > quiet_cores())

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> OtherLoad:
        """From to_json's dict; ValueError if it is not one."""
        cores, settle_s, own_work = data.get("other_cores"), data.get("settle_s", 0.0), data.get("own_work", "")
        if not (cores is None or isinstance(cores, int | float)) or not isinstance(settle_s, int | float):
            raise ValueError(f"not a processor load: {data!r}")
        if not isinstance(own_work, str):
            raise ValueError(f"not a processor load: {data!r}")
        return cls(cores, settle_s, own_work)


def settle(min_s: float, max_s: float, should_stop: Callable[[], bool] = lambda: False) -> float:
    """Wait at least min_s, then until the other programs are quiet for one poll, at most max_s; return the seconds waited."""
    started = time.perf_counter()
    time.sleep(min_s)
    before, polled = snapshot(), time.perf_counter()
    if before is None:
        return time.perf_counter() - started
    limit = quiet_cores()
    while time.perf_counter() - started < max_s and not should_stop():
        time.sleep(POLL_S)
        now, at = snapshot(), time.perf_counter()
        if cpu_between(before, now) / (at - polled) <= limit:
            break
        before, polled = now, at
    return time.perf_counter() - started


class LoadMeter:
    """Measures the other programs' load over a `with` block; `own_work` says what this process itself is doing
    beside the block (asked as it starts and as it ends: "" for nothing), which no other program's load shows."""

    def __init__(self, settle_s: float = 0.0, own_work: Callable[[], str] = lambda: ""):
        self.settle_s = settle_s
        self.own_work = own_work
        self.result: OtherLoad | None = None

    def __enter__(self) -> LoadMeter:
        self._own = self.own_work()
        self._before, self._started = snapshot(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        seconds, after = time.perf_counter() - self._started, snapshot()
        known = self._before is not None and after is not None and seconds > 0
        own = self._own or self.own_work()
        self.result = OtherLoad(cpu_between(self._before, after) / seconds if known else None, self.settle_s, own)
