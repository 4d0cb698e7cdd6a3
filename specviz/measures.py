"""Measured α, τ and speedup of a recorded run, and what the theory predicts from them."""

from __future__ import annotations

from dataclasses import dataclass

from specviz import theory
from specviz.engine.events import Cycle
from specviz.trace import Trace


@dataclass(frozen=True)
class Measures:
    n_cycles: int
    alpha: float | None  # accepted / (accepted + rejections)
    alpha_naive: float | None  # accepted / drafted, biased low
    alpha_analytic: float | None  # mean Σ min(p, q) over tested positions
    tau: float | None  # draft step / target step (the baseline's step if measured, else the verify pass)
    tau_source: str
    tokens_per_cycle: float | None
    gamma: int
    measured_speedup: float | None
    predicted_speedup: float | None  # Leviathan: verify pass = one target step
    verify_cost: float | None  # ν: verify pass time / autoregressive step time
    predicted_with_verify_cost: float | None
    best_gamma: int | None
    best_speedup: float | None


def tested_positions(cycle: Cycle) -> int:
    return min(cycle.n_accepted + 1, len(cycle.positions))


def running_alphas(cycles: list[Cycle]) -> tuple[list[float | None], list[float | None]]:
    """Both α estimators after each cycle, in one pass (the same definitions as `measure`)."""
    accepted = rejections = 0
    overlap_sum, n_overlaps = 0.0, 0
    maximum_likelihood, analytic = [], []
    for cycle in cycles:
        accepted += cycle.n_accepted
        rejections += cycle.resampled_token_id is not None and bool(cycle.positions)
        tested = [p.overlap for p in cycle.positions[: tested_positions(cycle)] if p.overlap is not None]
        overlap_sum, n_overlaps = overlap_sum + sum(tested), n_overlaps + len(tested)
        maximum_likelihood.append(theory.alpha_maximum_likelihood(accepted, rejections))
        analytic.append(overlap_sum / n_overlaps if n_overlaps else None)
    return maximum_likelihood, analytic


def measure(trace: Trace, upto: int | None = None) -> Measures:
    """Measures over the first `upto` cycles (all by default)."""
    cycles = trace.cycles if upto is None else trace.cycles[:upto]
    accepted = sum(c.n_accepted for c in cycles)
    rejections = sum(1 for c in cycles if c.resampled_token_id is not None and c.positions)
    drafted = sum(len(c.positions) for c in cycles)
    overlaps = [p.overlap for c in cycles for p in c.positions[: tested_positions(c)] if p.overlap is not None]
    draft_step = sum(c.draft_s for c in cycles) / drafted if drafted else None
    if trace.baseline is not None and trace.baseline.target_forward_s:
        target_step, source = trace.baseline.target_forward_s, "draft step / target step (autoregressive run)"
    else:
        verify_cycles = [c.verify_s for c in cycles]
        target_step = sum(verify_cycles) / len(verify_cycles) if verify_cycles else None
        source = "draft step / target verify pass"
    tau = draft_step / target_step if draft_step is not None and target_step else None
    alpha = theory.alpha_maximum_likelihood(accepted, rejections)
    gamma = trace.started.gamma if trace.started else 0
    predicted = best_gamma = best_speedup = None
    if alpha is not None and tau is not None and gamma:
        predicted = theory.expected_speedup(alpha, gamma, tau)
        best_gamma, best_speedup = theory.best_gamma(alpha, tau, limit=64)
    verify_cost = predicted_with_cost = None
    if trace.baseline is not None and trace.baseline.target_forward_s and cycles:
        verify_cost = sum(c.verify_s for c in cycles) / len(cycles) / trace.baseline.target_forward_s
        if alpha is not None and tau is not None and gamma:
            predicted_with_cost = theory.expected_speedup_with_verify_cost(alpha, gamma, tau, verify_cost)
    measured = None
    if trace.summary is not None and trace.baseline is not None and trace.summary.wall_s:
        measured = trace.baseline.wall_s / trace.summary.wall_s * trace.summary.new_tokens / max(1, trace.baseline.new_tokens)
    emitted = sum(len(c.emitted_token_ids) for c in cycles)
    return Measures(
        n_cycles=len(cycles),
        alpha=alpha,
        alpha_naive=accepted / drafted if drafted else None,
        alpha_analytic=theory.alpha_analytic(overlaps),
        tau=tau,
        tau_source=source,
        tokens_per_cycle=emitted / len(cycles) if cycles else None,
        gamma=gamma,
        measured_speedup=measured,
        predicted_speedup=predicted,
        verify_cost=verify_cost,
        predicted_with_verify_cost=predicted_with_cost,
        best_gamma=best_gamma,
        best_speedup=best_speedup,
    )
