"""Token arrival times and latency numbers, from hand-built traces whose times are known, and from a real run."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specviz.deployment.latency import LatencyStats, arrival_times, latency_tail, percentile
from specviz.engine.events import Cycle, RunStarted, Step, Summary


def started(prefill_s: float, mode: str = "speculative") -> RunStarted:
    return RunStarted(mode, (1, 2), ("a", "b"), 4, 0.0, 0, 1.0, 0, "model", 1.0, False, False, 32, prefill_s)


def cycle(index: int, emitted: int, draft_s: float, verify_s: float, overhead_s: float) -> Cycle:
    return Cycle(
        index=index,
        gamma=4,
        positions=(),
        n_accepted=emitted - 1,
        resampled_token_id=None,
        bonus_token_id=None,
        new_token_text="x",
        bonus_top_p=(),
        emitted_token_ids=tuple(range(emitted)),
        draft_s=draft_s,
        verify_s=verify_s,
        overhead_s=overhead_s,
        n_draft_forwards=4,
        lossy=False,
    )


def summary(mode: str, n: int, wall_s: float, prefill_s: float) -> Summary:
    return Summary(mode, tuple(range(n)), "", wall_s, prefill_s, "max_new_tokens")


# Autoregressive: prefill 100 ms, then steps of 20, 30, 50 ms.
AUTOREGRESSIVE = [
    started(0.1, "autoregressive"),
    Step(0, 7, "a", 0.02),
    Step(1, 8, "b", 0.03),
    Step(2, 9, "c", 0.05),
    summary("autoregressive", 3, 0.2, 0.1),
]
# Speculative: prefill 100 ms, then cycles of 100 ms each releasing 3, 1 and 2 tokens.
SPECULATIVE = [
    started(0.1),
    cycle(0, 3, 0.04, 0.05, 0.01),
    cycle(1, 1, 0.03, 0.05, 0.02),
    cycle(2, 2, 0.02, 0.07, 0.01),
    summary("speculative", 6, 0.4, 0.1),
]


def test_percentile_is_numpy_linear_interpolation():
    assert percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert percentile([1, 2, 3, 4], 90) == pytest.approx(3.7), "linear: 1 + 0.9 × 3 between the closest ranks"
    assert percentile([4, 1, 3, 2], 0) == 1 and percentile([4, 1, 3, 2], 100) == 4
    assert percentile([5.0], 99) == 5.0
    assert percentile([], 50) is None


def test_an_autoregressive_token_arrives_when_its_step_ends():
    assert arrival_times(AUTOREGRESSIVE) == pytest.approx([0.12, 0.15, 0.20])


def test_a_speculative_cycle_releases_its_burst_at_the_cycle_end():
    assert arrival_times(SPECULATIVE) == pytest.approx([0.2, 0.2, 0.2, 0.3, 0.4, 0.4])


def test_released_s_when_the_engine_records_it_wins_over_the_cycle_end():
    events = [started(0.1), replace(cycle(0, 2, 0.04, 0.05, 0.01), released_s=0.19), cycle(1, 1, 0.05, 0.04, 0.01)]
    assert arrival_times(events) == pytest.approx([0.19, 0.19, 0.3]), "the next cycle still starts at the previous one's end"


def test_autoregressive_stats_from_known_times():
    stats = LatencyStats.of_events(AUTOREGRESSIVE)
    assert stats.n_tokens == 3
    assert stats.ttft_s == pytest.approx(0.12)
    assert stats.latency_s == pytest.approx(0.2)
    assert stats.tpot_s == pytest.approx((0.2 - 0.12) / 2)
    assert stats.itls_s == pytest.approx([0.03, 0.05])
    assert stats.itl_p50_s == pytest.approx(0.04)
    assert stats.itl_p90_s == pytest.approx(0.048)
    assert stats.itl_p99_s == pytest.approx(0.0498)
    assert stats.itl_max_s == pytest.approx(0.05)


def test_speculative_stats_are_bursty():
    stats = LatencyStats.of_events(SPECULATIVE)
    assert stats.ttft_s == pytest.approx(0.2), "TTFT includes prefill and the whole first cycle"
    assert stats.latency_s == pytest.approx(0.4)
    assert stats.tpot_s == pytest.approx(0.2 / 5)
    assert stats.itls_s == pytest.approx([0, 0, 0.1, 0.1, 0])
    assert stats.itl_p50_s == pytest.approx(0.0), "most gaps are inside a burst"
    assert stats.itl_p90_s == pytest.approx(0.1)
    assert stats.itl_max_s == pytest.approx(0.1)


def test_tpot_is_the_mean_gap_after_the_first_token():
    stats = LatencyStats.of([0.5, 0.6, 0.6, 0.9])
    assert stats.tpot_s == pytest.approx(sum(stats.itls_s) / len(stats.itls_s))
    assert stats.latency_s == 0.9


def test_one_token_and_no_token():
    one = LatencyStats.of([0.3])
    assert one.ttft_s == 0.3 and one.tpot_s is None and one.itl_p50_s is None and one.itl_max_s is None
    none = LatencyStats.of([], latency_s=0.05)
    assert none.ttft_s is None and none.latency_s == 0.05 and none.n_tokens == 0


def test_tail_over_requests_pools_gaps_and_ranks_requests():
    requests = [LatencyStats.of_events(AUTOREGRESSIVE), LatencyStats.of_events(SPECULATIVE), LatencyStats.of([0.1, 0.3], 1.0)]
    tail = latency_tail(requests)
    assert tail.requests == 3
    assert tail.latency_p50_s == pytest.approx(0.4)
    assert tail.latency_p90_s == pytest.approx(0.4 + 0.8 * 0.6)
    assert tail.latency_p99_s == pytest.approx(0.4 + 0.98 * 0.6)
    gaps = [0.03, 0.05, 0, 0, 0.1, 0.1, 0, 0.2]  # every gap of every request, pooled
    assert tail.itl_p50_ms == pytest.approx(1000 * percentile(gaps, 50))
    assert tail.itl_p99_ms == pytest.approx(1000 * percentile(gaps, 99))
    assert tail.ttft_ms == pytest.approx(120.0), "the median of 120, 200 and 100 ms"
    assert list(tail.to_json()) == ["latency_p50_s", "latency_p90_s", "latency_p99_s", "itl_p50_ms", "itl_p99_ms", "ttft_ms"]


def test_a_real_run_releases_each_burst_inside_its_cycle():
    """On the engine's clock: a step's token arrives as the step ends (the last at wall_s); a cycle's burst after its
    draft and verify passes and no later than its end (released_s, taken before the rollback)."""
    from specviz.drafting.drafters import ModelDrafter
    from specviz.engine import CachedDecoder, DecodeSettings, autoregressive_decode, speculative_decode
    from tests.tiny import fake_vocabulary, tiny_llama

    target, draft = tiny_llama(64, seed=0), tiny_llama(64, seed=1, layers=1)
    settings = DecodeSettings(max_new_tokens=12, gamma=3)
    speculative = list(
        speculative_decode(
            CachedDecoder(target, 64), ModelDrafter(CachedDecoder(draft, 64)), [5, 6, 7], settings, fake_vocabulary()
        )
    )
    autoregressive = list(autoregressive_decode(CachedDecoder(target, 64), [5, 6, 7], settings, fake_vocabulary()))
    for events in (speculative, autoregressive):
        stats = LatencyStats.of_events(events)
        assert stats.n_tokens == events[-1].new_tokens == 12
        assert stats.arrivals_s[-1] <= events[-1].wall_s + 1e-9, "no token arrives after the request ends"
        assert stats.ttft_s > events[0].prefill_s
        assert list(stats.arrivals_s) == sorted(stats.arrivals_s)
    assert LatencyStats.of_events(autoregressive).arrivals_s[-1] == pytest.approx(autoregressive[-1].wall_s)

    clock = speculative[0].prefill_s
    cycles = [e for e in speculative if isinstance(e, Cycle)]
    assert cycles and all(c.released_s is not None for c in cycles), "every cycle records when its tokens were fixed"
    for c in cycles:
        assert clock + c.draft_s + c.verify_s <= c.released_s <= clock + c.draft_s + c.verify_s + c.overhead_s + 1e-9
        clock += c.draft_s + c.verify_s + c.overhead_s
