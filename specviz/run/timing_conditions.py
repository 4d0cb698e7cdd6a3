"""What every timed run runs under, on the page (serving/recorder.py) and in `bench` (deployment/benchmark.py) alike,
so that the two time one path: the same engine and threads (each run records both, engine/events.RunStarted), each
shape warmed before it is timed, and Python's garbage collector kept out of the clock.

- Warm-up: the first requests of a shape pay for what later ones find ready (a package's first calls after it loads,
  a new number of verify rows, the allocator's pools). `warm_up` runs both methods once, untimed, with exactly the
  settings about to be timed, the first time this process times them on this engine: after the compile worker's
  packages load, the page's next Run warms them instead of timing their first calls.
- Interleaving: the speculative decoding and the target alone are timed in alternating slices (a Run's rounds,
  `bench`'s requests), each slice in the order the last one ended with (`slice_order`: S A, A S, S A, …), so a
  machine whose speed drifts or jumps slows both alike, and the speedup is each slice's ratio; its median and
  spread are analysis/readings.Spread's. `rounds_that_fit` says how many rounds a Run measures in its time budget.
- The collector: a full collection of a server's heap (gradio, plotly, every trace kept for a session) takes tens of
  milliseconds, and it lands in whichever half allocates past the threshold. `collector_paused` collects first, then
  holds it off until the timed section ends.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator, Sequence
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


def slice_order(methods: Sequence[str], index: int) -> list[str]:
    """The methods in the order slice `index` times them: as given on even slices, reversed on odd ones (A B, B A,
    A B, …), so each method is timed as often first as second and a drift of the machine's speed cancels."""
    return list(methods) if index % 2 == 0 else list(reversed(methods))


def rounds_that_fit(first_round_s: float, budget_s: float, most: int) -> int:
    """How many rounds to measure when the first took `first_round_s` and all may take `budget_s`: as many as fit, at
    most `most`, and odd (the median is then a round that was measured); at least the one measured."""
    if first_round_s <= 0:
        return most if most % 2 else max(1, most - 1)
    fit = max(1, min(most, int(budget_s // first_round_s)))
    return fit if fit % 2 else fit - 1


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


def warm_up(pair: LoadedPair, prompt: str, settings: DecodeSettings, drafter: str, every_time: bool = False) -> bool:
    """Both methods once, untimed and short, the first time this shape is timed on this engine (`every_time`: also
    after, as a Run does, so the weights and caches a page left idle are back before the clock runs); whether it ran."""
    key = shape_key(pair, settings, drafter)
    with _warmed_lock:
        if key in _warmed and not every_time:
            return False
    short = replace(settings, max_new_tokens=min(settings.max_new_tokens, WARM_UP_TOKENS))
    for mode in ("autoregressive", "speculative"):
        for _ in run(pair, prompt, short, mode=mode, drafter=drafter):
            pass
    with _warmed_lock:
        _warmed.add(key)
    return True
