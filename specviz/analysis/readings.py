"""Measured α, τ, ν and speedup, and what the theory predicts from them: derived here, and only here.

Every view (stream summary, charts, race, verdict, lessons, CLI, bench) reads a Readings value,
so no two of them can disagree. The counts come from the engine's Tally; the formulas from theory.

τ is a draft step over the target's own autoregressive step when the baseline was measured (the
paper's c), else over a verify pass; ν is a verify pass over an autoregressive step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from specviz.analysis.theory import Prediction
from specviz.engine.tally import CycleCounts, Tally
from specviz.trace import Trace

TAU_OVER_STEP = "draft step / target step"
TAU_OVER_VERIFY = "draft step / verify pass (no target-alone run measured)"
BEST_GAMMA_LIMIT = 64  # the best γ a run's prediction searches up to
FASTER_FROM = 1.05  # a measured speedup from here up is "faster"; below SLOWER_BELOW "slower"; between, break-even
SLOWER_BELOW = 0.95
SpeedVerdict = Literal["faster", "even", "slower"]


def speed_verdict(speedup: float | None) -> SpeedVerdict | None:
    """Is it faster? The one rule, with a ±5 % band of break-even (timings on a shared machine wobble that much)."""
    if speedup is None:
        return None
    if speedup >= FASTER_FROM:
        return "faster"
    return "even" if speedup > SLOWER_BELOW else "slower"


@dataclass(frozen=True)
class Readings:
    tally: Tally  # empty for a scorecard or a hardware report, which time steps instead of running
    gamma: int
    alpha: float | None  # the α predictions use: the run's maximum-likelihood α, or a scorecard's mean Σ min(p, q)
    tau: float | None
    tau_source: str
    tau_denominator_s: float | None  # the target step τ is measured against
    verify_cost: float | None  # ν: a verify pass over γ + 1 tokens, in autoregressive target steps
    tokens_per_s: float | None  # the speculative run, end to end (prefill included)
    baseline_tokens_per_s: float | None  # the target alone, end to end
    measured_speedup: float | None  # tokens_per_s / baseline_tokens_per_s
    decode_speedup: float | None  # the same, decoding alone (prefill excluded): what the formula models
    prediction: Prediction | None  # from α, τ, ν at γ; None until α and τ are known

    @property
    def n_cycles(self) -> int:
        return self.tally.cycles

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
    def predicted_speedup(self) -> float | None:
        """Leviathan: E / (γτ + 1)."""
        return self.prediction.speedup if self.prediction else None

    @property
    def predicted_with_verify_cost(self) -> float | None:
        """E / (γτ + ν)."""
        return self.prediction.speedup_with_verify_cost if self.prediction else None

    @property
    def best_gamma(self) -> int | None:
        """By the prediction with ν when measured, else Leviathan's."""
        return self.prediction.best_gamma if self.prediction else None

    @property
    def best_speedup(self) -> float | None:
        return self.prediction.best_speedup if self.prediction else None

    @property
    def measured_over_predicted(self) -> float | None:
        """The decoding speedup over Leviathan's prediction: how much of the theory this machine delivers."""
        if self.decode_speedup is None or not self.predicted_speedup:
            return None
        return self.decode_speedup / self.predicted_speedup

    @property
    def speed_verdict(self) -> SpeedVerdict | None:
        return speed_verdict(self.measured_speedup)

    def cycle_tau(self, cycle: CycleCounts) -> float | None:
        """One cycle's τ: its mean draft step over the same target step the run's τ uses."""
        if not cycle.positions or not self.tau_denominator_s:
            return None
        return cycle.draft_s / len(cycle.positions) / self.tau_denominator_s


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


def _predict(alpha: float | None, gamma: int, tau: float | None, verify_cost: float | None) -> Prediction | None:
    if alpha is None or tau is None or not gamma:
        return None
    return Prediction.of(alpha, gamma, tau, verify_cost, limit=BEST_GAMMA_LIMIT)


def readings_of(
    tally: Tally,
    gamma: int,
    target_step_s: float | None = None,
    tokens_per_s: float | None = None,
    baseline_tokens_per_s: float | None = None,
    decode_tokens_per_s: float | None = None,
    baseline_decode_tokens_per_s: float | None = None,
) -> Readings:
    """Everything derived from a run's tally and the run-level timings that go with it."""
    step = target_step_s or tally.verify_pass_s
    tau = _ratio(tally.draft_step_s, step)
    verify_cost = _ratio(tally.verify_pass_s, target_step_s) if tally.verify_pass_s else None
    return Readings(
        tally=tally,
        gamma=gamma,
        alpha=tally.alpha,
        tau=tau,
        tau_source=TAU_OVER_STEP if target_step_s else TAU_OVER_VERIFY,
        tau_denominator_s=step,
        verify_cost=verify_cost,
        tokens_per_s=tokens_per_s,
        baseline_tokens_per_s=baseline_tokens_per_s,
        measured_speedup=_ratio(tokens_per_s, baseline_tokens_per_s) if tokens_per_s else None,
        decode_speedup=_ratio(decode_tokens_per_s, baseline_decode_tokens_per_s) if decode_tokens_per_s else None,
        prediction=_predict(tally.alpha, gamma, tau, verify_cost),
    )


def readings_of_steps(draft_step_s: float, target_step_s: float, verify_s: float, gamma: int, alpha: float | None) -> Readings:
    """What the theory predicts from timed steps (no run): a scorecard's or a hardware report's numbers."""
    tau, verify_cost = draft_step_s / target_step_s, verify_s / target_step_s
    return Readings(
        tally=Tally(),
        gamma=gamma,
        alpha=alpha,
        tau=tau,
        tau_source=TAU_OVER_STEP,
        tau_denominator_s=target_step_s,
        verify_cost=verify_cost,
        tokens_per_s=None,
        baseline_tokens_per_s=None,
        measured_speedup=None,
        decode_speedup=None,
        prediction=_predict(alpha, gamma, tau, verify_cost),
    )


def readings_of_trace(trace: Trace, upto: int | None = None, tally: Tally | None = None) -> Readings:
    """Readings over the first `upto` cycles of a trace (all by default); pass the tally if already folded."""
    if tally is None:
        tally = Tally.of(trace.cycles if upto is None else trace.cycles[:upto])
    baseline = trace.baseline
    finished = trace.summary is not None and (upto is None or upto >= len(trace.cycles))
    return readings_of(
        tally,
        gamma=trace.started.gamma if trace.started else 0,
        target_step_s=baseline.step_s if baseline is not None and baseline.step_s else None,
        tokens_per_s=trace.summary.tokens_per_s if finished else None,
        baseline_tokens_per_s=baseline.tokens_per_s if finished and baseline is not None else None,
    )
