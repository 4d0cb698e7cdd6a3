"""Measure first, then show: the speculative run and the target alone, back to back, with nothing else of ours running.

One process-wide slot (serving/measuring_slot.py): runs share the processor, so two measurements at
once would slow each other down. A session holds the slot only while its models run; rendering and
playback happen after it is released, from the recorded trace. Every timed section runs on the server's one timed
thread (serving/torch_threads.py), so a Run is timed in the same OpenMP mode whichever request thread asked for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from specviz.analysis import cache_fit
from specviz.analysis.readings import median_index, readings_of
from specviz.engine.events import Cycle, RunStarted, Step, Summary
from specviz.engine.settings import DecodeSettings, StopCheck, never_stop
from specviz.process.machine_load import LoadMeter, settle
from specviz.run.chosen_setting import ChosenSetting
from specviz.run.runner import encode_prompt, run
from specviz.run.timing_conditions import collector_paused, rounds_that_fit, slice_order, warm_up
from specviz.run.trace import Trace
from specviz.serving import compile_worker, pair_cache, torch_threads
from specviz.serving.measuring_slot import announced, background_now, measuring
from specviz.serving.pair_cache import pair_info

if TYPE_CHECKING:
    from specviz.deployment.peaks import PeakTracker
    from specviz.models.loading import LoadedPair

ROUNDS_BUDGET_S = 6.0  # rounds are measured while they fit in this (a Run: measure, then 8 s of playback, ≤ 15 s)
MOST_ROUNDS = 5  # …and at most this many; one round where a single one takes longer than half the budget
SETTLE_S = 0.25  # in the app: inside the slot, let the pages (ours and others', now frozen) finish drawing before timing…
SETTLE_MAX_S = 8.0  # …and then wait for the other programs to be quiet, at most this long

Result = TypeVar("Result")


@dataclass
class Round:
    """One back-to-back measurement: the speculative run, then the target alone."""

    started: RunStarted | None = None
    cycles: list[Cycle] | None = None
    summary: Summary | None = None
    baseline_steps: list[Step] | None = None
    baseline: Summary | None = None
    seconds: float = 0.0

    @property
    def speedup(self) -> float | None:
        if self.summary is None or self.baseline is None:
            return None
        return readings_of(
            self.summary.tally,
            gamma=self.started.gamma,
            target_step_s=self.baseline.step_s,
            tokens_per_s=self.summary.tokens_per_s,
            baseline_tokens_per_s=self.baseline.tokens_per_s,
        ).measured_speedup


def measure_run(
    pair: LoadedPair,
    prompt: str,
    settings: DecodeSettings,
    drafter: str = "model",
    should_stop: StopCheck = never_stop,
    repeat_budget_s: float = ROUNDS_BUDGET_S,
    settle_s: float = 0.0,
    setting: ChosenSetting | None = None,
    waiting: Callable[[str], None] = lambda what: None,
) -> Trace:
    """Record both runs in the measuring slot, in alternating rounds (S A, A S, S A, …) while they fit in
    `repeat_budget_s`, and keep the median round; the trace carries every round's speedup (its spread).

    Timed as `bench` times (run/timing_conditions.py): both methods warmed first, untimed, and the garbage collector
    held off while the clock runs. Nothing else of ours runs meanwhile: the slot waits for a pair this server loads
    in the background (`waiting` is told so), and our compile worker is stopped. Input is checked before the slot is
    taken, so a bad prompt never waits for another session; the rest runs on the server's timed thread
    (serving/torch_threads.py), the same OpenMP mode for every Run. `setting`: the `gamma: auto` choice the run
    drafts (or the one known for the pair here), carried in the trace.
    """
    settings.validate()
    prompt_tokens = len(encode_prompt(pair, prompt, settings.max_new_tokens, settings.drafted_per_cycle))
    with announced():  # a load steps aside for this Run from now, while it waits for the timed thread too
        return torch_threads.timed(
            _record, pair, prompt, prompt_tokens, settings, drafter, should_stop, repeat_budget_s, settle_s, setting, waiting
        )


def _record(
    pair: LoadedPair,
    prompt: str,
    prompt_tokens: int,
    settings: DecodeSettings,
    drafter: str,
    should_stop: StopCheck,
    repeat_budget_s: float,
    settle_s: float,
    setting: ChosenSetting | None,
    waiting: Callable[[str], None],
) -> Trace:
    """measure_run's measurement, on the timed thread, its input checked."""
    from specviz.deployment import peaks as measured  # torch-side; the pair is loaded, so torch is too

    peaks = measured.PeakTracker(pair.device, pair.draft.weight_bytes)  # CUDA's peaks; empty on a CPU
    with measuring(waiting, should_stop) as waited_for_loads:
        compile_worker.wait_for_build(compile_worker.BUILD_WAIT_MAX_S, should_stop)  # never warmed or timed beside it
        # waiting for quiet is no use while our own compile worker runs: it is stopped while the clock runs instead
        wait_at_most = settle_s if compile_worker.busy() else max(settle_s, SETTLE_MAX_S)
        waited = waited_for_loads + (settle(settle_s, wait_at_most, should_stop) if settle_s else 0.0)
        if not should_stop():  # a Run stopped while it waited for its turn ends at once
            warm_up(pair, prompt, settings, drafter, every_time=True)  # untimed: a package's first calls, idle caches
        read_gb_s = [memory_read_rate(pair)]  # untimed, as the rounds' neighbours: which state the machine is in
        with (
            collector_paused(),
            compile_worker.paused(compile_worker.BUILD_WAIT_MAX_S, should_stop),  # waits out a kernel's build
            pair_cache.fetches_paused(),
            LoadMeter(waited, own_work=own_work) as others,
        ):
            rounds = [_round(pair, prompt, settings, drafter, should_stop, 0, peaks)]
            if rounds[0].baseline is not None:
                for index in range(1, rounds_that_fit(rounds[0].seconds, repeat_budget_s, MOST_ROUNDS)):
                    rounds.append(_round(pair, prompt, settings, drafter, should_stop, index, peaks))
        read_gb_s.append(memory_read_rate(pair))
    complete = [r for r in rounds if r.speedup is not None]
    if len(complete) < len(rounds):  # stopped: show what was recorded of the first round
        chosen, speedups = rounds[0], ()
    else:
        speedups = tuple(r.speedup for r in complete)
        chosen = complete[median_index(speedups)]
    new_tokens = chosen.summary.new_tokens if chosen.summary else settings.max_new_tokens
    memory = measured.memory_report(pair, prompt_tokens + new_tokens, settings.drafted_per_cycle, peaks.peaks)
    return Trace(
        pair=replace(pair_info(pair), memory=memory.to_json()),
        prompt=prompt,
        started=chosen.started,
        cycles=chosen.cycles or [],
        summary=chosen.summary,
        baseline_steps=chosen.baseline_steps or [],
        baseline=chosen.baseline,
        round_speedups=speedups,
        other_load=others.result,
        setting=setting,
        memory_read_gb_s=tuple(rate for rate in read_gb_s if rate is not None),
    )


def memory_read_rate(pair: LoadedPair) -> float | None:
    """The machine's memory read rate now, in GB/s, where the pair runs on the CPU (analysis/cache_fit.py); None on
    an accelerator, whose speed does not follow it."""
    return cache_fit.read_rate_now_gb_s() if pair.device.type == "cpu" else None


@contextmanager
def quietly(should_stop: StopCheck = never_stop) -> Iterator[None]:
    """What any timed section of the server runs inside (γ auto's calibration, as a Run's rounds): the measuring slot,
    once no background work of ours runs; the machine quiet, or SETTLE_MAX_S waited; our compile worker and fetches
    stopped."""
    with measuring(should_stop=should_stop):
        compile_worker.wait_for_build(compile_worker.BUILD_WAIT_MAX_S, should_stop)
        settle(SETTLE_S, SETTLE_S if compile_worker.busy() else SETTLE_MAX_S, should_stop)  # no use waiting out our worker
        with compile_worker.paused(compile_worker.BUILD_WAIT_MAX_S, should_stop), pair_cache.fetches_paused():
            yield


def timed_quietly(work: Callable[[], Result]) -> Result:
    """`work()` timed as a Run is: on the server's timed thread, inside `quietly` (γ auto's calibration)."""

    def quiet_work() -> Result:
        with quietly():
            return work()

    with announced():
        return torch_threads.timed(quiet_work)


def own_work() -> str:
    """What this process does beside a measured run that no other program's load shows (background work declared in
    serving/measuring_slot.py, such as loading a pair): "" when the slot kept it out, as it should."""
    return background_now()


def _round(
    pair: LoadedPair,
    prompt: str,
    settings: DecodeSettings,
    drafter: str,
    should_stop: StopCheck,
    index: int,
    peaks: PeakTracker | None = None,
) -> Round:
    """The two runs of round `index`, in the order timing_conditions.slice_order gives it (alternating the order
    cancels a slow drift of the machine's speed)."""
    measured = Round()
    started = time.perf_counter()
    for mode in slice_order(("speculative", "autoregressive"), index):
        request = lambda mode=mode: list(run(pair, prompt, settings, mode=mode, drafter=drafter, should_stop=should_stop))  # noqa: E731
        events = peaks.around(mode, request) if peaks else request()
        summary: Summary = events[-1]
        if mode == "speculative":
            measured.started = events[0]
            measured.cycles = [e for e in events if isinstance(e, Cycle)]
            measured.summary = summary
        else:
            measured.baseline_steps = [e for e in events if isinstance(e, Step)]
            measured.baseline = summary
        if summary.stop_reason == "stopped":
            if mode == "autoregressive":
                measured.baseline = measured.baseline_steps = None
            break
    measured.seconds = time.perf_counter() - started
    return measured
