"""What the app's buttons do, as plain functions of the request and the trace (no Gradio here)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from specviz.engine import Cycle, DecodeSettings, RunStarted, SamplingSettings, Step, Summary
from specviz.runner import run
from specviz.trace import Trace
from specviz.ui.pairs import get_pair, pair_info
from specviz.ui.render import PHASES, Phase

PLAYBACK = {"real pace": 1.0, "10× slower": 10.0, "50× slower": 50.0}
Verification = Literal["exact", "greedy", "lenient"]


@dataclass(frozen=True)
class RunRequest:
    pair: str
    prompt: str
    gamma: int = 4
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 64
    seed: int = 0
    drafter: Literal["model", "lookup"] = "model"
    adaptive_gamma: bool = False
    verification: Verification = "exact"
    lenience: float = 0.5
    playback: str = "real pace"

    def settings(self) -> DecodeSettings:
        temperature = 0.0 if self.verification == "greedy" else float(self.temperature)
        return DecodeSettings(
            max_new_tokens=int(self.max_new_tokens),
            gamma=int(self.gamma),
            sampling=SamplingSettings(temperature=temperature, top_k=int(self.top_k or 0), top_p=float(self.top_p)),
            seed=int(self.seed or 0),
            lenience=float(self.lenience) if self.verification == "lenient" else 1.0,
            adaptive_gamma=bool(self.adaptive_gamma),
        ).validate()

    @property
    def slowdown(self) -> float:
        return PLAYBACK.get(self.playback, 1.0)


@dataclass
class Frame:
    """One moment of a live run, for the app to render."""

    trace: Trace
    shown_cycles: int
    phase: Phase
    stage: Literal["speculative", "baseline", "done"]


def live_run(request: RunRequest, should_stop=lambda: False) -> Iterator[Frame]:
    """Run speculative decoding, then the target alone, yielding frames paced by the playback speed.

    Pauses happen between the engine's yields, outside its timed sections: pacing never
    changes the measurements.
    """
    settings = request.settings()
    pair = get_pair(request.pair)
    trace = Trace(pair=pair_info(pair), prompt=request.prompt)
    for event in run(pair, request.prompt, settings, drafter=request.drafter, should_stop=should_stop):
        if isinstance(event, RunStarted):
            trace.started = event
            yield Frame(trace, 0, "decide", "speculative")
        elif isinstance(event, Cycle):
            trace.cycles.append(event)
            if request.slowdown > 1:
                extra = request.slowdown - 1
                yield Frame(trace, len(trace.cycles), "draft", "speculative")
                pause(event.draft_s * extra, should_stop)
                yield Frame(trace, len(trace.cycles), "verify", "speculative")
                pause((event.verify_s + event.overhead_s) * extra, should_stop)
            yield Frame(trace, len(trace.cycles), "decide", "speculative")
        elif isinstance(event, Summary):
            trace.summary = event
    if trace.summary is None or trace.summary.stop_reason == "stopped":
        yield Frame(trace, len(trace.cycles), "decide", "done")
        return
    yield Frame(trace, len(trace.cycles), "decide", "baseline")
    for event in run(pair, request.prompt, settings, mode="autoregressive", should_stop=should_stop):
        if isinstance(event, Step):
            trace.baseline_steps.append(event)
        elif isinstance(event, Summary):
            trace.baseline = event
    yield Frame(trace, len(trace.cycles), "decide", "done")


def pause(seconds: float, should_stop) -> None:
    """Slow-motion wait that a Stop ends within 50 ms."""
    deadline = time.perf_counter() + seconds
    while not should_stop() and (left := deadline - time.perf_counter()) > 0:
        time.sleep(min(left, 0.05))


def record(request: RunRequest) -> Trace:
    """A whole run at once (for step mode): the same engine, no pacing."""
    trace = Trace()
    for frame in live_run(RunRequest(**{**request.__dict__, "playback": "real pace"})):
        trace = frame.trace
    return trace


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


def inspector_choices(trace: Trace) -> list[tuple[str, str]]:
    """(label, "cycle:position") for every drafted token and every target token of the trace."""
    choices = []
    for cycle in trace.cycles:
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
