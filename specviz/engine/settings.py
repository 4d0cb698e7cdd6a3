"""Everything a run needs besides the models, validated in one place. Light: no torch, so the app's page can read it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from specviz.engine.tree_shape import TreeShape

MAX_GAMMA = 16  # the most drafts per cycle a user may ask for (the app's γ slider reads it)
StopCheck = Callable[[], bool]  # polled once per cycle or step: True ends the run with stop_reason "stopped"


def never_stop() -> bool:
    return False


MAX_SEED = 2**63 - 1  # torch's generators take a 64-bit seed; a larger one overflows inside torch
VERIFICATIONS = ("exact", "block", "match")  # engine/verifiers.py: token by token, block verification, sample-and-match


@dataclass(frozen=True)
class SamplingSettings:
    """temperature 0 means greedy; top_k 0 and top_p 1 mean no cut."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class SettingsError(ValueError):
    """A setting out of range; the message is one sentence for the user."""


@dataclass(frozen=True)
class DecodeSettings:
    max_new_tokens: int = 64
    gamma: int = 4
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    seed: int = 0
    lenience: float = 1.0  # 1 is exact; below 1 accepts more often and is lossy
    adaptive_gamma: bool = False  # +2 after a fully accepted window, −1 otherwise (floor 1)
    top_n: int = 5  # entries of p, q and the residual kept per position for display
    tree: TreeShape | None = None  # draft a token tree of this shape instead of a chain of γ (engine/speculative.py)
    verification: str = "exact"  # how a chain's drafts are judged: one of VERIFICATIONS (engine/verifiers.py)
    compare_verifiers: bool = False  # also judge each cycle's drafts with every verifier, after the clock (Cycle.verdicts)

    @property
    def lossy(self) -> bool:
        return self.lenience < 1.0

    @property
    def drafted_per_cycle(self) -> int:
        """The most drafted tokens one verify pass holds: γ, or a token tree's nodes (what the caches must make room for)."""
        return self.tree.n_nodes if self.tree else self.gamma

    def validate(self) -> DecodeSettings:
        temperature, top_p = self.sampling.temperature, self.sampling.top_p
        checks = [
            (self.max_new_tokens >= 1, f"max_new_tokens must be at least 1 (got {self.max_new_tokens})"),
            (1 <= self.gamma <= MAX_GAMMA, f"γ (gamma) must be between 1 and {MAX_GAMMA} (got {self.gamma})"),
            (math.isfinite(temperature) and temperature >= 0, f"temperature must be a finite number ≥ 0 (got {temperature})"),
            (math.isfinite(top_p) and 0 < top_p <= 1, f"top-p must be in (0, 1] (got {top_p})"),
            (self.sampling.top_k >= 0, f"top-k must be ≥ 0, 0 meaning off (got {self.sampling.top_k})"),
            (
                math.isfinite(self.lenience) and 0 < self.lenience <= 1,
                f"lenience must be in (0, 1], 1 being exact (got {self.lenience})",
            ),
            (0 <= self.seed <= MAX_SEED, f"seed must be a whole number from 0 to 2^63 − 1 (got {self.seed})"),
            (
                self.tree is None or not self.lossy,
                "token trees accept exactly: lenient acceptance (lenience < 1) is offered for chains only",
            ),
            (
                self.verification in VERIFICATIONS,
                f"verification must be one of {', '.join(VERIFICATIONS)} (got {self.verification!r})",
            ),
            (
                self.verification == "exact" or not self.lossy,
                "lenient acceptance (lenience < 1) loosens the token-by-token test: it takes verification exact",
            ),
            (
                self.tree is None or self.verification == "exact",
                "token trees are verified token by token: block and match verification are offered for chains only",
            ),
            (
                self.tree is None or not self.adaptive_gamma,
                "adaptive γ schedules a chain's length: a token tree has a fixed shape",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise SettingsError(message)
        return self
