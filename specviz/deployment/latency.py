"""When each token arrived, and the latency numbers read from that: TTFT, request latency, ITL percentiles, TPOT.

Time runs on the engine's own clock, from the start of the request (the start of prefill): prefill, then every
autoregressive step or speculative cycle, each as the engine timed it. Time the engine spent suspended while a
consumer handled an event is not counted, exactly as `Summary.wall_s` does not count it, so the last arrival is
the request latency.

- An autoregressive step releases one token when it ends: arrival = prefill_s + Σ step_s so far.
- A speculative cycle releases its burst of 1 … γ + 1 tokens at once. If the event carries `released_s` (seconds
  since the request started at which the cycle's tokens were known, taken right after the verdict, before the
  rollback), that is used; otherwise the burst arrives at the cycle's end, prefill_s + Σ (draft_s + verify_s +
  overhead_s) so far, which is late by the share of overhead_s spent after the verdict (rollback, the strategy's
  update). `Step` may carry `released_s` too; its fallback is exact already.

Inter-token latencies (ITL) are the gaps between consecutive tokens: zero inside a burst, a whole cycle between
bursts. Every percentile here is numpy's with method="linear" (the default: linear interpolation between the
closest ranks), through `percentile`, the one definition.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from specviz.engine.events import Cycle, Event, RunStarted, Step, Summary

PERCENTILE_METHOD = "linear"


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0–100) of values by numpy's linear interpolation; None for no values."""
    if len(values) == 0:
        return None
    return float(np.percentile(np.asarray(values, dtype=float), q, method=PERCENTILE_METHOD))


def arrival_times(events: Iterable[Event]) -> list[float]:
    """Seconds from the start of the request to when each new token became available, one per token."""
    clock, arrivals = 0.0, []
    for event in events:
        if isinstance(event, RunStarted):
            clock = event.prefill_s
        elif isinstance(event, Step):
            clock += event.step_s
            arrivals.append(_released(event, clock))
        elif isinstance(event, Cycle):
            clock += event.draft_s + event.verify_s + event.overhead_s
            arrivals.extend([_released(event, clock)] * len(event.emitted_token_ids))
    return arrivals


def _released(event: Step | Cycle, end_of_event_s: float) -> float:
    """The engine's `released_s` when it records one (phase 2), else the end of the step or cycle."""
    released = getattr(event, "released_s", None)
    return end_of_event_s if released is None else released


def _request_latency(events: Sequence[Event], arrivals: Sequence[float]) -> float:
    """The Summary's wall_s when present (prefill + every step or cycle), else the last arrival."""
    for event in reversed(events):
        if isinstance(event, Summary):
            return event.wall_s
    return arrivals[-1] if arrivals else 0.0


@dataclass(frozen=True)
class LatencyStats:
    """One request's latency numbers, all derived here from its token arrival times."""

    arrivals_s: tuple[float, ...]  # one per new token, seconds since the request started
    latency_s: float  # request latency: start of prefill to the last token
    ttft_s: float | None  # time to first token
    tpot_s: float | None  # time per output token after the first: (latency − TTFT) / (n − 1)
    itl_p50_s: float | None
    itl_p90_s: float | None
    itl_p99_s: float | None
    itl_max_s: float | None

    @property
    def n_tokens(self) -> int:
        return len(self.arrivals_s)

    @property
    def itls_s(self) -> list[float]:
        """Gaps between consecutive tokens (n − 1 of them); zero inside a speculative burst."""
        return [b - a for a, b in zip(self.arrivals_s, self.arrivals_s[1:])]

    @classmethod
    def of(cls, arrivals_s: Sequence[float], latency_s: float | None = None) -> LatencyStats:
        """The numbers of one request from its arrival times; latency defaults to the last arrival."""
        arrivals = tuple(float(t) for t in arrivals_s)
        latency = float(latency_s) if latency_s is not None else (arrivals[-1] if arrivals else 0.0)
        itls = [b - a for a, b in zip(arrivals, arrivals[1:])]
        ttft = arrivals[0] if arrivals else None
        tpot = (latency - ttft) / (len(arrivals) - 1) if ttft is not None and len(arrivals) > 1 else None
        return cls(
            arrivals_s=arrivals,
            latency_s=latency,
            ttft_s=ttft,
            tpot_s=tpot,
            itl_p50_s=percentile(itls, 50),
            itl_p90_s=percentile(itls, 90),
            itl_p99_s=percentile(itls, 99),
            itl_max_s=max(itls) if itls else None,
        )

    @classmethod
    def of_events(cls, events: Iterable[Event]) -> LatencyStats:
        """The numbers of one recorded run (RunStarted, Steps or Cycles, Summary)."""
        events = list(events)
        arrivals = arrival_times(events)
        return cls.of(arrivals, _request_latency(events, arrivals))


@dataclass(frozen=True)
class LatencyTail:
    """One method over many requests (prompts × repeats): request latency and pooled ITL percentiles, TTFT."""

    requests: int
    latency_p50_s: float | None
    latency_p90_s: float | None
    latency_p99_s: float | None
    itl_p50_ms: float | None  # pooled over every token gap of every request
    itl_p99_ms: float | None
    ttft_ms: float | None  # the median request's time to first token

    def to_json(self) -> dict[str, float | None]:
        """The keys `bench --json` rows carry (requests left out: the row says how many it ran)."""
        return {
            "latency_p50_s": self.latency_p50_s,
            "latency_p90_s": self.latency_p90_s,
            "latency_p99_s": self.latency_p99_s,
            "itl_p50_ms": self.itl_p50_ms,
            "itl_p99_ms": self.itl_p99_ms,
            "ttft_ms": self.ttft_ms,
        }


def latency_tail(requests: Sequence[LatencyStats]) -> LatencyTail:
    """Request latency P50/P90/P99 across requests, ITL P50/P99 pooled over all tokens, median TTFT."""
    latencies = [r.latency_s for r in requests]
    itls = [gap for r in requests for gap in r.itls_s]
    ttfts = [r.ttft_s for r in requests if r.ttft_s is not None]

    def ms(value: float | None) -> float | None:
        return None if value is None else 1000 * value

    return LatencyTail(
        requests=len(requests),
        latency_p50_s=percentile(latencies, 50),
        latency_p90_s=percentile(latencies, 90),
        latency_p99_s=percentile(latencies, 99),
        itl_p50_ms=ms(percentile(itls, 50)),
        itl_p99_ms=ms(percentile(itls, 99)),
        ttft_ms=ms(percentile(ttfts, 50)),
    )
