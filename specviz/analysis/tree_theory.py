"""What a token tree should yield, and which tree pays on a given machine (after Sequoia, Chen et al. 2024).

A tree is its `parents` list, as engine/tree.py's TokenTree holds it: node i's parent comes before it, ROOT (−1) for
the nodes of depth 1. A node's acceptance is the chance that it is accepted given that its parent was (for depth 1:
given nothing); siblings exclude one another, since the target keeps at most one child of a node. The accepted
nodes form one path from the root, so by linearity of expectation

    E = 1 + Σ over nodes of the product of the acceptances along the node's path,

the 1 being the target's own token (resampled, or the bonus at a leaf). A chain whose nodes each have α gives
1 + α + … + α^γ = (1 − α^(γ+1)) / (1 − α): Leviathan's Eq. 1.

For a shape (engine/tree_shape.py's TreeShape: children per branching node at each depth, and how many nodes of a
depth branch) the acceptances come from per-rank rates: a_r is the chance that the target's token is the draft's
r-th choice at a node whose parent was accepted (under greedy, the top-r coverage minus the top-(r − 1)). That is
Sequoia's positional model: a rate depends on the rank (and, if given, the depth), not on the context.

Cost, in target steps: a pass over k verified rows costs ν(k) (ν(1) = 1: one step); a tree of depth D costs D draft
forwards, each τ (for an independent draft model, one forward over the nodes of that depth; for the feature head,
one head forward over them), so a cycle costs ν(nodes + 1) + D·τ and the speedup over the target alone is
E / (ν(nodes + 1) + D·τ), as Leviathan's E / (γτ + ν) for a chain. It assumes a draft forward over several nodes
costs what one over a single node does: small drafts are dominated by per-forward cost.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from specviz.engine.tree_shape import TreeShape

ROOT = -1  # the parent of depth-1 nodes, as in engine/tree.py
MAX_ROWS = 64  # the largest verify pass the choice considers: nodes + the pending token (the engine allows 64 nodes)
SUM_SLACK = 1e-9  # rounding allowed when siblings' acceptances add up to 1


def path_acceptance(parents: Sequence[int], acceptance: Sequence[float]) -> list[float]:
    """Per node, the chance it is on the accepted path: the product of the acceptances from depth 1 down to it."""
    if len(parents) != len(acceptance):
        raise ValueError(f"one acceptance per node: {len(parents)} parents, {len(acceptance)} acceptances")
    reached: list[float] = []
    siblings_total: dict[int, float] = {}
    for node, (parent, rate) in enumerate(zip(parents, acceptance)):
        if not ROOT <= parent < node:
            raise ValueError(f"node {node}'s parent {parent} must come before it (or be the root, {ROOT})")
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"node {node}'s acceptance must be in [0, 1], not {rate}")
        siblings_total[parent] = siblings_total.get(parent, 0.0) + rate
        if siblings_total[parent] > 1.0 + SUM_SLACK:
            raise ValueError(
                f"the children of {'the root' if parent == ROOT else f'node {parent}'} add up to "
                f"{siblings_total[parent]:.3f} > 1: at most one of them can be accepted"
            )
        reached.append(rate * (reached[parent] if parent != ROOT else 1.0))
    return reached


def expected_tokens_per_pass(parents: Sequence[int], acceptance: Sequence[float]) -> float:
    """E = 1 + Σ over nodes of the product of acceptance along the node's path (module docstring)."""
    return 1.0 + sum(path_acceptance(parents, acceptance))


@dataclass(frozen=True)
class RankAcceptance:
    """a_r per depth: row d − 1 holds depth d's rates by rank (1st choice first); deeper depths reuse the last row."""

    by_depth: tuple[tuple[float, ...], ...]

    def __post_init__(self) -> None:
        if not self.by_depth or not all(self.by_depth):
            raise ValueError("give at least one acceptance rate per depth")
        for depth, rates in enumerate(self.by_depth, start=1):
            if any(not 0.0 <= rate <= 1.0 for rate in rates):
                raise ValueError(f"acceptance rates must be in [0, 1], not {list(rates)} (depth {depth})")
            if sum(rates) > 1.0 + SUM_SLACK:
                raise ValueError(
                    f"depth {depth}'s rates add up to {sum(rates):.3f} > 1: a_r is the chance the target's token is the "
                    "draft's r-th choice, and it is at most one of them (for top-k coverage, give the differences)"
                )

    @classmethod
    def of(cls, rates: Sequence[float]) -> RankAcceptance:
        """The same rates at every depth."""
        return cls((tuple(rates),))

    @classmethod
    def from_coverage(cls, coverage: Sequence[float]) -> RankAcceptance:
        """From top-k coverage (the target's token among the draft's top 1, top 2, …): a_r = coverage_r − coverage_(r−1)."""
        if any(later < earlier for earlier, later in zip(coverage, coverage[1:])):
            raise ValueError(f"top-k coverage cannot fall as k grows: {list(coverage)}")
        return cls.of([round(later - earlier, 12) for earlier, later in zip([0.0, *coverage], coverage)])

    def rate(self, depth: int, rank: int) -> float:
        """a_rank at `depth` (both from 1); 0 beyond the ranks given."""
        rates = self.by_depth[min(depth, len(self.by_depth)) - 1]
        return rates[rank - 1] if rank <= len(rates) else 0.0

    def ranks(self, depth: int) -> int:
        """How many ranks have a rate at `depth`: wider branching there adds rows that are never accepted."""
        return len(self.by_depth[min(depth, len(self.by_depth)) - 1])

    @property
    def alpha(self) -> float:
        """The chain's α: the first choice's rate at depth 1."""
        return self.rate(1, 1)


def measured_rank_acceptance(outcomes: Iterable[tuple[Sequence[int], Sequence[int]]]) -> RankAcceptance | None:
    """a_r per depth as a run measured them, from each tree cycle's (parents, accepted path): of the cycles whose path
    reached a node with children at depth d − 1, the share that accepted its r-th child (the draft's r-th choice).
    None where no tree cycle tested anything."""
    tested: dict[int, int] = {}
    accepted: dict[tuple[int, int], int] = {}
    for parents, path in outcomes:
        parent, depth = ROOT, 1
        while children := [node for node, above in enumerate(parents) if above == parent]:
            tested[depth] = tested.get(depth, 0) + 1
            if depth > len(path):
                break
            rank = children.index(path[depth - 1]) + 1
            accepted[depth, rank] = accepted.get((depth, rank), 0) + 1
            parent, depth = path[depth - 1], depth + 1
    if not tested:
        return None
    ranks = max((rank for _, rank in accepted), default=1)
    return RankAcceptance(
        tuple(
            tuple(accepted.get((depth, rank), 0) / tested[depth] for rank in range(1, ranks + 1))
            for depth in range(1, max(tested) + 1)
        )
    )


def shape_tree(branching: Sequence[int], expanded: int | None, acceptance: RankAcceptance) -> tuple[list[int], list[float]]:
    """The tree a shape grows when the draft ranks paths as the target accepts them: (parents, per-node acceptance).

    As drafting/growth.py:grow_tree, depth by depth: the `expanded` newest nodes most likely to be on the accepted
    path (all if None) each get `branching[d]` children, of ranks 1, 2, …; ties keep drafting order.
    """
    parents: list[int] = []
    rates: list[float] = []
    reached: list[float] = []
    newest = [ROOT]
    for depth, width in enumerate(branching, start=1):
        chosen = newest if depth == 1 else sorted(newest, key=lambda node: -reached[node])[:expanded]
        newest = []
        for parent in chosen:
            for rank in range(1, width + 1):
                rate = acceptance.rate(depth, rank)
                newest.append(len(parents))
                parents.append(parent)
                rates.append(rate)
                reached.append(rate * (reached[parent] if parent != ROOT else 1.0))
    return parents, rates


def expected_tokens_of_shape(branching: Sequence[int], expanded: int | None, acceptance: RankAcceptance) -> float:
    """E of a shape. When every node branches, E = 1 + Σ_D Π_{d ≤ D} s_d with s_d = a_1 + … + a_(w_d) at depth d."""
    if expanded is not None:
        return expected_tokens_per_pass(*shape_tree(branching, expanded, acceptance))
    total, reached = 1.0, 1.0
    for depth, width in enumerate(branching, start=1):
        reached *= sum(acceptance.rate(depth, rank) for rank in range(1, width + 1))
        total += reached
    return total


def rows_of(branching: Sequence[int], expanded: int | None) -> int:
    """Rows a verify pass over the shape's full tree holds: every node and the pending token (TreeShape.n_nodes + 1)."""
    rows, level = 1, 1
    for width in branching:
        level *= width
        rows += level
        level = min(level, expanded) if expanded is not None else level
    return rows


@dataclass(frozen=True)
class TreeOption:
    """One shape, priced: what it yields per target pass, what a cycle costs in target steps, and their ratio."""

    branching: tuple[int, ...]
    expanded: int | None
    rows: int  # verified in one pass: nodes + the pending token
    tokens_per_pass: float  # E
    verify_cost: float  # ν(rows), target steps
    draft_cost: float  # depth · τ, target steps
    cost: float  # ν(rows) + depth · τ
    speedup: float  # E / cost: over the target alone, one step per token

    @property
    def depth(self) -> int:
        return self.shape.depth

    @property
    def is_chain(self) -> bool:
        return self.shape.is_chain

    @property
    def text(self) -> str:
        """As a shape is typed (TreeShape.parse): "4x2x1x1:1", "1x1x1" for a chain."""
        return self.shape.text

    @property
    def shape(self) -> TreeShape:
        return TreeShape(tuple(self.branching), self.expanded)

    @property
    def label(self) -> str:
        """As TreeShape prints itself: "4×2×1×1, top 1 branch"; a chain is "chain, γ = n"."""
        return f"chain, γ = {self.depth}" if self.is_chain else str(self.shape)

    def to_json(self) -> dict:
        return {
            "shape": self.label,
            "shape_text": self.text,
            "branching": list(self.branching),
            "expanded": self.expanded,
            "rows": self.rows,
            "depth": self.depth,
            "tokens_per_pass": self.tokens_per_pass,
            "verify_cost": self.verify_cost,
            "draft_cost": self.draft_cost,
            "cost": self.cost,
            "speedup": self.speedup,
        }


def price(
    branching: Sequence[int], expanded: int | None, acceptance: RankAcceptance, tau: float, verify_cost: Mapping[int, float]
) -> TreeOption:
    """A shape's E, its cost ν(rows) + depth·τ in target steps, and E ÷ cost."""
    rows = rows_of(branching, expanded)
    if rows not in verify_cost:
        raise ValueError(f"no ν for a pass over {rows} rows (ν is known for {min(verify_cost)}–{max(verify_cost)})")
    return _priced(branching, expanded, rows, expected_tokens_of_shape(branching, expanded, acceptance), tau, verify_cost)


def _priced(
    branching: Sequence[int], expanded: int | None, rows: int, tokens: float, tau: float, verify_cost: Mapping[int, float]
) -> TreeOption:
    nu, draft = verify_cost[rows], len(branching) * tau
    return TreeOption(tuple(branching), expanded, rows, tokens, nu, draft, nu + draft, tokens / (nu + draft))


EXPANDED = (None, 1, 2, 3, 4, 6, 8)  # how many nodes of a depth branch: all, or EAGLE-2's top n
MAX_DEPTH = 16  # the deepest shape searched: the engine's limit for a tree, and its longest chain (MAX_GAMMA)


@dataclass(frozen=True)
class _Grown:
    """A shape of the family, grown depth by depth: its widths, rows so far, E so far, and its newest nodes' reach."""

    branching: tuple[int, ...]
    rows: int
    tokens: float
    newest: tuple[float, ...]  # the chance each node of the last depth is on the accepted path, best first


def family(acceptance: RankAcceptance, max_rows: int = MAX_ROWS) -> Iterator[tuple[tuple[int, ...], int | None, int, float]]:
    """The shapes searched, each with its rows and E: (children per depth, top n branch, rows, E).

    Every shape at most MAX_DEPTH deep whose pass fits `max_rows`, each tree once. Widths never grow with depth (wide near the root, where a
    node is most likely reached: EAGLE's and Sequoia's trees narrow as they deepen) and stop at the ranks that have a
    rate (a wider node only adds rows never accepted); a top n that every depth's nodes fit under is the same tree
    as "all branch", so it is left out. E is summed as the tree grows; `expected_tokens_of_shape` is its reference.
    """

    def grow(shape: _Grown, expanded: int | None, pruned: bool) -> Iterator[tuple[tuple[int, ...], int | None, int, float]]:
        depth = len(shape.branching) + 1
        if depth > MAX_DEPTH:
            return
        chosen = shape.newest if expanded is None else shape.newest[:expanded]
        widest = min(acceptance.ranks(depth), shape.branching[-1] if shape.branching else acceptance.ranks(depth))
        for width in range(1, widest + 1):
            rows = shape.rows + len(chosen) * width
            if rows > max_rows:
                break
            rates = [acceptance.rate(depth, rank) for rank in range(1, width + 1)]
            newest = tuple(sorted((reach * rate for reach in chosen for rate in rates), reverse=True))
            longer = _Grown((*shape.branching, width), rows, shape.tokens + sum(newest), newest)
            if expanded is None or pruned:
                yield longer.branching, expanded, rows, longer.tokens
            yield from grow(longer, expanded, pruned or (expanded is not None and len(newest) > expanded))

    for expanded in EXPANDED:
        yield from grow(_Grown((), 1, 1.0, (1.0,)), expanded, False)


@dataclass(frozen=True)
class TreeChoice:
    """The hardware-aware choice: the best shape of the family and the best chain, under one ν(k) and a τ for chains
    (a draft forward of one row) and one for trees (a forward of a depth's nodes, which may cost more)."""

    tree: TreeOption  # the best of every shape (a chain, if no tree beats it)
    chain: TreeOption  # the best chain
    acceptance: RankAcceptance
    tau: float  # a chain's draft forward, in target steps
    max_rows: int
    tree_tau: float | None = None  # a tree's draft forward, where measured apart (else `tau`)

    @property
    def best_tau(self) -> float:
        """τ of the best shape's own kind: what its draft cost was priced at."""
        return self.tau if self.tree.is_chain or self.tree_tau is None else self.tree_tau

    def to_json(self) -> dict:
        return {
            "best": self.tree.to_json(),
            "best_chain": self.chain.to_json(),
            "tree_over_chain": self.tree.speedup / self.chain.speedup,
            "acceptance_by_rank": [list(rates) for rates in self.acceptance.by_depth],
            "tau": self.tau,
            "tree_tau": self.tau if self.tree_tau is None else self.tree_tau,
            "max_rows": self.max_rows,
        }


def choose_tree(
    acceptance: RankAcceptance,
    tau: float,
    verify_cost: Mapping[int, float],
    max_rows: int = MAX_ROWS,
    tree_tau: float | None = None,
) -> TreeChoice:
    """The shape with rows ≤ max_rows (and ν known) that maximises E ÷ (ν(rows) + depth·τ), and the best chain; a
    tree's depths priced at `tree_tau` where given (a drafter's tree forwards, timed apart from its chain's)."""
    if tau < 0 or (tree_tau is not None and tree_tau < 0):
        raise ValueError(f"τ must be ≥ 0, not {tau if tau < 0 else tree_tau}")
    taus = {"chain": tau, "tree": tau if tree_tau is None else tree_tau}
    if verify_cost.get(1) is None:
        raise ValueError("ν(1) must be known: a pass over one row is the step the costs are counted in")
    limit = 1  # the largest pass priced: ν known for every k up to it
    while limit < max_rows and limit + 1 in verify_cost:
        limit += 1
    leaders: dict[str, tuple] = {}  # "chain" / "tree" → (rank, shape) of the best so far
    for shape in family(acceptance, limit):
        branching, _, rows, tokens = shape
        kind = "chain" if branching[0] == 1 else "tree"  # widths never grow with depth: one that starts at 1 is a chain
        rank = (round(tokens / (verify_cost[rows] + len(branching) * taus[kind]), 12), -rows)  # by speedup; tie: fewer rows
        if kind not in leaders or rank > leaders[kind][0]:
            leaders[kind] = (rank, shape)
    if "chain" not in leaders:
        raise ValueError(f"no shape fits {limit} rows: ν must be known for at least 2 rows")
    winner_kind = max(leaders, key=lambda kind: leaders[kind][0])
    return TreeChoice(
        _priced(*leaders[winner_kind][1], taus[winner_kind], verify_cost),
        _priced(*leaders["chain"][1], tau, verify_cost),
        acceptance,
        tau,
        limit,
        tree_tau,
    )


def flat_verify_costs(max_rows: int = MAX_ROWS) -> dict[int, float]:
    """ν(k) = 1 to `max_rows`: a pass over k rows costs one step, as on a GPU whose step is bound by reading the weights."""
    return dict.fromkeys(range(1, max_rows + 1), 1.0)


def why_trees_pay_sentence(here: TreeChoice, flat: TreeChoice, verify_cost: Mapping[int, float]) -> str:
    """Why a tree pays more where ν is flat (a GPU) than under `verify_cost`, from the two choices: one sentence."""
    wide = flat.tree
    cost_there = (
        f"a pass over {wide.rows} rows costs {verify_cost[wide.rows]:.2f} steps"
        if wide.rows in verify_cost
        else f"ν is known only to {here.max_rows} rows, where it reaches {verify_cost[here.max_rows]:.2f} steps"
    )
    return (
        f"With ν flat (a GPU's pass, bound by reading the weights), rows cost nothing, so the best tree verifies "
        f"{wide.rows} rows for {wide.tokens_per_pass:.2f} tokens per pass, {flat.tree.speedup / flat.chain.speedup:.2f}× "
        f"the best chain's speedup; here {cost_there}, so the best tree stops at {here.tree.rows} rows and gains "
        f"{here.tree.speedup / here.chain.speedup:.2f}×."
    )
