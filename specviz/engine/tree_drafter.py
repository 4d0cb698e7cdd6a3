"""The tree drafter's interface (engine/tree.py grows and verifies the trees): a shape, a proposal, and how a tree grows.

A `TreeShape` gives `branching[d]`, how many children each branching node of depth d gets (the root is depth 0), and
`expanded`, how many nodes of a depth branch: those whose path the draft finds most probable (the product of q along
it), as EAGLE-2 ranks them; None lets every node branch. A chain is branching (1, …, 1). With a `budget` the shape is
dynamic (EAGLE-2): the tree grows as above, then only the `budget` nodes of highest path probability stay (a node's
ancestors are always at least as probable, so they stay with it). `TreeShape.parse` reads the text users type.

Under greedy a node's children are the draft's top-k; under sampling they are drawn from q, independently or without
replacement (engine/tree_acceptance.py), except in a dynamic shape, whose children are q's top-k under sampling too
(a child kept or dropped by how probable it is must not be a random draw: judged as a deterministic draft, q one-hot,
it stays exact). What is proposed depends on the draft alone, so the acceptance test stays exact.
The drafters that grow trees live in specviz/drafting/tree_drafters.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from specviz.engine.sampling import display_probs, warp
from specviz.engine.settings import SamplingSettings
from specviz.engine.tree import ROOT, TokenTree
from specviz.engine.tree_acceptance import Siblings, draw_children

DYNAMIC_WIDTH = 4  # a dynamic shape's children per branching node and branching nodes per depth, unless given
SHAPE_FORMS = (
    "widths per depth like 4x2x1, 4x2x1:2 (only the 2 most probable nodes of a depth branch), or nodes=16,depth=5[,width=4]"
)


@dataclass(frozen=True)
class TreeShape:
    """Children per branching node at each depth, how many nodes of a depth branch (None: all), and how many nodes
    of the grown tree to keep, the most probable (None: all)."""

    branching: tuple[int, ...]
    expanded: int | None = None
    budget: int | None = None

    def __post_init__(self) -> None:
        if not self.branching or any(width < 1 for width in self.branching):
            raise ValueError(f"a tree shape needs at least one depth and ≥ 1 child per branching node, not {self.branching}")
        if self.expanded is not None and self.expanded < 1:
            raise ValueError(f"at least one node per depth must branch, not {self.expanded}")
        if self.budget is not None and self.budget < 1:
            raise ValueError(f"a tree's node budget must be at least 1, not {self.budget}")

    @classmethod
    def chain(cls, gamma: int) -> TreeShape:
        return cls((1,) * gamma)

    @classmethod
    def dynamic(cls, nodes: int, depth: int, width: int = DYNAMIC_WIDTH) -> TreeShape:
        """EAGLE-2's shape: per depth the `width` most probable nodes branch into their top `width`, then the `nodes`
        most probable nodes of the whole tree stay."""
        if depth < 1 or width < 1:
            raise ValueError(f"a dynamic tree needs depth ≥ 1 and width ≥ 1, not depth {depth}, width {width}")
        return cls((width,) * depth, expanded=width, budget=nodes)

    @classmethod
    def parse(cls, text: str) -> TreeShape:
        """The shape a user typed: "4x2x1" (children per depth), "4x2x1:2" (only the 2 most probable nodes of a depth
        branch), "nodes=16,depth=5" or "nodes=16,depth=5,width=3" (dynamic, EAGLE-2). Errors are one sentence."""
        compact = re.sub(r"\s+", "", str(text)).lower().replace("×", "x")
        if "=" in compact:
            return cls._parse_dynamic(text, compact)
        match = re.fullmatch(r"(\d+(?:x\d+)*)(?::(\d+))?", compact)
        if not match:
            raise ValueError(f"cannot read the tree shape {text!r}: write {SHAPE_FORMS}")
        widths = tuple(int(width) for width in match.group(1).split("x"))
        if 0 in widths:
            raise ValueError(f"the tree shape {text!r} has a depth with no children: every width must be at least 1")
        if match.group(2) is not None and int(match.group(2)) < 1:
            raise ValueError(f"the tree shape {text!r} lets no node branch: the number after ':' must be at least 1")
        return cls(widths, int(match.group(2)) if match.group(2) else None)

    @classmethod
    def _parse_dynamic(cls, text: str, compact: str) -> TreeShape:
        values: dict[str, int] = {}
        for part in compact.split(","):
            key, _, value = part.partition("=")
            if key not in ("nodes", "depth", "width"):
                raise ValueError(f"unknown key {key!r} in the tree shape {text!r}: write nodes=16,depth=5[,width=4]")
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"{key} in the tree shape {text!r} must be a whole number of at least 1, not {value!r}")
            values[key] = int(value)
        if "nodes" not in values or "depth" not in values:
            raise ValueError(f"the dynamic tree shape {text!r} needs both nodes= and depth=, like nodes=16,depth=5")
        return cls.dynamic(values["nodes"], values["depth"], values.get("width", DYNAMIC_WIDTH))

    @property
    def text(self) -> str:
        """The shape as `parse` reads it."""
        if self.is_dynamic:
            width = self.branching[0]
            return f"nodes={self.budget},depth={len(self.branching)}" + (f",width={width}" if width != DYNAMIC_WIDTH else "")
        widths = "x".join(str(width) for width in self.branching)
        return widths if self.expanded is None else f"{widths}:{self.expanded}"

    @property
    def is_dynamic(self) -> bool:
        """EAGLE-2's shape (what `dynamic` builds): uniform widths, as many branch as each gets children, a budget."""
        widths = set(self.branching)
        return self.budget is not None and len(widths) == 1 and self.expanded == self.branching[0]

    def cut(self, depth: int) -> TreeShape:
        """The same shape, no deeper than `depth`."""
        return TreeShape(self.branching[:depth], self.expanded, self.budget)

    @property
    def n_nodes(self) -> int:
        """The nodes a full tree of this shape holds (fewer if a draft runs out of tokens to offer)."""
        total, level = 0, 1
        for width in self.branching:
            level = level * width
            total += level
            level = min(level, self.expanded) if self.expanded is not None else level
        return total if self.budget is None else min(total, self.budget)

    @property
    def depth(self) -> int:
        return len(self.branching)

    def __str__(self) -> str:
        if self.is_dynamic:
            width = self.branching[0]
            return f"{self.budget} nodes, depth {self.depth} (per depth the {width} best branch {width} ways)"
        widths = "×".join(str(width) for width in self.branching)
        shown = widths if self.expanded is None else f"{widths}, top {self.expanded} branch"
        return shown if self.budget is None else f"{shown}, best {self.budget} kept"


@dataclass
class TreeProposal:
    tree: TokenTree
    draft_probs: torch.Tensor | None  # (nodes + 1, vocab): q a node's children came from (root first); None: deterministic
    n_forwards: int
    logits_at: dict[int, torch.Tensor] = field(default_factory=dict)  # node (ROOT first) → the draft's logits after it
    grown_ids: tuple[int, ...] | None = None  # each node's number while the tree grew, where a budget dropped some

    @property
    def draft_logits(self) -> torch.Tensor | None:
        """(nodes + 1, vocab): the draft's logits at the root and after each node, for display (built when asked, after
        the clock has stopped); zeros at nodes never fed; None for a draft without logits (q is then one-hot)."""
        if not self.logits_at:
            return None
        return _rows(self.logits_at, len(self.tree), self.logits_at[ROOT][None])


def grow_tree(
    root_logits: torch.Tensor,  # (1, vocab): the draft's logits after the last committed token
    shape: TreeShape,
    feed: Callable[[TokenTree, list[int]], torch.Tensor],  # (tree, nodes) → (len(nodes), vocab) logits after each
    settings: SamplingSettings,
    siblings: Siblings,
    generator: torch.Generator,
) -> TreeProposal:
    """Depth by depth: rank the newest nodes by the draft's path probability, feed the best through `feed` in one
    forward, branch them all at once; with a budget, keep the most probable nodes of the whole tree."""
    deterministic = settings.greedy or shape.budget is not None  # children: q's top-k (module docstring)
    tokens: list[int] = []
    parents: list[int] = []
    log_path_q = torch.zeros(0, dtype=torch.float64)  # (nodes,): log of q's product along each node's path
    logits_at = {ROOT: root_logits[0]}
    q_at: dict[int, torch.Tensor] = {}
    branching, logits, n_forwards, depth_start = [ROOT], root_logits, 1, 0
    for depth, width in enumerate(shape.branching):
        if depth > 0:  # the previous depth's most probable nodes, through the draft in one forward
            newest = torch.arange(depth_start, len(tokens))
            order = torch.sort(-log_path_q[depth_start:], stable=True).indices[: shape.expanded]
            branching = newest[order].tolist()
            depth_start = len(tokens)
            logits = feed(TokenTree(tuple(tokens), tuple(parents)), branching)  # (branching, vocab)
            logits_at.update(zip(branching, logits))
            n_forwards += 1
        base = log_path_q[torch.tensor(branching)] if depth > 0 else torch.zeros(1, dtype=torch.float64)
        if settings.greedy:  # the top-k, ranked by log q = logit − logsumexp (no softmax over the vocabulary)
            top = logits.float().topk(min(width, logits.shape[-1]), dim=-1)  # (branching, k)
            children = top.indices
            child_log_q = (top.values - logits.float().logsumexp(dim=-1, keepdim=True)).double()
        elif deterministic:  # a dynamic shape under sampling: q's top-k among the tokens q can draw
            q = warp(logits, settings)  # (branching, vocab)
            count = min(width, int((q > 0).sum(dim=-1).min()))
            top = q.topk(count, dim=-1)
            children, child_log_q = top.indices, top.values.double().clamp_min(1e-30).log()
        else:
            drawn = []
            for row, parent in enumerate(branching):
                q = warp(logits[row][None], settings)[0]  # (vocab,)
                q_at[parent] = q
                drawn.append(draw_children(q, width, siblings, generator))
            count = min(len(children) for children in drawn)
            children = torch.stack([children[:count] for children in drawn])  # (branching, count)
            child_log_q = display_probs(logits, settings).gather(1, children).double().clamp_min(1e-30).log()
        tokens += children.flatten().tolist()
        parents += [parent for parent in branching for _ in range(children.shape[1])]
        log_path_q = torch.cat([log_path_q, (base[:, None] + child_log_q).flatten()])
    tree, grown_ids = TokenTree(tuple(tokens), tuple(parents)), None
    if shape.budget is not None and len(tree) > shape.budget:
        tree, grown_ids = keep_most_probable(tree, log_path_q, shape.budget)
        renumbered = {old: new for new, old in enumerate(grown_ids)} | {ROOT: ROOT}
        logits_at = {renumbered[node]: row for node, row in logits_at.items() if node in renumbered}
    shown_logits = logits_at if settings.greedy or not deterministic else {}  # a deterministic draft under sampling: q one-hot
    draft_probs = _rows(q_at, len(tree), root_logits) if q_at else None
    return TreeProposal(tree, draft_probs, n_forwards, shown_logits, grown_ids)


def keep_most_probable(tree: TokenTree, log_path_q: torch.Tensor, budget: int) -> tuple[TokenTree, tuple[int, ...]]:
    """The `budget` nodes of highest path probability, renumbered in their old order (ties: the earlier node first, so
    a parent, never less probable than its child, always stays with it); and the old number of each kept node."""
    scores = log_path_q.tolist()
    order = sorted(range(len(tree)), key=lambda node: (-scores[node], node))
    kept = tuple(sorted(order[:budget]))
    renumbered = {old: new for new, old in enumerate(kept)} | {ROOT: ROOT}
    tokens = tuple(tree.token_ids[node] for node in kept)
    return TokenTree(tokens, tuple(renumbered[tree.parents[node]] for node in kept)), kept


def _rows(by_node: dict[int, torch.Tensor], n_nodes: int, like: torch.Tensor) -> torch.Tensor:
    """Per-node rows as one tensor: row 0 the root's, row i + 1 node i's, zeros where a node has none."""  # (n_nodes + 1, vocab)
    rows = like.new_zeros(n_nodes + 1, like.shape[-1], dtype=torch.float32)
    for node, row in by_node.items():
        rows[node + 1] = row.float()
    return rows


class TreeDrafter:
    """The interface: read the prompt, grow a tree after `committed`, keep the accepted path, learn from the pass."""

    name = "tree"
    wanted_hidden_layers: tuple[int, ...] = ()  # the target's hidden states the loop hands `update` (none unless asked)

    def start(self, prompt_ids: list[int], prompt_hidden_states: torch.Tensor | None = None) -> None: ...

    def propose_tree(
        self, committed: list[int], shape: TreeShape, settings: SamplingSettings, siblings: Siblings, generator: torch.Generator
    ) -> TreeProposal:
        raise NotImplementedError

    def rollback(self, committed: list[int], accepted_nodes: list[int]) -> None: ...

    def update(self, committed: list[int], accepted_nodes: list[int], target_hidden_states: torch.Tensor | None) -> None: ...
