"""What the engine asks of a drafter: the interface, the proposal and feedback it exchanges, and the adaptive-γ schedule.

The interface is transformers' CandidateGenerator, trimmed: `propose` (get_candidates) and `update`
(update_candidate_strategy), plus `start`, `window` and `rollback`. A proposal is a token tree (engine/tree.py); a
chain is the tree of width one, the shape `TreeShape.chain(γ)`. The strategies themselves (a draft model, n-gram
prompt lookup, dynamic drafting, a feature head) live in specviz/drafting/drafters.py and are named in
specviz/drafting/registry.py. Every strategy is exact: what is proposed may depend on anything but the target's
coming decision, and the acceptance test is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specviz.engine.settings import MAX_GAMMA, SamplingSettings
from specviz.engine.tree import TokenTree
from specviz.engine.tree_shape import TreeShape

WINDOW_FULL = "window full"


@dataclass
class Proposal:
    """Drafted tokens as a tree (parents first), with the rows q and the draft's logits were read from: row 0 at the
    last committed token, row i + 1 after node i (a chain's row i is q_{i+1})."""

    tree: TokenTree
    draft_probs: torch.Tensor | None  # (rows, vocab): q each node's children were drawn from; None: deterministic (q one-hot)
    draft_logits: torch.Tensor | None  # (rows, vocab), for display; None: q one-hot
    n_forwards: int
    stop_reason: str | None = None  # why drafting stopped: "window full", "confidence 0.31 < 0.40", "no match", ...

    @classmethod
    def chain(cls, token_ids: list[int], draft_probs=None, draft_logits=None, n_forwards=0, stop_reason=None) -> Proposal:
        return cls(TokenTree.chain(token_ids), draft_probs, draft_logits, n_forwards, stop_reason)

    @property
    def token_ids(self) -> list[int]:
        return list(self.tree.token_ids)


@dataclass(frozen=True)
class Feedback:
    """What the target made of one proposal: handed to the drafter's update hook after each cycle."""

    window: int  # how deep the cycle allowed drafting (a chain's γ)
    n_drafted: int
    accepted_nodes: tuple[int, ...]  # the accepted path, from depth 1 down (a chain's: 0 … n_accepted − 1)
    committed: tuple[int, ...]  # every token so far, the target's own new token included
    target_hidden_states: torch.Tensor | None = None  # (nodes + 1, hidden): at the pending token and each node; if asked for

    @property
    def n_accepted(self) -> int:
        return len(self.accepted_nodes)


class Drafter:
    """The base strategy: propose nothing, keep no state. Subclasses override what they need.

    Set `wants_target_hidden_states = True` to receive the target's hidden states in `update` (what an EAGLE-style
    head or an early-exit drafter reads); the engine then asks the target for them in the verify pass. A drafter
    that can propose a tree wider than a chain sets `grows_trees`.
    """

    name = "base"
    grows_trees = False
    wants_target_hidden_states = False
    target_hidden_layers: tuple[int, ...] = (-1,)  # which of the target's hidden states, side by side (−1: the last)

    @property
    def wanted_hidden_layers(self) -> tuple[int, ...]:
        """The target's hidden states the engine hands this drafter (none unless it asks for them)."""
        return self.target_hidden_layers if self.wants_target_hidden_states else ()

    def start(self, prompt_ids: list[int], prompt_hidden_states: torch.Tensor | None = None) -> None:
        """Forget the last run and read the prompt (and, if asked for, the target's features over all but its last
        token: (len(prompt_ids) − 1, hidden))."""

    def window(self, gamma: int) -> int:
        """How deep to draft this cycle, given the user's γ or the tree's depth (a schedule may change it)."""
        return gamma

    def propose(
        self,
        committed: list[int],
        shape: TreeShape,
        settings: SamplingSettings,
        generator: torch.Generator,
        siblings: str = "without_replacement",
    ) -> Proposal:
        """Propose a tree of this shape (a chain: `TreeShape.chain(γ)`) to follow `committed`; siblings drawn as
        `siblings` says (engine/acceptance.py)."""
        return Proposal.chain([], stop_reason="nothing to propose")

    def rollback(self, committed: list[int], accepted_nodes: list[int]) -> None:
        """Drop whatever state the target rejected: keep the accepted path."""

    def update(self, feedback: Feedback) -> None:
        """Learn from what the target accepted (transformers' update_candidate_strategy)."""


class AdaptiveGamma(Drafter):
    """Any drafter with transformers' "heuristic" schedule: γ + 2 after a fully accepted window, else γ − 1 (floor 1)."""

    def __init__(self, inner: Drafter, max_gamma: int = MAX_GAMMA) -> None:
        self.inner, self.max_gamma = inner, max_gamma
        self.name = f"{inner.name}, adaptive γ"
        self.wants_target_hidden_states = inner.wants_target_hidden_states
        self.target_hidden_layers = inner.target_hidden_layers
        self.scheduled: int | None = None

    def start(self, prompt_ids: list[int], prompt_hidden_states: torch.Tensor | None = None) -> None:
        self.inner.start(prompt_ids, prompt_hidden_states)
        self.scheduled = None  # the schedule restarts from the user's γ every run

    def window(self, gamma: int) -> int:
        if self.scheduled is None:
            self.scheduled = gamma
        return self.scheduled

    def propose(self, committed, shape, settings, generator, siblings="without_replacement") -> Proposal:
        return self.inner.propose(committed, shape, settings, generator, siblings)

    def rollback(self, committed: list[int], accepted_nodes: list[int]) -> None:
        self.inner.rollback(committed, accepted_nodes)

    def update(self, feedback: Feedback) -> None:
        self.inner.update(feedback)
        current = self.window(feedback.window)
        full = feedback.n_accepted == feedback.window
        self.scheduled = min(self.max_gamma, current + 2) if full else max(1, current - 1)


def with_schedule(drafter: Drafter, adaptive_gamma: bool) -> Drafter:
    """The drafter under the adaptive-γ schedule when asked for (the one place a drafter is wrapped in it)."""
    if adaptive_gamma and not isinstance(drafter, AdaptiveGamma):
        return AdaptiveGamma(drafter)
    return drafter
