"""Speculation at batch size B: τ_B and ν_B from measured step costs, the predicted speedup, and where it stops paying.

At batch B the draft step, the target step and the verify pass each process B sequences. With
τ_B = draft step / target step and ν_B = verify pass / target step, Leviathan's speedup with the verify cost
(specviz.analysis.theory) predicts (1 − α^(γ+1)) / ((1 − α)(γ τ_B + ν_B)); both ratios and the prediction are read
from the step costs as any timed steps are (specviz.analysis.readings). Batch 1 is memory-bound (ν ≈ 1); as B grows
the verify pass over B·(γ + 1) tokens turns compute-bound, ν_B grows towards γ + 1, and the speedup falls
(docs/algorithm.md). The same α is assumed at every batch size: acceptance depends on the models and the text, not
on B. Speculation pays at a batch size where the prediction is faster by the one rule (`speed_verdict`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from specviz.analysis.readings import FASTER_FROM, readings_of_steps, speed_verdict

BATCH_SIZES = (1, 4, 16, 64)
PREDICTED_LABEL = "predicted from measured step costs"


@dataclass(frozen=True)
class BatchStepCosts:
    """Seconds of one forward at batch size B: a draft step, a target step, a verify pass over γ + 1 tokens."""

    batch: int
    draft_step_s: float
    target_step_s: float
    verify_s: float


@dataclass(frozen=True)
class BatchRow:
    """One batch size's prediction; `hardware --json` carries these as `batches`."""

    batch: int
    tau: float
    verify_cost: float
    predicted_speedup: float

    @property
    def pays(self) -> bool:
        """Predicted faster than the target alone, by the rule every speedup is judged by."""
        return speed_verdict(self.predicted_speedup) == "faster"

    def to_json(self) -> dict:
        return asdict(self)


def batch_row(costs: BatchStepCosts, alpha: float, gamma: int) -> BatchRow:
    """τ_B, ν_B and the speedup they predict at this α and γ."""
    readings = readings_of_steps(costs.draft_step_s, costs.target_step_s, costs.verify_s, gamma, alpha)
    return BatchRow(costs.batch, readings.tau, readings.verify_cost, readings.predicted_with_verify_cost)


def batch_rows(costs: Sequence[BatchStepCosts], alpha: float, gamma: int) -> list[BatchRow]:
    """One row per measured batch size, smallest first."""
    return [batch_row(c, alpha, gamma) for c in sorted(costs, key=lambda c: c.batch)]


def stops_paying(rows: Sequence[BatchRow]) -> int | None:
    """The batch size from which speculation no longer pays: the first one measured past the largest that pays (the
    smallest one if none pays), or None if the largest measured still pays. A dip between batch sizes that pay
    (timing noise, on a shared machine) does not count as stopping."""
    rows = sorted(rows, key=lambda r: r.batch)
    paying = [row.batch for row in rows if row.pays]
    if not paying:
        return rows[0].batch if rows else None
    return next((row.batch for row in rows if row.batch > paying[-1]), None)


def stops_paying_sentence(rows: Sequence[BatchRow]) -> str:
    """Where speculation stops paying on this machine, in one sentence for the app and the report."""
    if not rows:
        return "No batch sizes were measured."
    largest = max(row.batch for row in rows)
    batch = stops_paying(rows)
    label = PREDICTED_LABEL[0].upper() + PREDICTED_LABEL[1:]
    dips = [row.batch for row in rows if not row.pays and (batch is None or row.batch < batch)]
    dipped = f" (though under {FASTER_FROM:.2f}× at batch {', '.join(map(str, sorted(dips)))})" if dips else ""
    if batch is None:
        every = "every batch size measured" if not dips else "the largest batch size measured"
        return f"{label}: speculation pays at {every}, up to {largest}{dipped}."
    if batch == min(row.batch for row in rows):
        return f"{label}: speculation does not pay even at batch {batch}."
    return f"{label}: speculation stops paying at batch {batch}{dipped}."
