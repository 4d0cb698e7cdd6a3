"""Token trees: a proposal whose drafts branch, verified by the target in one forward.

A tree lists its drafted nodes parents first: node i holds a token and its parent, ROOT (−1) for the nodes of depth 1,
whose parent is the last committed token. A chain is the tree with one child per node. In the verify pass every node
is one row; it attends to the committed context and to its own ancestors only (`tree_visibility`) and sits at the
position of its depth (`tree_positions`), so its logits are those of its path decoded as a chain
(tests/test_tree.py holds every attention path the target uses to that). Each row attends over its own keys only,
in its path's order (specviz/engine/tree_rows.py) on the static-cache fast path (engine/static_cache.py, eager or
compiled, the same package as plain decoding), so where the weight form keeps rows independent that holds to the
bit; transformers' forward (models the fast path does not know) gets the tree's mask and holds it to rounding.
A chain is verified by a plain forward over its tokens (`verify_tree` checks `is_chain`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import torch

from specviz.engine.tree_rows import ROOT, TreeRows, grown_rows, verify_rows

if TYPE_CHECKING:  # light: the drafter interface holds trees without loading transformers
    from specviz.engine.kv_cache import Decoder


@dataclass(frozen=True)
class TokenTree:
    """Drafted tokens and their parents, parents first (parents[i] < i)."""

    token_ids: tuple[int, ...]
    parents: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.parents):
            raise ValueError(f"a tree needs one parent per token: {len(self.token_ids)} tokens, {len(self.parents)} parents")
        for node, parent in enumerate(self.parents):
            if not ROOT <= parent < node:
                raise ValueError(f"node {node}'s parent {parent} must come before it (or be the root, {ROOT})")

    @classmethod
    def chain(cls, token_ids: list[int] | tuple[int, ...]) -> TokenTree:
        return cls(tuple(token_ids), tuple(range(-1, len(token_ids) - 1)))

    def __len__(self) -> int:
        return len(self.token_ids)

    @cached_property
    def depths(self) -> tuple[int, ...]:
        """1 for the root's children, one more per generation."""
        depths: list[int] = []
        for parent in self.parents:
            depths.append(1 if parent == ROOT else depths[parent] + 1)
        return tuple(depths)

    @property
    def depth(self) -> int:
        return max(self.depths, default=0)

    def children(self, node: int) -> tuple[int, ...]:
        """The nodes whose parent is `node` (ROOT for depth 1), in drafting order: the order siblings are tested."""
        return tuple(child for child, parent in enumerate(self.parents) if parent == node)

    def path(self, node: int) -> list[int]:
        """The nodes from depth 1 down to `node`."""
        nodes = []
        while node != ROOT:
            nodes.append(node)
            node = self.parents[node]
        return nodes[::-1]

    @cached_property
    def depth_tensor(self) -> torch.Tensor:
        return torch.tensor(self.depths, dtype=torch.long)

    @property
    def is_chain(self) -> bool:
        return self.parents == tuple(range(-1, len(self) - 1))

    @cached_property
    def parent_rows(self) -> torch.Tensor:
        """Per node, the row of the verify pass (and of a proposal's q) at its parent: parent + 1."""  # (nodes,)
        return torch.tensor(self.parents, dtype=torch.long) + 1

    @property
    def leaves(self) -> list[int]:
        """The nodes without children."""
        branching = set(self.parents)
        return [node for node in range(len(self)) if node not in branching]


def tree_rows(tree: TokenTree, cached_length: int, n_pending: int) -> TreeRows:
    """The verify pass's rows: the pending tokens as a chain after the cache, then each node (tree_rows.verify_rows)."""
    return verify_rows(tree.parents, tree.depth_tensor, cached_length, n_pending)


def tree_positions(tree: TokenTree, first_position: int, n_pending: int) -> torch.Tensor:
    """Position ids of the pending tokens (a chain from `first_position`), then of each node: the root's plus its depth."""  # (n_pending + nodes,)
    return tree_rows(tree, first_position, n_pending).positions


def tree_visibility(tree: TokenTree, cached_length: int, n_pending: int) -> torch.Tensor:
    """Which key each row may see: the cache, the pending tokens causally, and for a node its ancestors and itself."""  # (rows, keys) bool
    return tree_rows(tree, cached_length, n_pending).visible()


@torch.inference_mode()
def verify_tree(
    target: Decoder, committed: list[int], tree: TokenTree, hidden_layers: tuple[int, ...] = ()
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One target forward over the pending tokens and every node: the logits at the root (row 0, p for depth 1) and
    after each node (row i + 1), and those rows' hidden states of `hidden_layers` if asked for.

    The cache then holds every node's entry after the context, in node order; `compact_to_path` keeps the accepted ones.
    """  # (nodes + 1, vocab), (nodes + 1, hidden · layers) | None
    cached_length = target.cached_length
    pending = committed[cached_length:]
    n_rows = len(tree) + 1
    if tree.is_chain:  # a chain's own verify pass: a chain costs what it costs in engine/speculative.py
        tokens = pending + list(tree.token_ids)
        if hidden_layers:
            return target.feed_with_hidden_states(tokens, n_rows, n_rows, hidden_layers)
        return target.feed(tokens, n_rows), None
    rows = tree_rows(tree, cached_length, len(pending))
    return target.forward_tree(pending + list(tree.token_ids), rows, n_rows, hidden_layers, n_rows)


@torch.inference_mode()
def feed_nodes(decoder: Decoder, tree: TokenTree, tree_start: int, fed: list[int], new: list[int]) -> torch.Tensor:
    """Feed the nodes `new` of a tree growing in the cache, whose nodes `fed` sit in order from slot `tree_start` (each
    new node's ancestors among them): the logits after each, as if its path were decoded as a chain. How a draft model
    grows a tree, feeding only the nodes that branch."""  # (len(new), vocab)
    if decoder.cached_length != tree_start + len(fed):
        raise ValueError(f"{len(fed)} fed nodes after {tree_start} positions, but the cache holds {decoder.cached_length}")
    token_ids = [tree.token_ids[node] for node in new]
    if fed == list(range(len(fed))) and new == [len(fed)] and tree.parents[len(fed)] == len(fed) - 1:
        return decoder.feed(token_ids)  # the next node of a chain: a plain step
    rows = grown_rows(tree.parents, tree.depth_tensor, tree_start, fed, new)
    return decoder.forward_tree(token_ids, rows, len(new))[0]
