"""The readings of a run: α, τ, ν, the speedups and what the theory predicts from them, derived here and only here.

Every view (stream summary, charts, race, verdict, lessons, CLI, bench, report) reads a Readings value, so no
two of them can disagree. The counts come from the engine's Tally; the formulas from theory. Whether a speedup,
measured or predicted, is one at all is `speed_verdict`'s one rule.

τ is a draft step over the target's own autoregressive step when the baseline was measured (the
paper's c), else over a verify pass; ν is a verify pass over an autoregressive step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Literal

from specviz.analysis.theory import Prediction, acceptance_length_law, histogram_distance
from specviz.engine.tally import CycleCounts, Tally
from specviz.run.trace import Trace

TAU_OVER_STEP = "draft step / target step"
TAU_OVER_VERIFY = "draft step / verify pass (no target-alone run measured)"
BEST_GAMMA_LIMIT = 64  # the best γ a run's prediction searches up to
BREAK_EVEN_BAND = 0.05  # within ±5 % of 1× a speedup is break-even: timings on a shared machine wobble that much
FASTER_FROM = 1 + BREAK_EVEN_BAND  # 1.05×
SLOWER_FROM = 1 - BREAK_EVEN_BAND  # 0.95×
SpeedVerdict = Literal["faster", "even", "slower"]
STEADY_WITHIN = 0.10  # a speedup whose measurements all lie within 10 % of their median is steady (pyperf warns past 10 %)


def speed_verdict(speedup: float | None) -> SpeedVerdict | None:
    """Is it faster? The one rule for every speedup, measured or predicted: from 1.05× faster, to 0.95× slower,
    between the two break-even. The app's verdict, the deployment verdict and the batch curve all ask it."""
    if speedup is None:
        return None
    if speedup >= FASTER_FROM:
        return "faster"
    return "slower" if speedup <= SLOWER_FROM else "even"


@dataclass(frozen=True)
class Spread:
    """A ratio measured several times (rounds of one Run, repeats of `bench`, `bench` processes): its median, and the
    spread, how far the farthest measurement lies from the median, so that every measurement lies within median ± spread.

    The median, not the mean: on a shared machine one slowed round is an outlier, not information about the pair. The
    farthest distance, not a standard deviation: with three to five rounds it is what a class would see if it pressed
    Run again, and it is the statistic the goals are stated in ("within 10 % of their median").
    """

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        """The middle measurement (the lower middle one of an even count): always one that was measured, so a Run's
        speedup is the round whose trace it plays back."""
        return self.values[median_index(self.values)]

    @property
    def spread(self) -> float | None:
        """The largest |value − median|; None for a single measurement (no spread known)."""
        if len(self.values) < 2:
            return None
        return max(abs(value - self.median) for value in self.values)

    @property
    def relative(self) -> float | None:
        """The spread over the median (0.05: every measurement within 5 % of the median)."""
        spread = self.spread
        return spread / self.median if spread is not None and self.median else None

    @property
    def steady(self) -> bool | None:
        """Every measurement within STEADY_WITHIN of the median; None for a single measurement."""
        relative = self.relative
        return None if relative is None else relative <= STEADY_WITHIN

    def text(self, digits: int = 2) -> str:
        """ "1.48× ± 0.05", or "1.48×" for a single measurement."""
        shown = f"{self.median:.{digits}f}×"
        return shown if self.spread is None else f"{shown} ± {self.spread:.{digits}f}"

    def to_json(self) -> dict:
        return {"median": self.median, "spread": self.spread, "relative": self.relative, "values": list(self.values)}


def spread_of(values: Sequence[float | None]) -> Spread | None:
    """The median and spread of the measurements that completed (None among them: a stopped round); None if none did."""
    kept = tuple(float(value) for value in values if value is not None)
    return Spread(kept) if kept else None


def median_index(values: Sequence[float]) -> int:
    """Which measurement is the median (the lower middle one of an even count): the one whose trace a Run keeps."""
    order = sorted(range(len(values)), key=lambda index: values[index])
    return order[(len(values) - 1) // 2]


def _read(held: str, name: str, doc: str) -> property:
    """One number of what a Readings holds (its tally, its prediction), or None while it holds none."""
    return property(lambda self: None if getattr(self, held) is None else getattr(getattr(self, held), name), doc=doc)


@dataclass(frozen=True)
class Readings:
    tally: Tally  # empty for a scorecard or a hardware report, which time steps instead of running
    gamma: int
    alpha: float | None  # the α predictions use: the run's maximum-likelihood α, or a scorecard's mean Σ min(p, q)
    tau: float | None
    tau_source: str
    tau_denominator_s: float | None  # the target step τ is measured against
    verify_cost: float | None  # ν: a verify pass over γ + 1 tokens, in autoregressive target steps
    tokens_per_s: float | None = None  # the speculative run, end to end (prefill included)
    baseline_tokens_per_s: float | None = None  # the target alone, end to end
    measured_speedup: float | None = None  # tokens_per_s / baseline_tokens_per_s
    decode_speedup: float | None = None  # the same, decoding alone (prefill excluded): what the formula models
    speedup_spread: Spread | None = None  # every round's measured speedup, where the run was measured several times

    @cached_property
    def prediction(self) -> Prediction | None:
        """What α, τ and ν predict at γ; None until α and τ are known."""
        if self.alpha is None or self.tau is None or not self.gamma:
            return None
        return Prediction.of(self.alpha, self.gamma, self.tau, self.verify_cost, limit=BEST_GAMMA_LIMIT)

    predicted_speedup = _read("prediction", "speedup", "Leviathan: E / (γτ + 1).")
    predicted_with_verify_cost = _read("prediction", "speedup_with_verify_cost", "E / (γτ + ν).")
    best_gamma = _read("prediction", "best_gamma", "By the prediction with ν when measured, else Leviathan's.")
    best_speedup = _read("prediction", "best_speedup", "The speedup at the best γ.")
    n_cycles = _read("tally", "cycles", "Cycles counted.")
    alpha_naive = _read("tally", "alpha_naive", "Accepted / drafted: biased low (the tally says why).")
    alpha_analytic = _read("tally", "alpha_analytic", "Mean Σ min(p, q) over tested positions.")
    tokens_per_cycle = _read("tally", "tokens_per_cycle", "Tokens emitted per target forward.")

    @property
    def acceptance_length_law(self) -> list[float] | None:
        """The truncated geometric law of accepted drafts per cycle, k = 0 .. γ, for the measured α (a chain's law:
        None for a token tree, whose γ is its depth, and until α is known)."""
        if self.alpha is None or not self.gamma or len(self.tally.accepted_histogram) > self.gamma + 1:
            return None
        return acceptance_length_law(self.alpha, self.gamma)

    @property
    def acceptance_histogram(self) -> list[int]:
        """Cycles by drafts accepted, k = 0 .. γ (zeros where none landed)."""
        counts = list(self.tally.accepted_histogram)
        return counts + [0] * (self.gamma + 1 - len(counts))

    @property
    def histogram_distance(self) -> float | None:
        """Total variation distance between the measured histogram and its law."""
        law = self.acceptance_length_law
        return None if law is None else histogram_distance(self.acceptance_histogram, law)

    def acceptance_metrics(self) -> dict:
        """Acceptance as production engines report it, for JSON (run, bench, report); named as vLLM names the same
        quantity (docs/numbers.md states each definition)."""
        tally = self.tally
        return {
            "mean_acceptance_length": tally.mean_acceptance_length,
            "num_drafts": tally.cycles,
            "num_draft_tokens": tally.drafted,
            "num_accepted_tokens": tally.accepted,
            "num_accepted_tokens_per_pos": list(tally.accepted_by_position),
            "acceptance_rate_per_pos": tally.acceptance_rate_per_pos,
            "conditional_acceptance_rate_per_pos": tally.acceptance_by_position,
            "acceptance_histogram": self.acceptance_histogram,
            "acceptance_length_law": self.acceptance_length_law,
            "acceptance_histogram_distance": self.histogram_distance,
        }

    @property
    def measured_over_predicted(self) -> float | None:
        """The decoding speedup over Leviathan's prediction: how much of the theory this machine delivers."""
        if self.decode_speedup is None or not self.predicted_speedup:
            return None
        return self.decode_speedup / self.predicted_speedup

    @property
    def speed_verdict(self) -> SpeedVerdict | None:
        return speed_verdict(self.measured_speedup)

    @property
    def speedup_if_verify_costs_one_step(self) -> float | None:
        """Tokens per pass over a cycle's measured cost in target steps, its verify pass counted as one step instead of
        the ν it took: what these cycles would give where ν(k) stays flat to large k, as on a GPU (lesson "Chain or tree?")."""
        t = self.tally
        if not t.cycles or not self.tau_denominator_s or self.tokens_per_cycle is None:
            return None
        drafting_steps = (t.draft_s + t.overhead_s) / t.cycles / self.tau_denominator_s  # drafting and bookkeeping per cycle
        return self.tokens_per_cycle / (drafting_steps + 1)

    def cycle_tau(self, cycle: CycleCounts) -> float | None:
        """One cycle's τ: its mean draft step over the same target step the run's τ uses."""
        if not cycle.positions or not self.tau_denominator_s:
            return None
        return cycle.draft_s / len(cycle.positions) / self.tau_denominator_s


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


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
    return Readings(
        tally=tally,
        gamma=gamma,
        alpha=tally.alpha,
        tau=_ratio(tally.draft_step_s, step),
        tau_source=TAU_OVER_STEP if target_step_s else TAU_OVER_VERIFY,
        tau_denominator_s=step,
        verify_cost=_ratio(tally.verify_pass_s, target_step_s) if tally.verify_pass_s else None,
        tokens_per_s=tokens_per_s,
        baseline_tokens_per_s=baseline_tokens_per_s,
        measured_speedup=_ratio(tokens_per_s, baseline_tokens_per_s) if tokens_per_s else None,
        decode_speedup=_ratio(decode_tokens_per_s, baseline_decode_tokens_per_s) if decode_tokens_per_s else None,
    )


def readings_of_steps(draft_step_s: float, target_step_s: float, verify_s: float, gamma: int, alpha: float | None) -> Readings:
    """What the theory predicts from timed steps (no run): a scorecard's, a hardware report's, one batch size's."""
    tau, verify_cost = draft_step_s / target_step_s, verify_s / target_step_s
    return Readings(Tally(), gamma, alpha, tau, TAU_OVER_STEP, tau_denominator_s=target_step_s, verify_cost=verify_cost)


def verify_costs_of(pass_s: dict[int, float]) -> dict[int, float]:
    """ν(k): a pass over k rows over a pass over one row (one target step), from timed passes (timing.measure_pass_seconds)."""
    return {rows: seconds / pass_s[1] for rows, seconds in pass_s.items()}


def verify_costs_in_run(
    passes: dict[int, float], rows: Sequence[int], pass_s: Sequence[float], fixed_s: float, step_s: float
) -> dict[int, float]:
    """ν(k) as a run meets it (γ auto, deployment/gamma_auto.py), in the target's steps as its own run takes them: the
    curve of passes timed back to back (`passes`, k → seconds), scaled to what a run's passes over `rows` took
    (`pass_s`: the same passes inside a run, after the draft's steps, which take the cache), plus each cycle's fixed
    time (`fixed_s`: the test, rollback, the loop's own work). Without such passes, the curve as timed."""
    timed = [(min(max(1, n), max(passes)), seconds) for n, seconds in zip(rows, pass_s)]
    level = sum(seconds for _, seconds in timed) / sum(passes[n] for n, _ in timed) if timed else 1.0
    return {k: (seconds * level + fixed_s) / step_s for k, seconds in passes.items()}


def tau_in_run(draft_s_per_forward: float, step_s: float) -> float:
    """τ as a run meets it: a draft forward inside a run over the target's step as its own run takes it."""
    return draft_s_per_forward / step_s


def readings_of_trace(trace: Trace, upto: int | None = None, tally: Tally | None = None) -> Readings:
    """Readings over the first `upto` cycles of a trace (all by default); pass the tally if already folded."""
    if tally is None:
        tally = Tally.of(trace.cycles if upto is None else trace.cycles[:upto])
    baseline = trace.baseline
    finished = trace.summary is not None and (upto is None or upto >= len(trace.cycles))
    readings = readings_of(
        tally,
        gamma=trace.started.gamma if trace.started else 0,
        target_step_s=baseline.step_s if baseline is not None and baseline.step_s else None,
        tokens_per_s=trace.summary.tokens_per_s if finished else None,
        baseline_tokens_per_s=baseline.tokens_per_s if finished and baseline is not None else None,
    )
    rounds = spread_of(trace.round_speedups) if finished else None
    return replace(readings, speedup_spread=rounds) if rounds is not None else readings
