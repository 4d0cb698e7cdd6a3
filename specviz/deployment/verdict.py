"""Is speculation worth it here? The measured speedup first, then the article's rules of thumb, each checked.

The rules come from the article "Is speculative decoding worth it?": do it when the target has more than 30B
parameters, the batch is above 8, the acceptance rate (the mean acceptance length, tokens per cycle) is above 2.0;
expect the P99 latency to get worse, memory to grow 15–25 %, cold starts to double (5 s → 12 s). Each check says
whether its claim holds for what was measured, and why, in numbers; None when the number was not measured.
The answer itself is the app's speed verdict (specviz.analysis.readings.speed_verdict) in a deployment's words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specviz.analysis.readings import FASTER_FROM, SLOWER_FROM, speed_verdict
from specviz.deployment.batch import BatchRow, stops_paying
from specviz.deployment.memory import PairLoadTimes

ANSWERS = {"faster": "worth it", "even": "break-even", "slower": "not worth it", None: "not measured"}
LARGE_TARGET_PARAMETERS = 30e9
SMALL_TARGET_PARAMETERS = 7e9
BATCH_THRESHOLD = 8
ACCEPTANCE_THRESHOLD = 2.0
MEMORY_CLAIM = (0.15, 0.25)
COLD_START_CLAIM = 2.0  # "doubles your cold start time" (5 s → 12 s)


@dataclass(frozen=True)
class Check:
    """One rule of thumb: what the article claims, whether it holds for what was measured, and why."""

    rule: str
    claim: str
    holds: bool | None
    reason: str


@dataclass(frozen=True)
class DeploymentVerdict:
    """Worth deploying or not: the measured answer and the rules of thumb checked against the measurements."""

    answer: str  # "worth it", "break-even", "not worth it" or "not measured"
    speedup: float | None
    reason: str
    checks: tuple[Check, ...]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DeploymentVerdict:
        return cls(data["answer"], data["speedup"], data["reason"], tuple(Check(**c) for c in data["checks"]))


def overall(speedup: float | None) -> tuple[str, str]:
    """The answer from the measured speedup (end to end, speculative over the target alone) and its reason."""
    answer = ANSWERS[speed_verdict(speedup)]
    if speedup is None:
        return answer, "No speedup was measured: run both methods on the same prompts."
    rule = f"≥ {FASTER_FROM:.2f}× is faster, ≤ {SLOWER_FROM:.2f}× slower"
    return answer, f"Measured {speedup:.2f}× the target alone ({answer}: {rule})."


def _count(parameters: float) -> str:
    """A parameter count as people write it: 16.6M, 1.5B."""
    return f"{parameters / 1e9:.3g}B" if parameters >= 1e9 else f"{parameters / 1e6:.3g}M"


def check_target_size(target_parameters: int | None, speedup: float | None) -> Check:
    """'Target model > 30B parameters' (and 'don't below 7B: gains are minimal')."""
    claim = "Do it when the target has more than 30B parameters; below 7B gains are minimal."
    if target_parameters is None:
        return Check("target > 30B", claim, None, "The target's parameter count was not recorded.")
    size = f"The target has {_count(target_parameters)} parameters"
    if target_parameters > LARGE_TARGET_PARAMETERS:
        return Check("target > 30B", claim, True, f"{size}, above 30B.")
    measured = ""
    if speedup is not None and target_parameters < SMALL_TARGET_PARAMETERS:
        faster = speed_verdict(speedup) == "faster"
        agrees = "yet speculation measured faster, against the article" if faster else "as the article expects"
        measured = f"; measured {speedup:.2f}×, {agrees}"
    return Check("target > 30B", claim, False, f"{size}, not above 30B{measured}.")


def check_batch(rows: Sequence[BatchRow]) -> Check:
    """'Batch size > 8 ... really shines at 16+': does speculation still pay above batch 8 on this machine?"""
    claim = "Do it when the batch is above 8; it really shines at batch 16+."
    large = [row for row in rows if row.batch > BATCH_THRESHOLD]
    if not large:
        return Check("batch > 8", claim, None, "No batch size above 8 was measured (hardware --batch 1,4,16,64).")
    curve = ", ".join(f"{row.predicted_speedup:.2f}× at {row.batch}" for row in sorted(rows, key=lambda r: r.batch))
    stop = stops_paying(rows)
    where = f"; it stops paying at batch {stop}" if stop is not None else ""
    return Check("batch > 8", claim, all(row.pays for row in large), f"Predicted from measured step costs: {curve}{where}.")


def check_acceptance(mean_acceptance_length: float | None, speedup: float | None) -> Check:
    """'Your acceptance rate > 2.0': read as the mean acceptance length, tokens per target forward."""
    claim = "Do it when the acceptance rate (tokens per cycle) is above 2.0."
    if mean_acceptance_length is None:
        return Check("acceptance > 2.0", claim, None, "No speculative cycle was measured.")
    measured = f"; measured speedup {speedup:.2f}×" if speedup is not None else ""
    holds = mean_acceptance_length > ACCEPTANCE_THRESHOLD
    reason = f"Mean acceptance length {mean_acceptance_length:.2f} tokens per cycle{measured}."
    return Check("acceptance > 2.0", claim, holds, reason)


def check_p99(speculative_p99_s: float | None, autoregressive_p99_s: float | None) -> Check:
    """'Variance kills P99' (800 ms → 2.1 s): is the speculative P99 request latency worse here?"""
    claim = "Speculation makes the P99 request latency worse (800 ms → 2.1 s in one deployment)."
    if speculative_p99_s is None or autoregressive_p99_s is None:
        return Check("P99 latency", claim, None, "Request latency was not measured for both methods.")
    ratio = speculative_p99_s / autoregressive_p99_s if autoregressive_p99_s else float("inf")
    reason = f"P99 request latency {1000 * autoregressive_p99_s:.0f} ms → {1000 * speculative_p99_s:.0f} ms ({ratio:.2f}×)."
    return Check("P99 latency", claim, speculative_p99_s > autoregressive_p99_s, reason)


def check_memory(added_fraction: float | None, added_bytes: int | None = None) -> Check:
    """'Expect a 15–25 % memory increase': what speculation added to the peak here."""
    claim = "Speculation adds 15–25 % memory."
    if added_fraction is None:
        return Check("memory +15–25 %", claim, None, "The peak memory was not measured.")
    low, high = MEMORY_CLAIM
    added = f" ({added_bytes / 2**20:.1f} MiB)" if added_bytes is not None else ""
    holds = low <= added_fraction <= high
    return Check("memory +15–25 %", claim, holds, f"Speculation added {100 * added_fraction:.1f} % to the peak{added}.")


def check_cold_start(load_times: PairLoadTimes | None) -> Check:
    """'Cold starts go from 5 s to 12 s': does loading the draft too at least double the cold start?"""
    claim = "Speculation doubles the cold start (5 s → 12 s)."
    if load_times is None:
        return Check("cold start ×2", claim, None, "Load times were not measured.")
    alone, paired = load_times.autoregressive_cold_s, load_times.speculative_cold_s
    ratio = paired / alone if alone else float("inf")
    reason = f"Cold start {alone:.2f} s → {paired:.2f} s with the draft ({ratio:.2f}×)."
    return Check("cold start ×2", claim, ratio >= COLD_START_CLAIM, reason)


def judge(
    speedup: float | None,
    target_parameters: int | None = None,
    mean_acceptance_length: float | None = None,
    batch_rows: Sequence[BatchRow] = (),
    speculative_p99_s: float | None = None,
    autoregressive_p99_s: float | None = None,
    memory_added_fraction: float | None = None,
    memory_added_bytes: int | None = None,
    load_times: PairLoadTimes | None = None,
) -> DeploymentVerdict:
    """The verdict: the measured answer, then every rule of thumb checked against the measured numbers."""
    answer, reason = overall(speedup)
    checks = (
        check_target_size(target_parameters, speedup),
        check_batch(batch_rows),
        check_acceptance(mean_acceptance_length, speedup),
        check_p99(speculative_p99_s, autoregressive_p99_s),
        check_memory(memory_added_fraction, memory_added_bytes),
        check_cold_start(load_times),
    )
    return DeploymentVerdict(answer, speedup, reason, checks)
