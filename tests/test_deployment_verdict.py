"""The verdict and the article's rules of thumb, on constructed measurements whose answers are known."""

from __future__ import annotations

from specviz.deployment.batch import BatchRow
from specviz.deployment.memory import LoadTimes, PairLoadTimes
from specviz.deployment.verdict import (
    DeploymentVerdict,
    check_acceptance,
    check_batch,
    check_cold_start,
    check_memory,
    check_p99,
    check_target_size,
    judge,
    overall,
)


def test_overall_says_the_app_verdict_in_deployment_words():
    assert overall(1.30) == ("worth it", "Measured 1.30× the target alone (worth it: ≥ 1.05× is faster, ≤ 0.95× slower).")
    assert overall(1.00)[0] == "break-even"
    assert overall(0.80)[0] == "not worth it"
    assert overall(None)[0] == "not measured"


def test_target_size():
    big = check_target_size(70_000_000_000, 2.0)
    assert big.holds is True and "70B parameters" in big.reason
    small = check_target_size(135e6, 1.4)
    assert small.holds is False and "135M parameters" in small.reason and "against the article" in small.reason
    assert "as the article expects" in check_target_size(135e6, 0.9).reason
    assert check_target_size(None, 1.2).holds is None


def test_batch_rule_reads_the_curve_above_8():
    paying = [BatchRow(1, 0.1, 1.0, 2.0), BatchRow(16, 0.1, 1.5, 1.4), BatchRow(64, 0.1, 2.0, 1.1)]
    assert check_batch(paying).holds is True
    falling = [BatchRow(1, 0.1, 1.0, 1.5), BatchRow(4, 0.1, 1.3, 1.1), BatchRow(16, 0.2, 3.0, 0.7)]
    check = check_batch(falling)
    assert check.holds is False and "stops paying at batch 16" in check.reason and "0.70× at 16" in check.reason
    assert check_batch(falling[:2]).holds is None, "no batch above 8 measured: nothing to check"


def test_acceptance_is_the_mean_acceptance_length():
    assert check_acceptance(2.6, 1.5).holds is True
    assert check_acceptance(1.8, 1.1).holds is False
    assert check_acceptance(2.0, None).holds is False, "the article says above 2.0"
    assert check_acceptance(None, None).holds is None


def test_p99_claim_holds_when_speculation_makes_the_tail_worse():
    worse = check_p99(speculative_p99_s=2.1, autoregressive_p99_s=0.8)
    assert worse.holds is True and "800 ms → 2100 ms" in worse.reason
    assert check_p99(0.5, 0.8).holds is False
    assert check_p99(None, 0.8).holds is None


def test_memory_claim_is_15_to_25_percent():
    assert check_memory(0.20, 200 * 2**20).holds is True
    assert check_memory(0.40).holds is False
    assert "40.0 %" in check_memory(0.40).reason
    assert check_memory(0.05).holds is False
    assert check_memory(None).holds is None


def test_cold_start_claim_is_at_least_double():
    assert check_cold_start(PairLoadTimes(LoadTimes(5.0, 1.0), LoadTimes(7.0, 0.5))).holds is True, "5 s → 12 s"
    light_draft = check_cold_start(PairLoadTimes(LoadTimes(5.0, 1.0), LoadTimes(0.5, 0.1)))
    assert light_draft.holds is False and "5.00 s → 5.50 s" in light_draft.reason
    assert check_cold_start(None).holds is None


def test_judge_checks_every_rule_and_round_trips():
    verdict = judge(
        1.4,
        target_parameters=135_000_000,
        mean_acceptance_length=2.4,
        batch_rows=[BatchRow(1, 0.1, 1.0, 1.5), BatchRow(16, 0.2, 3.0, 0.7)],
        speculative_p99_s=1.0,
        autoregressive_p99_s=1.3,
        memory_added_fraction=0.3,
        load_times=PairLoadTimes(LoadTimes(2.0, 0.4), LoadTimes(0.3, 0.1)),
    )
    assert verdict.answer == "worth it"
    assert [c.rule for c in verdict.checks] == [
        "target > 30B",
        "batch > 8",
        "acceptance > 2.0",
        "P99 latency",
        "memory +15–25 %",
        "cold start ×2",
    ]
    assert [c.holds for c in verdict.checks] == [False, False, True, False, False, False]
    assert DeploymentVerdict.from_json(verdict.to_json()) == verdict
