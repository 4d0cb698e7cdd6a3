"""Measured α, τ, ν and speedup, and what the theory predicts from them: derived here, and only here.

Every view (stream summary, charts, race, verdict, lessons, CLI, bench) reads a Measures value,
so no two of them can disagree. The counts come from the engine's Tally.

τ is a draft step over the target's own autoregressive step when the baseline was measured (the
paper's c), else over a verify pass; ν is a verify pass over an autoregressive step.
"""

from __future__ import annotations

from dataclasses import dataclass

from specviz.analysis import theory
from specviz.engine.tally import Tally
from specviz.trace import Trace

TAU_OVER_STEP = "draft step / target step"
TAU_OVER_VERIFY = "draft step / verify pass (no target-alone run measured)"


@dataclass(frozen=True)
class Measures:
    tally: Tally
    gamma: int
    tau: float | None
    tau_source: str
    tau_denominator_s: float | None  # the target step τ is measured against
    verify_cost: float | None  # ν: a verify pass over γ + 1 tokens, in autoregressive target steps
    tokens_per_s: float | None  # the speculative run, end to end (prefill included)
    baseline_tokens_per_s: float | None  # the target alone, end to end
    measured_speedup: float | None  # tokens_per_s / baseline_tokens_per_s
    predicted_speedup: float | None  # Leviathan: E / (γτ + 1)
    predicted_with_verify_cost: float | None  # E / (γτ + ν)
    best_gamma: int | None  # by the prediction with ν when measured, else Leviathan's
    best_speedup: float | None

    @property
    def n_cycles(self) -> int:
        return self.tally.cycles

    @property
    def alpha(self) -> float | None:
        return self.tally.alpha

    @property
    def alpha_naive(self) -> float | None:
        return self.tally.alpha_naive

    @property
    def alpha_analytic(self) -> float | None:
        return self.tally.alpha_analytic

    @property
    def tokens_per_cycle(self) -> float | None:
        return self.tally.tokens_per_cycle

    @property
    def worth_it(self) -> bool | None:
        """Measured first: a speedup above 1 is worth it; with no measurement, the theory's α > τ."""
        if self.measured_speedup is not None:
            return self.measured_speedup > 1.0
        if self.alpha is None or self.tau is None:
            return None
        return theory.speedup_possible(self.alpha, self.tau)


def measures_of(
    tally: Tally,
    gamma: int,
    target_step_s: float | None = None,
    tokens_per_s: float | None = None,
    baseline_tokens_per_s: float | None = None,
) -> Measures:
    """Everything derived from a tally and the run-level timings that go with it."""
    step = target_step_s or tally.verify_pass_s
    tau = tally.draft_step_s / step if tally.draft_step_s is not None and step else None
    verify_cost = tally.verify_pass_s / target_step_s if target_step_s and tally.verify_pass_s else None
    alpha = tally.alpha
    predicted = predicted_with_cost = best_gamma = best_speedup = None
    if alpha is not None and tau is not None and gamma:
        predicted = theory.expected_speedup(alpha, gamma, tau)
        best_gamma, best_speedup = theory.best_gamma(alpha, tau, limit=64, verify_cost=verify_cost or 1.0)
        if verify_cost is not None:
            predicted_with_cost = theory.expected_speedup_with_verify_cost(alpha, gamma, tau, verify_cost)
    measured = tokens_per_s / baseline_tokens_per_s if tokens_per_s and baseline_tokens_per_s else None
    return Measures(
        tally=tally,
        gamma=gamma,
        tau=tau,
        tau_source=TAU_OVER_STEP if target_step_s else TAU_OVER_VERIFY,
        tau_denominator_s=step,
        verify_cost=verify_cost,
        tokens_per_s=tokens_per_s,
        baseline_tokens_per_s=baseline_tokens_per_s,
        measured_speedup=measured,
        predicted_speedup=predicted,
        predicted_with_verify_cost=predicted_with_cost,
        best_gamma=best_gamma,
        best_speedup=best_speedup,
    )


def measure(trace: Trace, upto: int | None = None, tally: Tally | None = None) -> Measures:
    """Measures over the first `upto` cycles of a trace (all by default); pass the tally if already folded."""
    if tally is None:
        tally = Tally.of(trace.cycles if upto is None else trace.cycles[:upto])
    baseline = trace.baseline
    finished = trace.summary is not None and (upto is None or upto >= len(trace.cycles))
    return measures_of(
        tally,
        gamma=trace.started.gamma if trace.started else 0,
        target_step_s=baseline.step_s if baseline is not None and baseline.step_s else None,
        tokens_per_s=trace.summary.tokens_per_s if finished else None,
        baseline_tokens_per_s=baseline.tokens_per_s if finished and baseline is not None else None,
    )
