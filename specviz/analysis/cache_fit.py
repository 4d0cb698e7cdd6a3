"""Does a model's weights fit in this CPU's cache? The one fact that decides whether a verify pass is nearly free.

A decoding step reads every weight once. Weights that stream from memory make a step wait on memory, so a pass over
k rows costs about one step (ν(k) ≈ 1) until the arithmetic catches up; weights that sit in the last-level cache make
a step wait on arithmetic, so k rows cost nearly k steps and drafting cannot pay. The cache size is read from the OS
(sysfs, which lscpu reads too); the memory bandwidth is measured (`measure_read_bandwidth`), since no file states it.
"""

from __future__ import annotations

import functools
import time

from specviz.kernels.cpu import last_level_cache_bytes  # noqa: F401  (read here by the analysis and the page)


def measure_read_bandwidth(megabytes: int = 512, repeats: int = 3) -> float:
    """Bytes a second this process reads from memory: the best of a few sums over a buffer far larger than any cache."""
    import torch

    data = torch.ones(megabytes * 2**20 // 4, dtype=torch.float32)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - started)
    return data.numel() * 4 / best


TWO_LEVELS = 1.4  # read rates further apart than this ratio: the machine moved between its two states (35 and 65 GB/s here)


def two_levels(rates) -> bool:
    """Whether memory read rates lie at two levels (the largest over TWO_LEVELS times the smallest)."""
    rates = [rate for rate in rates if rate]
    return bool(rates) and max(rates) > TWO_LEVELS * min(rates)


def rate_range(rates) -> str:
    """Read rates as the page and `bench` write them, in whole GB/s: "35", or "35–64" where they differ."""
    low, high = f"{min(rates):.0f}", f"{max(rates):.0f}"
    return low if low == high else f"{low}–{high}"


def read_rate_now_gb_s() -> float:
    """The machine's memory read rate now, in GB/s: taken around measurements (never inside one), because on some
    machines it sits at one of two levels and a verify pass's cost moves with it (docs/performance.md, "The machine's
    two states")."""
    return measure_read_bandwidth(repeats=2) / 1e9


@functools.cache
def read_bandwidth_gb_s() -> float:
    """This machine's memory read bandwidth in GB/s, measured once per process (never inside a timed run)."""
    return measure_read_bandwidth() / 1e9


def mib(size: float) -> str:
    """A size in MiB, or GiB from 1 GiB up."""
    return f"{size / 2**20:,.0f} MiB" if size < 2**30 else f"{size / 2**30:,.2f} GiB"


def fit_sentence(weight_bytes: int, cache_bytes: int | None, rows: int, verify_cost: float | None) -> str:
    """One sentence: where a target's weights live on this machine, and what a verify pass of `rows` rows cost here."""
    pass_cost = (
        f"a {rows}-row verify pass cost {verify_cost:.2f} target steps" if verify_cost else "its verify pass was not timed"
    )
    if cache_bytes is None:
        return f"The target's {mib(weight_bytes)} of weights ran here, and {pass_cost}."
    if weight_bytes <= cache_bytes:
        return f"The target's {mib(weight_bytes)} of weights fit in this CPU's {mib(cache_bytes)} cache, and {pass_cost}."
    return (
        f"The target's {mib(weight_bytes)} of weights are {weight_bytes / cache_bytes:.0f}× this CPU's {mib(cache_bytes)} "
        f"cache, so every step reads them from memory, and {pass_cost}."
    )


def cause_sentence(streamed_nu: float | None, small_nu: float | None, small_fits: bool = True) -> str | None:
    """What two measured verify passes say about the cause: one target streaming from memory, one small (in the
    cache where `small_fits`). None where either was not measured."""
    if streamed_nu is None or small_nu is None:
        return None
    if not small_fits:
        return (
            f"Neither target fits in this CPU's cache, so this machine cannot show what the cache does: the two passes "
            f"cost ν {streamed_nu:.2f} and {small_nu:.2f}, set by their kernels."
        )
    if small_nu > streamed_nu + SAME_NU:
        return (
            f"The pass costs fewer target steps for the target that streams from memory (ν {streamed_nu:.2f} against "
            f"{small_nu:.2f} in the cache): on this machine the cache decides."
        )
    if streamed_nu > small_nu + SAME_NU:
        return (
            f"The pass costs more target steps for the target that streams from memory (ν {streamed_nu:.2f} against "
            f"{small_nu:.2f} in the cache), so the cache is not what makes extra rows cheap here: the kernels decide."
        )
    return (
        f"Both passes cost about as many target steps (ν {streamed_nu:.2f} from memory, {small_nu:.2f} in the cache), so "
        f"on this machine the cache does not decide: the kernels' arithmetic for each extra row does."
    )


SAME_NU = 0.3  # two verify costs closer than this read as "about as many steps"
