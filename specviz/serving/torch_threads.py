"""Which of the server's threads runs torch: one long-lived thread for everything timed, a thread that ends with it for
the rest (issue 51, docs/performance.md "Two modes").

torch's OpenMP runtime (libgomp) gives every thread that runs a parallel region a team of its own, kept for as long as
that thread lives. Its idle team members spin about 3 ms for the next region only while libgomp manages no more
threads than the machine has CPUs; past that they spin 100 iterations, then sleep, and every region pays a wake-up
(`python benchmarks/openmp_regions.py`: 5–10 µs a region against 50–70). A server that ran torch on whichever request
thread served a Run kept one team per thread, and flipped between the two paces with its threads' history.

So here:
- `timed`: everything that is timed (a Run's rounds, a lesson's measurement, γ auto's calibration) runs on one
  long-lived thread, the only team alive while the clock runs;
- `passing`: the other torch work (loading a pair, warming it, loading compiled packages) runs on a thread that ends
  when it returns, and takes its team with it. Loads step aside between stages (serving/measuring_slot.pause_point)
  with no team left behind.
A command (`bench`, `run`) runs torch on its main thread alone and needs neither.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

Params = ParamSpec("Params")
Result = TypeVar("Result")

TIMED_THREAD_NAME = "specviz-timed"

_timed = ThreadPoolExecutor(max_workers=1, thread_name_prefix=TIMED_THREAD_NAME)  # one worker, alive as long as the server


def on_timed_thread() -> bool:
    """Whether the caller is the server's timed thread."""
    return threading.current_thread().name.startswith(TIMED_THREAD_NAME)


def timed(work: Callable[Params, Result], *args: Params.args, **kwargs: Params.kwargs) -> Result:
    """`work(*args, **kwargs)` on the server's one timed thread (inline when already on it), its result or its error."""
    if on_timed_thread():
        return work(*args, **kwargs)
    return _timed.submit(work, *args, **kwargs).result()


def passing(work: Callable[Params, Result], *args: Params.args, **kwargs: Params.kwargs) -> Result:
    """`work(*args, **kwargs)` on a new thread that ends when it returns (its OpenMP team ends with it); its result or
    its error, in the caller. On the timed thread it runs inline: that thread's team stays anyway."""
    if on_timed_thread():
        return work(*args, **kwargs)
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["result"] = work(*args, **kwargs)
        except BaseException as error:  # handed to the caller, who raises it
            outcome["error"] = error

    thread = threading.Thread(target=run, name=f"{threading.current_thread().name}-torch", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["result"]  # type: ignore[return-value]
