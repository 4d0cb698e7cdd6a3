"""The theory against Leviathan et al.'s Table 1 and the worked numbers in docs/algorithm.md."""

import pytest

from specviz.analysis import theory
from specviz.engine import tally

TABLE_1 = [  # (α, γ) → (speedup at τ = 0, operations factor at τ̂ = 0)
    (0.6, 2, 1.96, 1.53),
    (0.7, 3, 2.53, 1.58),
    (0.8, 2, 2.44, 1.23),
    (0.8, 5, 3.69, 1.63),
    (0.9, 2, 2.71, 1.11),
    (0.9, 10, 6.86, 1.60),
]


@pytest.mark.parametrize("alpha,gamma,speedup,operations", TABLE_1)
def test_table_1(alpha, gamma, speedup, operations):
    assert theory.expected_speedup(alpha, gamma, 0.0) == pytest.approx(speedup, abs=0.005)
    assert theory.operations_factor(alpha, gamma, 0.0) == pytest.approx(operations, abs=0.005)


def test_expected_tokens_per_cycle_limits():
    assert theory.expected_tokens_per_cycle(0.0, 5) == 1.0
    assert theory.expected_tokens_per_cycle(1.0, 5) == 6.0
    assert theory.expected_tokens_per_cycle(0.5, 1) == pytest.approx(1.5)


def test_guide_worked_example_and_the_practitioner_claim():
    assert theory.expected_speedup(0.8, 5, 0.01) == pytest.approx(3.51, abs=0.005)
    assert theory.best_gamma(0.8, 0.01) == (14, pytest.approx(4.23, abs=0.005))
    assert theory.practitioner_claim_speedup(0.8, 0.01) == pytest.approx(0.9975, abs=1e-4)


def test_speedup_possible_iff_alpha_exceeds_tau():
    for alpha, tau in [(0.5, 0.4), (0.3, 0.5), (0.9, 0.05), (0.2, 0.2)]:
        best = theory.best_gamma(alpha, tau)[1]
        assert theory.speedup_possible(alpha, tau) == (best > 1.0), (alpha, tau, best)
        if alpha > tau:
            assert best >= theory.speedup_lower_bound(alpha, tau) - 1e-12


def test_bound_as_draft_cost_vanishes():
    assert theory.best_gamma(0.8, 0.0, limit=256)[1] == pytest.approx(theory.speedup_bound_free_draft(0.8), rel=1e-6)


def test_alpha_estimators():
    assert tally.alpha_maximum_likelihood(6, 2) == 0.75
    assert tally.alpha_maximum_likelihood(0, 0) is None
    assert tally.alpha_analytic(1.5, 2) == 0.75


def test_verify_cost_generalises_theorem_3_8():
    assert theory.expected_speedup_with_verify_cost(0.7, 4, 0.1, 1.0) == pytest.approx(theory.expected_speedup(0.7, 4, 0.1))
    slower_verify = theory.expected_speedup_with_verify_cost(0.7, 4, 0.1, 1.5)
    assert slower_verify == pytest.approx(theory.expected_tokens_per_cycle(0.7, 4) / (4 * 0.1 + 1.5))


def test_the_verify_cost_a_speedup_asks_for_inverts_theorem_3_8():
    needed = theory.verify_cost_for_speedup(0.88, 3, 0.37, 1.5)
    assert theory.expected_speedup_with_verify_cost(0.88, 3, 0.37, needed) == pytest.approx(1.5)
    assert theory.expected_speedup_with_verify_cost(0.88, 3, 0.37, needed * 1.01) < 1.5  # a dearer pass falls short
    assert theory.verify_cost_for_speedup(0.5, 1, 0.5, 2.0) < 1.0  # out of any kernel's reach: E 1.5 ÷ 2 − 0.5 = 0.25
