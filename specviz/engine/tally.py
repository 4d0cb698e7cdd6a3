"""The one home of a speculative run's counts: folded cycle by cycle, read by every view.

α (both estimators, defined here once: the scorecard and the CLI call them too), tokens per cycle, the
mean acceptance length, the acceptance histogram and per-position acceptance are all properties of a Tally. The engine's Summary carries one, the app
folds one per shown cycle, and `bench` adds them up over prompts and repeats.

Counting conventions:
- a drafted token is *tested* if it was the first rejection or any draft before it;
- a *rejection* is a cycle whose window had drafts and did not accept all of them;
- α counts test results, so a draft accepted after an end-of-text token still counts as accepted,
  while tokens per cycle counts what was emitted (cut at end-of-text and at max_new_tokens).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Protocol


def ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, or None where there is nothing to divide by."""
    return numerator / denominator if denominator else None


def alpha_maximum_likelihood(n_accepted: int, n_rejections: int) -> float | None:
    """accepted / (accepted + rejections): drafts after a rejection were never tested, so they don't count."""
    tested = n_accepted + n_rejections
    return ratio(n_accepted, tested)


def alpha_analytic(overlap_sum: float, positions: int) -> float | None:
    """Mean of Σ_x min(p(x), q(x)) over tested (or teacher-forced) positions (Corollary 3.6): far less variance."""
    return ratio(overlap_sum, positions)


class PositionOverlap(Protocol):
    status: str  # "accepted", "rejected" or "unverified"
    overlap: float | None  # Σ_x min(p, q) at a tested position


class CycleCounts(Protocol):
    """What a tally reads from one cycle: the engine's Cycle event (specviz.engine.events) has all of it."""

    positions: Sequence[PositionOverlap]
    n_accepted: int
    ended_in_rejection: bool  # the target rejected every draft it tested after the accepted ones
    emitted_token_ids: Sequence[int]
    draft_s: float
    verify_s: float
    overhead_s: float


def _padded(counts: tuple[int, ...], length: int) -> list[int]:
    return list(counts) + [0] * (length - len(counts))


def _add_counts(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    length = max(len(a), len(b))
    return tuple(x + y for x, y in zip(_padded(a, length), _padded(b, length)))


@dataclass(frozen=True)
class Tally:
    cycles: int = 0
    drafted: int = 0
    accepted: int = 0
    rejections: int = 0
    tested: int = 0
    overlap_sum: float = 0.0  # Σ over tested positions of Σ_x min(p, q)
    overlaps: int = 0  # tested positions that carry an overlap
    emitted: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    overhead_s: float = 0.0
    accepted_histogram: tuple[int, ...] = ()  # [k]: cycles that accepted exactly k drafts
    tested_by_position: tuple[int, ...] = ()  # [i]: cycles whose draft i was tested
    accepted_by_position: tuple[int, ...] = ()  # [i]: cycles whose draft i was accepted

    def add(self, cycle: CycleCounts) -> Tally:
        """This tally with one more cycle folded in."""
        window = len(cycle.positions)  # drafted positions: a tree's every node
        rejected = cycle.ended_in_rejection
        n_tested = cycle.n_accepted + rejected  # depths tested: a tree's accepted path and the depth it ended at
        overlaps = [p.overlap for p in cycle.positions if p.status != "unverified" and p.overlap is not None]
        histogram = _padded(self.accepted_histogram, max(len(self.accepted_histogram), n_tested + 1))
        histogram[cycle.n_accepted] += 1
        tested_by_position = _add_counts(self.tested_by_position, (1,) * n_tested)
        accepted_by_position = _add_counts(
            self.accepted_by_position, (1,) * cycle.n_accepted + (0,) * (n_tested - cycle.n_accepted)
        )
        return Tally(
            cycles=self.cycles + 1,
            drafted=self.drafted + window,
            accepted=self.accepted + cycle.n_accepted,
            rejections=self.rejections + rejected,
            tested=self.tested + n_tested,
            overlap_sum=self.overlap_sum + sum(overlaps),
            overlaps=self.overlaps + len(overlaps),
            emitted=self.emitted + len(cycle.emitted_token_ids),
            draft_s=self.draft_s + cycle.draft_s,
            verify_s=self.verify_s + cycle.verify_s,
            overhead_s=self.overhead_s + cycle.overhead_s,
            accepted_histogram=tuple(histogram),
            tested_by_position=tested_by_position,
            accepted_by_position=accepted_by_position,
        )

    def __add__(self, other: Tally) -> Tally:
        """Two runs' tallies as one (bench adds them over prompts and repeats)."""
        merged = {}
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            merged[f.name] = _add_counts(a, b) if isinstance(a, tuple) else a + b
        return Tally(**merged)

    @classmethod
    def of(cls, cycles: Sequence[CycleCounts]) -> Tally:
        return functools.reduce(cls.add, cycles, cls())

    @classmethod
    def running(cls, cycles: Sequence[CycleCounts]) -> list[Tally]:
        """The tally after each cycle, in one pass (for the live charts)."""
        return list(itertools.accumulate(cycles, cls.add, initial=cls()))[1:]

    @property
    def alpha(self) -> float | None:
        """Maximum-likelihood α: accepted / (accepted + rejections); drafts after a rejection were never tested."""
        return alpha_maximum_likelihood(self.accepted, self.rejections)

    @property
    def alpha_naive(self) -> float | None:
        """accepted / drafted: biased low, since drafts after a rejection are never tested."""
        return ratio(self.accepted, self.drafted)

    @property
    def alpha_analytic(self) -> float | None:
        """Mean Σ min(p, q) over tested positions (Leviathan, Corollary 3.6): far less variance."""
        return alpha_analytic(self.overlap_sum, self.overlaps)

    @property
    def tokens_per_cycle(self) -> float | None:
        """Tokens emitted per target forward (Leviathan's E, measured)."""
        return ratio(self.emitted, self.cycles)

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted / cycles: vLLM's mean acceptance length (tokens per forward before any cut)."""
        per_cycle = ratio(self.accepted, self.cycles)
        return None if per_cycle is None else 1 + per_cycle

    @property
    def acceptance_by_position(self) -> list[float | None]:
        """Conditional: P(draft i accepted | drafts 1..i−1 accepted, so draft i tested), for i = 1..longest window."""
        return [ratio(a, t) for a, t in zip(self.accepted_by_position, self.tested_by_position)]

    @property
    def acceptance_rate_per_pos(self) -> list[float | None]:
        """Unconditional, as vLLM counts it: drafts accepted at position i over all cycles (`num_accepted_tokens_per_pos`
        / `num_drafts`), so a later position also pays for the rejections before it."""
        return [ratio(a, self.cycles) for a in self.accepted_by_position]

    @property
    def drafts_per_cycle(self) -> float | None:
        """Mean window actually drafted (variable under adaptive or dynamic drafting)."""
        return ratio(self.drafted, self.cycles)

    @property
    def rows_per_pass(self) -> float | None:
        """Mean rows of a verify pass: the pending token and every drafted position (a token tree's every node)."""
        per_cycle = self.drafts_per_cycle
        return None if per_cycle is None else per_cycle + 1

    @property
    def draft_step_s(self) -> float | None:
        """Mean time of one drafted token."""
        return ratio(self.draft_s, self.drafted)

    @property
    def verify_pass_s(self) -> float | None:
        """Mean time of one verify pass (one target forward over the pending token and the drafts)."""
        return ratio(self.verify_s, self.cycles)
