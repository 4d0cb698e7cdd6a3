"""What the engine asks of a drafter: the interface, the proposal and feedback it exchanges, and the adaptive-γ schedule.

The interface is transformers' CandidateGenerator, trimmed: `propose` (get_candidates) and `update`
(update_candidate_strategy), plus `start`, `window` and `rollback`. The strategies themselves (a draft model,
n-gram prompt lookup, dynamic drafting, a feature head) live in specviz/drafting/drafters.py and are named in
specviz/drafting/registry.py. Every strategy is exact: what is proposed may depend on anything but the target's
coming decision, and the acceptance test is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specviz.engine.sampling import SamplingSettings
from specviz.engine.settings import MAX_GAMMA

WINDOW_FULL = "window full"


@dataclass
class Proposal:
    token_ids: list[int]
    draft_probs: torch.Tensor | None  # (k, vocab) q_i as sampled from; None: deterministic (q is one-hot)
    draft_logits: torch.Tensor | None  # (k, vocab), for display
    n_forwards: int
    stop_reason: str | None = None  # why drafting stopped: "window full", "confidence 0.31 < 0.40", "no match", ...


@dataclass(frozen=True)
class Feedback:
    """What the target made of one proposal: handed to the drafter's update hook after each cycle."""

    window: int  # how many drafts the cycle allowed
    n_drafted: int
    n_accepted: int
    committed: tuple[int, ...]  # every token so far, the target's own new token included
    target_hidden_states: torch.Tensor | None = (
        None  # (n_drafted + 1, hidden): last layer at the pending token and each draft; only if asked for
    )


class Drafter:
    """The base strategy: propose nothing, keep no state. Subclasses override what they need.

    Set `wants_target_hidden_states = True` to receive the target's last-layer hidden states in
    `update` (what an EAGLE-style head or an early-exit drafter reads); the engine then asks the
    target for them in the verify pass.
    """

    name = "base"
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
        """How many drafts to allow this cycle, given the user's γ (a schedule may change it)."""
        return gamma

    def propose(self, committed: list[int], gamma: int, settings: SamplingSettings, generator: torch.Generator) -> Proposal:
        """Propose up to γ tokens to follow `committed`."""
        return Proposal([], None, None, 0, "nothing to propose")

    def rollback(self, committed: list[int]) -> None:
        """Drop whatever state the target rejected."""

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

    def propose(self, committed: list[int], gamma: int, settings: SamplingSettings, generator: torch.Generator) -> Proposal:
        return self.inner.propose(committed, gamma, settings, generator)

    def rollback(self, committed: list[int]) -> None:
        self.inner.rollback(committed)

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
