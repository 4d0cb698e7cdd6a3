"""Measure first, then show: the speculative run and the target alone, back to back, with nothing else of ours running.

One process-wide slot (serving/measuring_slot.py): runs share the processor, so two measurements at
once would slow each other down. A session holds the slot only while its models run; rendering and
playback happen after it is released, from the recorded trace.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from specviz.analysis.readings import readings_of
from specviz.engine.events import Cycle, RunStarted, Step, Summary
from specviz.engine.settings import DecodeSettings, StopCheck, never_stop
from specviz.run.chosen_setting import ChosenSetting
from specviz.run.machine_load import LoadMeter, settle
from specviz.run.runner import encode_prompt, run
from specviz.run.timing_conditions import collector_paused, warm_up
from specviz.run.trace import Trace
from specviz.serving import compile_worker, pair_cache
from specviz.serving.measuring_slot import MEASURING_SLOT
from specviz.serving.pair_cache import pair_info

if TYPE_CHECKING:
    from specviz.deployment.peaks import PeakTracker
    from specviz.models.loading import LoadedPair

REPEAT_BUDGET_S = 1.0  # measure three times when three rounds fit in this, else once: the first tokens show ≤ 2 s after Run
SETTLE_S = 0.25  # in the app: inside the slot, let the pages (ours and others', now frozen) finish drawing before timing…
SETTLE_MAX_S = 8.0  # …and then wait for the other programs to be quiet, at most this long


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
    repeat_budget_s: float = REPEAT_BUDGET_S,
    settle_s: float = 0.0,
    setting: ChosenSetting | None = None,
) -> Trace:
    """Record both runs in the measuring slot; on a quick pair, three rounds and keep the median one.

    Timed as `bench` times (run/timing_conditions.py): the shape warmed first, untimed, where this process has not
    timed it on this engine yet, and the garbage collector held off while the clock runs. Input is checked before
    the slot is taken, so a bad prompt never waits for another session. `setting`: the `gamma: auto` choice the run
    drafts (or the one known for the pair here), carried in the trace.
    """
    settings.validate()
    from specviz.deployment import peaks as measured  # torch-side; the pair is loaded, so torch is too

    prompt_tokens = len(encode_prompt(pair, prompt, settings.max_new_tokens, settings.drafted_per_cycle))
    peaks = measured.PeakTracker(pair.device, pair.draft.weight_bytes)  # CUDA's peaks; empty on a CPU
    with MEASURING_SLOT:
        # waiting for quiet is no use while our own compile worker runs: it is stopped while the clock runs instead
        wait_at_most = settle_s if compile_worker.busy() else max(settle_s, SETTLE_MAX_S)
        waited = settle(settle_s, wait_at_most, should_stop) if settle_s else 0.0
        waited += wait_while_loading(SETTLE_MAX_S if settle_s else 0.0, should_stop)
        warm_up(pair, prompt, settings, drafter)  # untimed: a package's first calls, a new number of rows
        with collector_paused(), compile_worker.paused(), LoadMeter(waited, own_work=own_work) as others:
            rounds = [_round(pair, prompt, settings, drafter, should_stop, baseline_first=False, peaks=peaks)]
            if rounds[0].baseline is not None and 3 * rounds[0].seconds <= repeat_budget_s:
                for baseline_first in (True, False):
                    rounds.append(_round(pair, prompt, settings, drafter, should_stop, baseline_first, peaks))
    complete = [r for r in rounds if r.speedup is not None]
    if len(complete) < len(rounds):  # stopped: show what was recorded of the first round
        chosen, speedups = rounds[0], ()
    else:
        chosen = sorted(complete, key=lambda r: r.speedup)[len(complete) // 2]
        speedups = tuple(r.speedup for r in complete)
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
    )


def own_work() -> str:
    """What this process does beside a measured run that no other program's load shows: loading a pair (a real
    pair's background load converts and warms weights on the same cores)."""
    return "loading a pair in the background" if pair_cache.loading_now() else ""


def wait_while_loading(at_most_s: float, should_stop: StopCheck = never_stop) -> float:
    """Wait, at most `at_most_s`, while this process loads a pair; the seconds waited."""
    started = time.perf_counter()
    while pair_cache.loading_now() and time.perf_counter() - started < at_most_s and not should_stop():
        time.sleep(LOAD_POLL_S)
    return time.perf_counter() - started


LOAD_POLL_S = 0.25


def _round(
    pair: LoadedPair,
    prompt: str,
    settings: DecodeSettings,
    drafter: str,
    should_stop: StopCheck,
    baseline_first: bool,
    peaks: PeakTracker | None = None,
) -> Round:
    """The two runs in either order (alternating the order cancels a slow drift of the machine's speed)."""
    measured = Round()
    started = time.perf_counter()
    for mode in ("autoregressive", "speculative") if baseline_first else ("speculative", "autoregressive"):
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
