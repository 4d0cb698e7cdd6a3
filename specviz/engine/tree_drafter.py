"""The tree drafter's interface (engine/tree.py grows and verifies the trees): a shape, a proposal, and how a tree grows.

A `TreeShape` gives `branching[d]`, how many children each branching node of depth d gets (the root is depth 0), and
`expanded`, how many nodes of a depth branch: those whose path the draft finds most probable (the product of q along
it), as EAGLE-2 ranks them; None lets every node branch. A chain is branching (1, …, 1). Under greedy a node's
children are the draft's top-k; under sampling they are drawn from q, independently or without replacement
(engine/tree_acceptance.py). What is proposed depends on the draft alone, so the acceptance test stays exact.
The drafters that grow trees live in specviz/drafting/tree_drafters.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from specviz.engine.sampling import display_probs, warp
from specviz.engine.settings import SamplingSettings
from specviz.engine.tree import ROOT, TokenTree
from specviz.engine.tree_acceptance import Siblings, draw_children
from specviz.engine.tree_shape import TreeShape

__all__ = ["TreeDrafter", "TreeProposal", "TreeShape", "grow_tree", "choose_children"]


@dataclass
class TreeProposal:
    tree: TokenTree
    draft_probs: torch.Tensor | None  # (nodes + 1, vocab): q a node's children came from (root first); None under greedy
    draft_logits: torch.Tensor  # (nodes + 1, vocab): the draft's logits there, for display; zeros at nodes never fed
    n_forwards: int


def grow_tree(
    root_logits: torch.Tensor,  # (1, vocab): the draft's logits after the last committed token
    shape: TreeShape,
    feed: Callable[[TokenTree, list[int]], torch.Tensor],  # (tree, nodes) → (len(nodes), vocab) logits after each
    settings: SamplingSettings,
    siblings: Siblings,
    generator: torch.Generator,
) -> TreeProposal:
    """Depth by depth: rank the newest nodes by the draft's path probability, feed the best through `feed`, branch."""
    tokens: list[int] = []
    parents: list[int] = []
    log_path_q: list[float] = []  # log of q's product along each node's path, for ranking
    logits_at = {ROOT: root_logits[0]}
    q_at: dict[int, torch.Tensor] = {}
    branching, n_forwards = [ROOT], 1
    for depth, width in enumerate(shape.branching):
        if depth > 0:  # the previous depth's best nodes, through the draft in one forward
            newest = [node for node in range(len(tokens)) if parents[node] in branching]
            branching = sorted(newest, key=lambda node: -log_path_q[node])[: shape.expanded]
            logits = feed(TokenTree(tuple(tokens), tuple(parents)), branching)
            logits_at.update(zip(branching, logits))
            n_forwards += 1
        for parent in branching:
            children, q = choose_children(logits_at[parent], width, settings, siblings, generator)
            if q is not None:
                q_at[parent] = q
            shown = display_probs(logits_at[parent], settings)  # (vocab,)
            base = log_path_q[parent] if parent != ROOT else 0.0
            for token in children:
                tokens.append(token)
                parents.append(parent)
                log_path_q.append(base + math.log(max(float(shown[token]), 1e-30)))
    tree = TokenTree(tuple(tokens), tuple(parents))
    return TreeProposal(
        tree, _rows(q_at, len(tree), root_logits) if q_at else None, _rows(logits_at, len(tree), root_logits), n_forwards
    )


def choose_children(
    logits: torch.Tensor, width: int, settings: SamplingSettings, siblings: Siblings, generator: torch.Generator
) -> tuple[list[int], torch.Tensor | None]:
    """A node's children: the draft's top-`width` under greedy (q one-hot on each: None), else drawn from q."""  # (vocab,)
    if settings.greedy:
        return logits.topk(min(width, logits.shape[-1])).indices.tolist(), None
    q = warp(logits[None], settings)[0]  # (vocab,)
    return draw_children(q, width, siblings, generator).tolist(), q


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
