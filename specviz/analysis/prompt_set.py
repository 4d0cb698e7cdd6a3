"""A prompt set's summary: every request of one method pooled, the one recipe behind `bench`, `report` and distill's card.

A rate over a prompt set is all its tokens over all its seconds, repeats included: each request weighs by its
length, as a server answering those requests sees it, and the same pooling as α's (analysis/score.py:pooled_alpha).
The target's step time is weighted by tokens alike, so τ = draft step / target step reads the same mean either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from specviz.engine.events import Summary


@dataclass(frozen=True)
class TimedRequest:
    """What pooling needs of one request: its new tokens and its seconds."""

    tokens: int
    wall_s: float  # prefill + decoding
    prefill_s: float | None = None  # None where the prefill is not timed apart (transformers' generate)
    step_s: float | None = None  # the target's mean step: the autoregressive baseline's only

    @classmethod
    def of(cls, summary: Summary) -> TimedRequest:
        step_s = summary.step_s if summary.mode == "autoregressive" else None
        return cls(summary.new_tokens, summary.wall_s, summary.prefill_s, step_s)


def pooled_rate(tokens: Iterable[int], seconds: Iterable[float]) -> float | None:
    """All the tokens over all the seconds (None before anything was timed)."""
    total_s = sum(seconds)
    return sum(tokens) / total_s if total_s > 0 else None


@dataclass(frozen=True)
class PromptSetSummary:
    tokens_per_s: float | None  # end to end: prefill + decoding
    decode_tokens_per_s: float | None  # decoding alone, what the theory models; None where prefill was not timed
    target_step_s: float | None  # token-weighted mean of the baseline's steps; None for other methods

    @classmethod
    def of(cls, requests: Sequence[TimedRequest]) -> PromptSetSummary:
        tokens = [r.tokens for r in requests]
        decoding = [r.wall_s - r.prefill_s for r in requests if r.prefill_s is not None]
        stepped = [r for r in requests if r.step_s is not None]
        step_s = None
        if requests and len(stepped) == len(requests) and sum(tokens) > 0:
            step_s = sum(r.step_s * r.tokens for r in stepped) / sum(tokens)
        return cls(
            tokens_per_s=pooled_rate(tokens, [r.wall_s for r in requests]),
            decode_tokens_per_s=pooled_rate(tokens, decoding) if requests and len(decoding) == len(requests) else None,
            target_step_s=step_s,
        )
