"""Token trees: a proposal whose drafts branch, verified by the target in one forward.

A tree lists its drafted nodes parents first: node i holds a token and its parent, ROOT (−1) for the nodes of depth 1,
whose parent is the last committed token. A chain is the tree with one child per node. In the verify pass every node
is one row; it attends to the committed context and to its own ancestors only (`tree_attention_mask`) and sits at the
position of its depth (`tree_positions`), so its logits are those of its path decoded as a chain
(tests/test_tree.py holds every attention path the target uses to that). Where the weight form keeps rows independent,
each row attends over its own keys only (specviz/engine/tree_attention.py), so that holds to the bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from specviz.engine.kv_cache import CachedDecoder
from specviz.engine.tree_attention import exact_tree_rows

ROOT = -1  # the parent of depth-1 nodes: the last committed token


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

    @property
    def is_chain(self) -> bool:
        return self.parents == tuple(range(-1, len(self) - 1))


def tree_positions(tree: TokenTree, first_position: int, n_pending: int) -> torch.Tensor:
    """Position ids of the pending tokens (a chain from `first_position`), then of each node: the root's plus its depth."""  # (n_pending + nodes,)
    root_position = first_position + n_pending - 1
    return torch.tensor(
        list(range(first_position, root_position + 1)) + [root_position + depth for depth in tree.depths], dtype=torch.long
    )


def tree_visibility(tree: TokenTree, cached_length: int, n_pending: int) -> torch.Tensor:
    """Which key each row may see: the cache, the pending tokens causally, and for a node its ancestors and itself."""  # (rows, keys) bool
    rows = n_pending + len(tree)
    visible = torch.zeros(rows, cached_length + rows, dtype=torch.bool)
    visible[:, :cached_length] = True
    visible[:, cached_length : cached_length + n_pending] = _pending_block(rows, n_pending)
    first_node = cached_length + n_pending
    for node in range(len(tree)):
        for ancestor in tree.path(node):
            visible[n_pending + node, first_node + ancestor] = True
    return visible


def _pending_block(rows: int, n_pending: int) -> torch.Tensor:
    """Pending row i sees pending tokens 0..i; every node row sees them all."""  # (rows, n_pending)
    block = torch.ones(rows, n_pending, dtype=torch.bool)
    block[:n_pending] = block[:n_pending].tril()
    return block


def tree_attention_mask(visible: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The additive 4D mask transformers' attention takes as given: 0 where a row may look, the dtype's minimum elsewhere."""  # (1, 1, rows, keys)
    blocked = torch.full(visible.shape, torch.finfo(dtype).min, dtype=dtype)
    return blocked.masked_fill(visible, 0.0)[None, None].to(device)


@torch.inference_mode()
def verify_tree(
    target: CachedDecoder, committed: list[int], tree: TokenTree, hidden_layers: tuple[int, ...] = ()
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One target forward over the pending tokens and every node: the logits at the root (row 0, p for depth 1) and
    after each node (row i + 1), and those rows' hidden states of `hidden_layers` if asked for.

    The cache then holds every node's entry after the context, in node order; `compact_to_path` keeps the accepted ones.
    """  # (nodes + 1, vocab), (nodes + 1, hidden · layers) | None
    cached_length = target.cached_length
    pending = committed[cached_length:]
    visible = tree_visibility(tree, cached_length, len(pending))
    positions = tree_positions(tree, cached_length, len(pending))
    return _forward(target, pending + list(tree.token_ids), visible, positions, len(tree) + 1, hidden_layers)


@torch.inference_mode()
def feed_nodes(decoder: CachedDecoder, tree: TokenTree, tree_start: int, fed: list[int], new: list[int]) -> torch.Tensor:
    """Feed the nodes `new` of a tree growing in the cache, whose nodes `fed` sit in order from slot `tree_start` (each
    new node's ancestors among them): the logits after each, as if its path were decoded as a chain. How a draft model
    grows a tree, feeding only the nodes that branch."""  # (len(new), vocab)
    if decoder.cached_length != tree_start + len(fed):
        raise ValueError(f"{len(fed)} fed nodes after {tree_start} positions, but the cache holds {decoder.cached_length}")
    visible = grown_visibility(tree, tree_start, fed, new)
    positions = torch.tensor([tree_start - 1 + tree.depths[node] for node in new], dtype=torch.long)
    return _forward(decoder, [tree.token_ids[node] for node in new], visible, positions, len(new))[0]


def grown_visibility(tree: TokenTree, tree_start: int, fed: list[int], new: list[int]) -> torch.Tensor:
    """Rows for the nodes `new`, keys for the cache before the tree, the `fed` nodes in order, then `new`: each row sees
    the cache and, among the nodes, its ancestors and itself."""  # (len(new), tree_start + len(fed) + len(new)) bool
    slots = {node: tree_start + k for k, node in enumerate([*fed, *new])}
    visible = torch.zeros(len(new), tree_start + len(slots), dtype=torch.bool)
    visible[:, :tree_start] = True
    for row, node in enumerate(new):
        for ancestor in tree.path(node):
            if ancestor not in slots:
                raise ValueError(f"node {node}'s ancestor {ancestor} is not in the cache: feed it first")
            visible[row, slots[ancestor]] = True
    return visible


def _forward(
    decoder: CachedDecoder,
    token_ids: list[int],
    visible: torch.Tensor,
    positions: torch.Tensor,
    n_rows: int,
    hidden_layers: tuple[int, ...] = (),
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Tokens after the cache, each row seeing the keys `visible` allows, at `positions`: the last `n_rows` rows' logits."""
    with exact_tree_rows(decoder.model):  # each row over its own keys only, where the form keeps rows independent
        return decoder._forward(
            token_ids,
            keep_last=n_rows,
            layers=hidden_layers,
            hidden_last=n_rows,
            attention_mask=tree_attention_mask(visible, decoder.model.dtype, decoder.device),
            position_ids=positions[None].to(decoder.device),
        )
