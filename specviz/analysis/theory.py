"""Leviathan et al. 2023 (arXiv 2211.17192): what α, γ and τ predict.

α: probability that one draft is accepted; γ: drafts per cycle; τ: draft step time / target step time
(the paper's c). Formulas assume each draft is accepted independently with probability α.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

BEST_GAMMA_SEARCH_LIMIT = 256


def expected_tokens_per_cycle(alpha: float, gamma: int) -> float:
    """E = (1 − α^(γ+1)) / (1 − α): accepted drafts + the target's own token (Eq. 1)."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def expected_speedup(alpha: float, gamma: int, tau: float) -> float:
    """Walltime speedup over autoregressive decoding: E / (γτ + 1) (Theorem 3.8)."""
    return expected_tokens_per_cycle(alpha, gamma) / (gamma * tau + 1)


def expected_speedup_with_verify_cost(alpha: float, gamma: int, tau: float, verify_cost: float) -> float:
    """E / (γτ + ν): Theorem 3.8 with the verify pass costing ν target steps instead of exactly one.

    The paper assumes scoring γ + 1 tokens in parallel costs one step (ν = 1), which holds when a step
    is memory-bound; on a CPU, or for a large γ, ν is measurably above 1.
    """
    return expected_tokens_per_cycle(alpha, gamma) / (gamma * tau + verify_cost)


def verify_cost_for_speedup(alpha: float, gamma: int, tau: float, speedup: float) -> float:
    """The largest ν at which E / (γτ + ν) still reaches `speedup`: what a goal asks of the verify pass (below 1, no
    kernel can reach it at this α and τ)."""
    return expected_tokens_per_cycle(alpha, gamma) / speedup - gamma * tau


def operations_factor(alpha: float, gamma: int, tau_hat: float) -> float:
    """Arithmetic operations relative to autoregressive: (1 − α)(γτ̂ + γ + 1) / (1 − α^(γ+1)) (Theorem 3.11)."""
    return (gamma * tau_hat + gamma + 1) / expected_tokens_per_cycle(alpha, gamma)


def best_gamma(alpha: float, tau: float, limit: int = BEST_GAMMA_SEARCH_LIMIT, verify_cost: float = 1.0) -> tuple[int, float]:
    """The integer γ ≥ 1 that maximises the expected speedup E / (γτ + ν), and that speedup."""
    speedups = [(expected_speedup_with_verify_cost(alpha, gamma, tau, verify_cost), gamma) for gamma in range(1, limit + 1)]
    speedup, gamma = max(speedups)
    return gamma, speedup


def speedup_possible(alpha: float, tau: float) -> bool:
    """Some γ gives a speedup iff α > τ (Corollary 3.9)."""
    return alpha > tau


def speedup_lower_bound(alpha: float, tau: float) -> float:
    """When α > τ, the best γ gives at least (1 + α) / (1 + τ)."""
    return (1 + alpha) / (1 + tau)


def speedup_bound_free_draft(alpha: float) -> float:
    """As τ → 0 and γ → ∞ the speedup tends to 1 / (1 − α)."""
    return float("inf") if alpha >= 1.0 else 1 / (1 - alpha)


def practitioner_claim_speedup(alpha: float, tau: float) -> float:
    """A common claim, "(1 + τ) / (1 + τ/α)": not in the literature, shown only to be checked against Leviathan."""
    return (1 + tau) / (1 + tau / alpha)


@dataclass(frozen=True)
class Prediction:
    """What α and τ (and ν, when measured) predict at γ: the one place a prediction is assembled.

    Every prediction on screen, in the CLI and in bench is one of these: Readings holds one for a run, a
    scorecard and a hardware report; the theory tab and `python -m specviz theory` build one from sliders
    or flags.
    """

    alpha: float
    gamma: int
    tau: float
    verify_cost: float | None  # ν in target steps; None: not measured (the paper's ν = 1 is assumed)
    tokens_per_cycle: float  # E
    speedup: float  # Leviathan: E / (γτ + 1)
    speedup_with_verify_cost: float | None  # E / (γτ + ν); None when ν is not measured
    best_gamma: int  # by E / (γτ + ν) when ν is measured, else by Leviathan's
    best_speedup: float
    speedup_possible: bool  # α > τ

    @classmethod
    def of(
        cls, alpha: float, gamma: int, tau: float, verify_cost: float | None = None, limit: int = BEST_GAMMA_SEARCH_LIMIT
    ) -> Prediction:
        gamma_star, best = best_gamma(alpha, tau, limit=limit, verify_cost=verify_cost or 1.0)
        with_cost = expected_speedup_with_verify_cost(alpha, gamma, tau, verify_cost) if verify_cost is not None else None
        return cls(
            alpha=alpha,
            gamma=gamma,
            tau=tau,
            verify_cost=verify_cost,
            tokens_per_cycle=expected_tokens_per_cycle(alpha, gamma),
            speedup=expected_speedup(alpha, gamma, tau),
            speedup_with_verify_cost=with_cost,
            best_gamma=gamma_star,
            best_speedup=best,
            speedup_possible=speedup_possible(alpha, tau),
        )

    def curve(self, max_gamma: int) -> list[tuple[int, float, float]]:
        """(γ, Leviathan's speedup, the speedup with the measured ν, or with ν = 1 when unmeasured) for γ = 1..max_gamma."""
        nu = self.verify_cost or 1.0
        return [
            (g, expected_speedup(self.alpha, g, self.tau), expected_speedup_with_verify_cost(self.alpha, g, self.tau, nu))
            for g in range(1, max_gamma + 1)
        ]


def acceptance_length_law(alpha: float, gamma: int) -> list[float]:
    """P(k drafts accepted in a cycle), k = 0 .. γ, when each draft is accepted independently with chance α (Leviathan
    et al.'s model): α^k (1 − α) below γ, and α^γ at γ, the geometric law truncated where the window ends."""
    return [alpha**k * (1 - alpha) for k in range(gamma)] + [alpha**gamma]


def histogram_distance(counts: Sequence[int], law: Sequence[float]) -> float | None:
    """Total variation distance between a measured histogram, as shares, and a law: ½ Σ_k |share_k − law_k| (0: the
    same, 1: disjoint). None with no counts."""
    total = sum(counts)
    if not total:
        return None
    length = max(len(counts), len(law))
    shares = [c / total for c in counts] + [0.0] * (length - len(counts))
    padded = list(law) + [0.0] * (length - len(law))
    return 0.5 * sum(abs(share - p) for share, p in zip(shares, padded))
