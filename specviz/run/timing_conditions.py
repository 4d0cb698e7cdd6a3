"""What every timed run runs under, on the page (serving/recorder.py) and in `bench` (deployment/benchmark.py) alike,
so that the two time one path: the same engine and threads (each run records both, engine/events.RunStarted), each
shape warmed before it is timed, and Python's garbage collector kept out of the clock.

- Warm-up: the first requests of a shape pay for what later ones find ready (a package's first calls after it loads,
  a new number of verify rows, the allocator's pools). `warm_up` runs both methods once, untimed, with exactly the
  settings about to be timed, the first time this process times them on this engine: after the compile worker's
  packages load, the page's next Run warms them instead of timing their first calls.
- The collector: a full collection of a server's heap (gradio, plotly, every trace kept for a session) takes tens of
  milliseconds, and it lands in whichever half allocates past the threshold. `collector_paused` collects first, then
  holds it off until the timed section ends.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

from specviz.engine.settings import DecodeSettings
from specviz.run.runner import run

if TYPE_CHECKING:
    from specviz.models.loading import LoadedPair

WARM_UP_TOKENS = 8
_warmed: set[tuple] = set()
_warmed_lock = threading.Lock()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Collect now, then no collection until the block ends (the timed runs' garbage waits a few seconds)."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def shape_key(pair: LoadedPair, settings: DecodeSettings, drafter: str) -> tuple:
    """What a warm-up covers: the pair as loaded, the engine its requests start on, the drafter and the shape drafted."""
    from specviz.engine.compiled import pair_engine

    tree = settings.tree.text if settings.tree else ""
    return (
        pair.name,
        id(pair),
        pair_engine(pair),
        drafter,
        settings.gamma,
        tree,
        settings.sampling.greedy,
        settings.verification,
    )


def warm_up(pair: LoadedPair, prompt: str, settings: DecodeSettings, drafter: str) -> bool:
    """Both methods once, untimed and short, the first time this shape is timed on this engine; whether it ran."""
    key = shape_key(pair, settings, drafter)
    with _warmed_lock:
        if key in _warmed:
            return False
    short = replace(settings, max_new_tokens=min(settings.max_new_tokens, WARM_UP_TOKENS))
    for mode in ("autoregressive", "speculative"):
        for _ in run(pair, prompt, short, mode=mode, drafter=drafter):
            pass
    with _warmed_lock:
        _warmed.add(key)
    return True
