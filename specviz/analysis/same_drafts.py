"""Same drafts, three verdicts: a run's cycles as each verifier judged them (Cycle.verdicts), folded into one Tally
per verifier, so α and tokens per pass on identical drafts come from the tally's own rules.

A verdict other than the run's own is counterfactual: the run went on from its own verdict, so these tallies compare
the verifiers cycle by cycle on the same drafts and contexts (a paired comparison), not three runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specviz.engine.events import Cycle, SameDraftsVerdict
from specviz.engine.tally import Tally


@dataclass(frozen=True)
class _Position:
    status: str
    overlap: float | None = None


@dataclass(frozen=True)
class JudgedCycle:
    """One cycle as one verifier judged it, in the form a Tally reads (no times: nothing of it was timed)."""

    positions: tuple[_Position, ...]
    n_accepted: int
    emitted_token_ids: tuple[int, ...]
    draft_s: float = 0.0
    verify_s: float = 0.0
    overhead_s: float = 0.0

    @property
    def ended_in_rejection(self) -> bool:
        return self.n_accepted < len(self.positions)

    @classmethod
    def of(cls, verdict: SameDraftsVerdict) -> JudgedCycle:
        return cls.of_counts(len(verdict.p), verdict.n_accepted)

    @classmethod
    def of_counts(cls, window: int, n_accepted: int) -> JudgedCycle:
        """A chain's cycle of `window` drafts whose first `n_accepted` were kept (then one rejected, if any was)."""
        n = n_accepted
        statuses = ["accepted"] * n + ["rejected"] * (n < window) + ["unverified"] * max(0, window - n - 1)
        return cls(tuple(_Position(s) for s in statuses), n, (0,) * (n + 1))


def same_drafts_tallies(cycles: Sequence[Cycle]) -> dict[str, Tally]:
    """Per verifier, the tally of every compared cycle as it judged it (empty when the run compared none)."""
    tallies: dict[str, Tally] = {}
    for cycle in cycles:
        for verdict in cycle.verdicts:
            tallies[verdict.verification] = tallies.get(verdict.verification, Tally()).add(JudgedCycle.of(verdict))
    return tallies


def first_split(cycles: Sequence[Cycle]) -> Cycle | None:
    """The first cycle whose verdicts differ, preferring one where block verification kept more than token by token."""
    split = [c for c in cycles if len({v.n_accepted for v in c.verdicts}) > 1]
    by_name = lambda c: {v.verification: v.n_accepted for v in c.verdicts}  # noqa: E731
    better = [c for c in split if by_name(c).get("block", 0) > by_name(c).get("exact", 0)]
    return (better or split or [None])[0]
