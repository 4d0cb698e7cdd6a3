"""The setting a run drafted with and where it came from: `gamma: auto`'s measured choice for this machine (kept in
specviz's cache, deployment/gamma_auto.py), or a setting a lesson or the user fixed, as plain data.

It travels inside traces, so a replay shows what was chosen and on what ν(k) it was chosen, and the page can say when
a run's own ν moved away from the one the choice was made on. Light: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from specviz.engine.settings import DecodeSettings
from specviz.engine.tree_shape import TreeShape

NU_MOVED = 1.4  # a run's ν this many times above or below the ν the setting was chosen on: the machine's speed changed


@dataclass(frozen=True)
class ChosenSetting:
    """What `gamma: auto` measured and chose for a pair on this machine (the theory's fastest chain or tree)."""

    gamma: int  # the chain's γ (for a tree: the best chain's, drafted where a tree cannot be)
    tree: str = ""  # the tree's shape ("2x1:1") where one is predicted fastest; "" for a chain
    predicted_speedup: float | None = None  # the best shape's, over the target alone
    chain_speedup: float | None = None  # the best chain's (what runs where a tree cannot)
    pays: bool = True  # faster than the target alone by the one rule for every speedup (break-even within ±5 %)
    sentence: str = ""  # one line: what it predicts, or why nothing pays here, in measured terms
    alpha: float | None = None  # the drafter's acceptance at depth 1, as the calibration run found it
    tau: float | None = None  # a draft forward over a target step
    verify_costs: dict[int, float] = field(default_factory=dict)  # ν(k) when chosen, k = 1 … 8
    measured_at: str = ""  # when (ISO 8601, UTC)
    reused: bool = False  # read from specviz's cache, not measured by this process
    auto: bool = False  # in a trace: the run drafted this choice (γ auto); False: it drafted what was asked
    read_gb_s: float | None = None  # the machine's memory read rate around the measurement (its state: a prediction
    # holds in the state it was made in, docs/performance.md "The machine's two states")

    @property
    def label(self) -> str:
        """How the page and the commands name it: "γ 2", or "tree 2x1:1"."""
        return f"tree {self.tree}" if self.tree else f"γ {self.gamma}"

    def short(self) -> str:
        """ "on this machine: γ 2, predicted 1.40×" (or that nothing pays)."""
        predicted = f", predicted {self.predicted_speedup:.2f}×" if self.predicted_speedup is not None else ""
        if not self.pays:
            return f"on this machine nothing pays for this pair (best: {self.label}{predicted})"
        return f"on this machine: {self.label}{predicted}"

    @property
    def shape(self) -> TreeShape | None:
        """The tree to draft, or None for a chain."""
        return TreeShape.parse(self.tree) if self.tree else None

    def applied(self, settings: DecodeSettings) -> DecodeSettings:
        """The settings with this choice drafted: its tree where the settings can verify one (exact, not lenient, a
        fixed shape), else its best chain."""
        tree = self.shape if settings.verification == "exact" and not settings.lossy and not settings.adaptive_gamma else None
        compare = settings.compare_verifiers and tree is None  # the three verifiers judge a chain's drafts
        return replace(settings, gamma=self.gamma, tree=tree, compare_verifiers=compare).validate()

    def verify_cost_at(self, rows: int) -> float | None:
        """ν(rows) as it was when the setting was chosen; None where that pass was not priced."""
        return self.verify_costs.get(rows)

    def to_json(self) -> dict:
        return {
            "gamma": self.gamma,
            "tree": self.tree,
            "label": self.label,
            "predicted_speedup": self.predicted_speedup,
            "chain_speedup": self.chain_speedup,
            "pays": self.pays,
            "sentence": self.sentence,
            "alpha": self.alpha,
            "tau": self.tau,
            "verify_costs": {str(rows): nu for rows, nu in sorted(self.verify_costs.items())},
            "measured_at": self.measured_at,
            "reused": self.reused,
            "auto": self.auto,
            "read_gb_s": self.read_gb_s,
        }

    @classmethod
    def from_json(cls, data: dict) -> ChosenSetting:
        """From to_json's dict (checked first where it comes from outside: run/trace_schema.py); label is derived."""
        known = {key: data[key] for key in data if key in cls.__dataclass_fields__ and key != "verify_costs"}
        costs = {int(rows): float(nu) for rows, nu in (data.get("verify_costs") or {}).items()}
        return cls(**known, verify_costs=costs)


def verify_cost_moved(chosen_nu: float | None, run_nu: float | None) -> bool:
    """Whether a run's ν is NU_MOVED times away from the ν its setting was chosen on (either way)."""
    if not chosen_nu or not run_nu:
        return False
    return max(chosen_nu / run_nu, run_nu / chosen_nu) >= NU_MOVED
