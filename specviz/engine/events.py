"""What the engine yields: small frozen dataclasses of ints, floats and short lists, never tensors.

Renderers, charts, the CLI and JSON traces are all pure functions of these events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

TokenStatus = Literal["accepted", "rejected", "unverified"]
RankedToken = tuple[int, str, float]  # (token id, text, probability)


@dataclass(frozen=True)
class DraftPosition:
    """One drafted token x_i and, if it was tested, the test's numbers."""

    token_id: int
    text: str
    status: TokenStatus
    q: float  # q_i(x_i) as shown (plain softmax under greedy)
    p: float | None  # p_i(x_i); None if never tested
    accept_probability: float | None  # min(1, p/q), or the greedy/lenient rule's 0/1
    u: float | None  # the uniform drawn for the test; None under greedy
    overlap: float | None  # Σ_x min(p_i(x), q_i(x)): Leviathan's analytic α at this position
    top_p: tuple[RankedToken, ...] = ()
    top_q: tuple[RankedToken, ...] = ()
    top_residual: tuple[RankedToken, ...] = ()  # norm(max(0, p − q)), on the rejected position only


@dataclass(frozen=True)
class RunStarted:
    mode: Literal["speculative", "autoregressive"]
    prompt_token_ids: tuple[int, ...]
    prompt_texts: tuple[str, ...]
    gamma: int
    temperature: float
    top_k: int
    top_p: float
    seed: int
    drafter: str
    lenience: float
    lossy: bool
    adaptive_gamma: bool
    max_new_tokens: int
    prefill_s: float


@dataclass(frozen=True)
class Cycle:
    """One speculative cycle: draft γ, verify once, accept a prefix, add the target's own token."""

    index: int
    gamma: int
    positions: tuple[DraftPosition, ...]
    n_accepted: int
    resampled_token_id: int | None  # the target's correction after a rejection
    bonus_token_id: int | None  # the target's extra token when every draft was accepted
    new_token_text: str
    bonus_top_p: tuple[RankedToken, ...]  # top of p_{γ+1} (bonus) or of the last tested p
    emitted_token_ids: tuple[int, ...]  # accepted drafts + the target's token, cut at max_new_tokens
    draft_s: float
    verify_s: float
    overhead_s: float
    n_draft_forwards: int
    lossy: bool

    @property
    def draft_token_ids(self) -> tuple[int, ...]:
        return tuple(position.token_id for position in self.positions)


@dataclass(frozen=True)
class Step:
    """One autoregressive step of the baseline: one target forward, one token."""

    index: int
    token_id: int
    text: str
    step_s: float


@dataclass(frozen=True)
class Summary:
    mode: Literal["speculative", "autoregressive"]
    new_token_ids: tuple[int, ...]
    text: str
    wall_s: float  # prefill + every cycle or step, synchronised
    prefill_s: float
    stop_reason: Literal["max_new_tokens", "eos", "stopped"]
    n_cycles: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    n_rejections: int = 0
    overlap_sum: float = 0.0  # Σ over tested positions of Σ_x min(p, q)
    n_tested: int = 0
    draft_forward_s: float = 0.0  # mean time of one draft forward
    target_forward_s: float = 0.0  # mean time of one target forward (verify, or baseline step)
    lossy: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def new_tokens(self) -> int:
        return len(self.new_token_ids)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        decode_s = self.wall_s - self.prefill_s
        return self.new_tokens / decode_s if decode_s > 0 else 0.0

    @property
    def alpha(self) -> float | None:
        """Maximum-likelihood α: accepted / (accepted + rejections)."""
        tested = self.n_accepted + self.n_rejections
        return self.n_accepted / tested if tested else None

    @property
    def alpha_naive(self) -> float | None:
        """accepted / drafted: biased low, since drafts after a rejection are never tested."""
        return self.n_accepted / self.n_drafted if self.n_drafted else None

    @property
    def alpha_analytic(self) -> float | None:
        """Mean Σ min(p, q) over tested positions (Leviathan, Corollary 3.6)."""
        return self.overlap_sum / self.n_tested if self.n_tested else None

    @property
    def tau(self) -> float | None:
        """Draft forward time / target forward time."""
        if not self.draft_forward_s or not self.target_forward_s:
            return None
        return self.draft_forward_s / self.target_forward_s

    @property
    def tokens_per_cycle(self) -> float | None:
        return self.new_tokens / self.n_cycles if self.n_cycles else None


Event = RunStarted | Cycle | Step | Summary
