"""`--gamma auto`: the chain or token tree the theory predicts fastest for this pair on this machine, measured first.

Three measurements, none of them inside a timed run:
  1. α by depth and rank: one calibration run of the pair's own drafter over the first prompts, drafting a tree that
     offers the target three first choices and a chain of three below the first (a drafter that drafts chains only
     drafts a chain of four: its acceptance by position);
  2. ν(k): a target pass over k rows, in target steps, for k = 1 … MAX_ROWS, on the engine the runs will use, after
     as many cached tokens as that run's verify passes followed on average (ν grows with the context on a small target);
  3. τ: the calibration run's draft time per draft forward, over the target step of 1.
The choice is analysis/tree_theory.choose_tree's: the shape that maximises E ÷ (ν(rows) + depth·τ). On 2 CPU cores ν
grows fast (1.17 at 2 rows, 2.79 at 5), so a default that drafts more than pays is a slowdown; when no shape is
predicted to beat the target alone, one sentence says so and why, in measured terms (the verify pass's cost and where
the target's weights sit against this CPU's cache, or the draft's α against its τ), and what was asked still runs.
deployment/machine_setting.py keeps the choice per machine and pair, so it is measured once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone

from specviz.analysis.cache_fit import last_level_cache_bytes, mib
from specviz.analysis.readings import speed_verdict, verify_costs_of
from specviz.analysis.timing import measure_pass_seconds
from specviz.analysis.tree_theory import RankAcceptance, TreeChoice, TreeOption, choose_tree, measured_rank_acceptance
from specviz.drafting.registry import strategy
from specviz.engine import Cycle, DecodeSettings, RunStarted, Tally
from specviz.engine.tree_shape import TreeShape
from specviz.models.loading import LoadedPair
from specviz.run.chosen_setting import ChosenSetting
from specviz.run.runner import run

MAX_ROWS = 8  # the largest verify pass priced: on a CPU, passes beyond a few rows cost several steps
CALIBRATION_TREE = TreeShape.parse("3x1x1x1:1")  # three first choices, then a chain below the first
CALIBRATION_CHAIN = 4
CALIBRATION_PROMPTS = 2
CALIBRATION_TOKENS = 48


@dataclass(frozen=True)
class AutoChoice:
    """What the measurements predict: the fastest shape (a chain or a tree), the fastest chain, and their inputs."""

    choice: TreeChoice
    verify_costs: dict[int, float]  # ν(k)
    target_weight_bytes: int | None = None  # for the sentence that says why nothing pays, where nothing does
    cache_bytes: int | None = None  # this CPU's last-level cache (None off a CPU, or where the OS does not say)

    @property
    def best(self) -> TreeOption:
        """The fastest shape, a chain or a tree (choose_tree's winner)."""
        return self.choice.tree

    @property
    def pays(self) -> bool:
        """Faster than the target alone by the one rule for every speedup (break-even within ±5 %)."""
        return speed_verdict(self.best.speedup) == "faster"

    @property
    def gamma(self) -> int:
        """The chain to draft: the best shape's when it is a chain, else the best chain's."""
        return self.choice.chain.depth

    @property
    def tree(self) -> TreeShape | None:
        """The tree to draft instead of a chain, where one is predicted fastest."""
        return None if self.best.is_chain else self.best.shape

    @property
    def label(self) -> str:
        """ "γ 2", or "tree 2x1:1"."""
        return f"tree {self.tree.text}" if self.tree else f"γ {self.gamma}"

    def sentence(self) -> str:
        """One line: "on this machine: γ 2, predicted 1.40× …", or that nothing pays and why, in measured terms."""
        best = self.best
        inputs = f"α {self.choice.acceptance.alpha:.2f}, τ {self.choice.tau:.2f}, ν({best.rows}) {best.verify_cost:.2f}"
        if not self.pays:
            return (
                f"on this machine nothing pays for this pair: {self.reason()} (best predicted {best.speedup:.2f}×, "
                f"{self.label}; {inputs})"
            )
        return f"on this machine: {self.label}, predicted {best.speedup:.2f}× the target alone ({inputs})"

    def reason(self) -> str:
        """Why no shape pays, from the numbers measured: the verify pass's cost where a free pass would pay (and where
        the target's weights sit against this CPU's cache), else the draft's acceptance against its cost."""
        best = self.best
        free_pass = best.tokens_per_pass / (1 + best.draft_cost)  # the same shape if its pass cost one target step
        if speed_verdict(free_pass) != "faster":
            alpha, tau = self.choice.acceptance.alpha, self.choice.tau
            return (
                f"the draft is accepted α {alpha:.2f} of the time and a draft step costs τ {tau:.2f} target steps, "
                f"so even a verify pass as cheap as one step would give {free_pass:.2f}×"
            )
        rows, nu = best.rows, best.verify_cost
        weights, cache = self.target_weight_bytes, self.cache_bytes
        if not weights or not cache:
            return f"a {rows}-row verify pass costs {nu:.2f} target steps here"
        if weights <= cache:
            return f"the target's {mib(weights)} sit in this CPU's {mib(cache)} cache, so a {rows}-row pass costs {nu:.2f} steps"
        return (
            f"the target's {mib(weights)} stream from memory (this CPU's cache is {mib(cache)}), yet a {rows}-row pass "
            f"costs {nu:.2f} steps: the kernels' arithmetic for each extra row decides"
        )

    def chosen(self, reused: bool = False) -> ChosenSetting:
        """As plain data: what the cache keeps and a trace carries."""
        return ChosenSetting(
            gamma=self.gamma,
            tree=self.tree.text if self.tree else "",
            predicted_speedup=self.best.speedup,
            chain_speedup=self.choice.chain.speedup,
            pays=self.pays,
            sentence=self.sentence(),
            alpha=self.choice.acceptance.alpha,
            tau=self.choice.tau,
            verify_costs=dict(self.verify_costs),
            measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            reused=reused,
        )

    def to_json(self) -> dict:
        return {
            "chosen": self.best.label,
            "gamma": self.gamma,
            "tree": self.tree.text if self.tree else None,
            "predicted_speedup": self.best.speedup,
            "predicted_tokens_per_pass": self.best.tokens_per_pass,
            "pays": self.pays,
            "sentence": self.sentence(),
            "alpha": self.choice.acceptance.alpha,
            "acceptance_by_rank": [list(rates) for rates in self.choice.acceptance.by_depth],
            "tau": self.choice.tau,
            "verify_curve": {str(rows): nu for rows, nu in self.verify_costs.items()},
        }


def choose_setting(pair: LoadedPair, prompts: list[str], settings: DecodeSettings, drafter: str) -> AutoChoice:
    """Measure α by depth and rank, ν(k) and τ for this pair here, then choose (module docstring). ν is timed after
    as many cached tokens as the calibration's verify passes saw on average: on a small target, whose attention is a
    large share of a pass, ν grows with the context (the bundled pair, AVX2 kernels, 2 threads:
    ν(8) 1.29 after 64 tokens, 2.49 after 256, timed by analysis/timing.measure_pass_seconds)."""
    acceptance, draft_s_per_forward, context = calibrate(pair, prompts[:CALIBRATION_PROMPTS], settings, drafter)
    seconds = measure_pass_seconds(pair.target.model, pair.shared_vocab_size, MAX_ROWS, context=context, repeats=5)
    verify_costs = verify_costs_of(seconds)
    tau = draft_s_per_forward / seconds[1]
    cache = last_level_cache_bytes() if pair.device.type == "cpu" else None
    return AutoChoice(choose_tree(acceptance, tau, verify_costs, MAX_ROWS), verify_costs, pair.target.weight_bytes, cache)


def calibrate(pair: LoadedPair, prompts: list[str], settings: DecodeSettings, drafter: str) -> tuple[RankAcceptance, float, int]:
    """One short run of the drafter over the prompts: (α by depth and rank, seconds per draft forward, the cached tokens
    its verify passes followed on average)."""
    drafts_trees = strategy(drafter).grows_trees
    calibration = replace(
        settings,
        max_new_tokens=min(settings.max_new_tokens, CALIBRATION_TOKENS),
        gamma=CALIBRATION_CHAIN,
        tree=CALIBRATION_TREE if drafts_trees else None,
        adaptive_gamma=False,
    )
    cycles: list[Cycle] = []
    contexts: list[int] = []  # each verify pass's cached tokens: the prompt's, then every token written before it
    for prompt in prompts:
        written = 0
        for event in run(pair, prompt, calibration, mode="speculative", drafter=drafter):
            if isinstance(event, RunStarted):
                prompt_tokens = len(event.prompt_token_ids)
            elif isinstance(event, Cycle):
                cycles.append(event)
                contexts.append(prompt_tokens + written)
                written += len(event.emitted_token_ids)
    forwards = sum(cycle.n_draft_forwards for cycle in cycles)
    draft_s = sum(cycle.draft_s for cycle in cycles)
    if drafts_trees:
        acceptance = measured_rank_acceptance((cycle.parents, cycle.accepted_nodes) for cycle in cycles if cycle.is_tree)
    else:
        acceptance = chain_acceptance(cycles)
    if acceptance is None or forwards == 0:
        raise ValueError("the calibration run drafted nothing to test: give a longer prompt or more new tokens")
    return acceptance, draft_s / forwards, max(1, round(sum(contexts) / len(contexts)))


def chain_acceptance(cycles: list[Cycle]) -> RankAcceptance | None:
    """A chain's acceptance at each position given the ones before it were accepted (the Tally's conditional rate),
    as rank-1 rates by depth."""
    rates = [rate for rate in Tally.of(cycles).acceptance_by_position if rate is not None]
    return RankAcceptance(tuple((rate,) for rate in rates)) if rates else None
