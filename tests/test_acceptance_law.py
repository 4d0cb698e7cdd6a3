"""The acceptance-length histogram's law (Leviathan et al.'s truncated geometric): cycles simulated with a known
constant α agree with it, and a law that forgets the truncation at γ + 1 tokens is rejected by the same test."""

import random

import pytest
import torch

from specviz.analysis.readings import readings_of
from specviz.analysis.same_drafts import JudgedCycle
from specviz.analysis.theory import acceptance_length_law, histogram_distance
from specviz.engine.tally import Tally
from tests.test_sampling_lossless import chi_square_p_value

ALPHA, GAMMA, CYCLES = 0.7, 4, 3000


def simulated_tally(alpha: float, gamma: int, cycles: int, seed: int = 0) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    for _ in range(cycles):
        n = 0
        while n < gamma and rng.random() < alpha:
            n += 1
        tally = tally.add(JudgedCycle.of_counts(gamma, n))
    return tally


def wrong_law(alpha: float, gamma: int) -> list[float]:
    """The untruncated geometric α^k (1 − α) at every k ≤ γ: forgets that a full window ends the count at γ."""
    return [alpha**k * (1 - alpha) for k in range(gamma + 1)]


def p_value(histogram: list[int], law: list[float]) -> float:
    law_tensor = torch.tensor(law, dtype=torch.float64)
    return chi_square_p_value(torch.tensor(histogram, dtype=torch.float64), law_tensor / law_tensor.sum())


def test_the_law_sums_to_one_and_gives_leviathans_expected_tokens():
    law = acceptance_length_law(ALPHA, GAMMA)
    assert sum(law) == pytest.approx(1.0)
    expected_tokens = sum((k + 1) * share for k, share in enumerate(law))
    assert expected_tokens == pytest.approx((1 - ALPHA ** (GAMMA + 1)) / (1 - ALPHA)), "E = (1 − α^(γ+1)) / (1 − α)"


def test_simulated_cycles_follow_the_truncated_geometric_law():
    tally = simulated_tally(ALPHA, GAMMA, CYCLES)
    readings = readings_of(tally, gamma=GAMMA)
    assert readings.alpha == pytest.approx(ALPHA, abs=0.03), "the maximum-likelihood α recovers the simulated one"
    histogram = readings.acceptance_histogram
    assert p_value(histogram, acceptance_length_law(ALPHA, GAMMA)) > 1e-3, f"histogram {histogram} vs the law"
    assert readings.histogram_distance is not None and readings.histogram_distance < 0.03


def test_a_law_without_the_truncation_is_rejected():
    histogram = readings_of(simulated_tally(ALPHA, GAMMA, CYCLES), gamma=GAMMA).acceptance_histogram
    assert p_value(histogram, wrong_law(ALPHA, GAMMA)) < 1e-6, "the untruncated law should be rejected"


def test_unconditional_acceptance_per_position_pays_for_earlier_rejections():
    """vLLM's per-position rate is α^i over all cycles; the conditional one stays near α at every position."""
    tally = simulated_tally(ALPHA, GAMMA, CYCLES)
    for i, (unconditional, conditional) in enumerate(zip(tally.acceptance_rate_per_pos, tally.acceptance_by_position)):
        assert unconditional == pytest.approx(ALPHA ** (i + 1), abs=0.04), f"position {i + 1}: α^{i + 1}"
        assert conditional == pytest.approx(ALPHA, abs=0.05), f"position {i + 1}: α given the earlier ones"


def test_histogram_distance_is_total_variation():
    assert histogram_distance([1, 1], [0.5, 0.5]) == 0.0
    assert histogram_distance([2, 0], [0.0, 1.0]) == 1.0
    assert histogram_distance([], [1.0]) is None
