"""What the engine yields: small frozen dataclasses of ints, floats and short lists, never tensors.

Renderers, charts, the CLI and JSON traces are all pure functions of these events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from specviz.engine.tally import Tally

# what a run says where its target is exact only up to rounding (RunStarted.rows_exact False, engine/row_exactness.py):
# the CLI's summary, the page's numbers and its greedy check
NOT_ROW_EXACT = (
    "exact up to rounding: the target runs float matrix kernels (fp32 or bf16), which pick their kernel by the number "
    "of rows, so a token in a verify pass can round in its last bits unlike the same token alone, and greedy "
    "speculation can part from the target alone at a near-tie (a weight-only form, `weights: int8`, `int4` or `auto`, "
    "is exact to the bit)"
)

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
class SameDraftsVerdict:
    """One verifier's verdict on a cycle's drafts, judged after the cycle's clock beside the run's own (lesson 12).

    Every verifier gets the same p, q and drafts and a generator seeded alike (engine/verifiers.py).
    """

    verification: str  # "exact", "block" or "match"
    n_accepted: int
    new_token_id: int
    accept_probability: tuple[float, ...]  # exact: min(1, p/q); block: h_i, the chance prefix i is kept; match: p_i(x_i)
    uniforms: tuple[float, ...]  # exact: u_i; block: η_i; match: () (it draws tokens, not uniforms)
    block_weights: tuple[float, ...]  # block: w_i = min(1, w_{i−1} p_i(x_i)/q_i(x_i)); () otherwise
    p: tuple[float, ...]  # p_i(x_i) for every draft, as sampled
    q: tuple[float, ...]  # q_i(x_i)


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
    tree: str = ""  # the token tree's shape as typed ("4x2x1"); "" for a chain
    engine: str = ""  # what the target ran on: "compiled" (its package), "eager" (the same forward uncompiled), "transformers"
    verification: str = "exact"  # how the drafts were judged: exact (token by token), block or match
    threads: int = 0  # torch's CPU threads when it started (torch.get_num_threads()); 0: not recorded
    # whether the target's kernels give a verify pass's every row the bits of its one-token step on every CPU (its layers
    # in a weight-only form, row-exact attention: engine/row_exactness.py); False: a float model (bf16,
    # fp32) whose GEMMs pick kernels by the rows' count, so speculation is exact only up to rounding
    rows_exact: bool = True


@dataclass(frozen=True)
class Cycle:
    """One speculative cycle: draft γ, verify once, accept a prefix, add the target's own token.

    A token tree's cycle is the same event with one position per node and `parents` set (a chain leaves it empty:
    position i's parent is i − 1): the accepted path is `accepted_nodes`, `n_accepted` its length.
    """

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
    overhead_s: float  # the acceptance test, rollback and the strategy's update (not the display numbers, as for a Step)
    n_draft_forwards: int
    lossy: bool
    draft_stop: str | None = (
        None  # why drafting stopped: "window full", "confidence 0.31 < 0.40", "token limit", "no earlier match"
    )
    released_s: float | None = None  # engine seconds since the request started when the emitted tokens were fixed
    parents: tuple[int, ...] = ()  # a tree's: per position, its parent's index, −1 for the last committed token
    accepted_nodes: tuple[int, ...] = ()  # a tree's accepted path, root to leaf (a chain's is its first n_accepted)
    verdicts: tuple[SameDraftsVerdict, ...] = ()  # every verifier's verdict on these drafts, when the run compared them

    @property
    def draft_token_ids(self) -> tuple[int, ...]:
        return tuple(position.token_id for position in self.positions)

    @property
    def is_tree(self) -> bool:
        return bool(self.parents)

    @property
    def path(self) -> tuple[int, ...]:
        """The accepted positions, in order, for a chain and a tree alike."""
        return self.accepted_nodes if self.is_tree else tuple(range(self.n_accepted))

    @property
    def n_rows(self) -> int:
        """Rows of the verify pass: the pending token and every drafted position."""
        return len(self.positions) + 1

    @property
    def ended_in_rejection(self) -> bool:
        """The last accepted position had drafted children, and the target rejected them all."""
        if not self.is_tree:
            return self.n_accepted < len(self.positions)
        last = self.accepted_nodes[-1] if self.accepted_nodes else -1
        return last in self.parents


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
    tally: Tally = field(default_factory=Tally)  # the speculative run's counts; empty for the baseline
    step_s: float = 0.0  # the baseline's mean autoregressive step; 0 for a speculative run
    lossy: bool = False

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


Event = RunStarted | Cycle | Step | Summary
