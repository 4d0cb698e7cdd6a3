"""The rows of a token tree's forward: where each row sits, and which cached keys it sees, in its path's order.

Row r sees the cache's slots 0 … prefix[r] − 1 (the committed context, shared by every node), then the slots in
`tail[r]` (its ancestors' and its own, from depth 1 down; −1 pads), and nothing else. That order is the one in which
its path decoded as a chain holds the same keys, which is what lets an attention kernel give the row the very sums a
one-token step computes (specviz/engine/static_cache.py's Rows take `prefix` and `tail` as they are). Everything here is tensor
operations on a few small integer tensors: nothing loops over nodes in Python once a tree's paths are known
(`paths`, cached per tree structure).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

ROOT = -1  # the parent of depth-1 nodes: the last committed token


@lru_cache(maxsize=512)  # static shapes repeat their structure every cycle; dynamic ones vary, so the cache is bounded
def paths(parents: tuple[int, ...]) -> torch.Tensor:
    """Each node's path from depth 1 down to itself, padded with −1: one row per node (cached per tree structure)."""  # (nodes, depth)
    node_paths: list[list[int]] = []
    for node, parent in enumerate(parents):
        node_paths.append([*(node_paths[parent] if parent != ROOT else []), node])
    depth = max((len(path) for path in node_paths), default=0)
    return torch.tensor([path + [-1] * (depth - len(path)) for path in node_paths], dtype=torch.long).view(len(parents), depth)


@dataclass(frozen=True)
class TreeRows:
    """A tree forward's rows: rotary positions, the shared context each sees, then its own path's slots."""

    positions: torch.Tensor  # (rows,) long
    prefix: torch.Tensor  # (rows,) long: row r sees slots 0 … prefix[r] − 1
    tail: torch.Tensor  # (rows, depth) long: then these slots in order, −1 pads (after them only)
    n_keys: int  # slots filled once this forward has written its rows

    def visible(self) -> torch.Tensor:
        """Row r may see key k: the whole mask, for attention that takes one."""  # (rows, n_keys) bool
        rows = len(self.prefix)
        keys = torch.arange(self.n_keys)
        seen = keys[None, :] < self.prefix[:, None]
        padded = torch.zeros(rows, self.n_keys + 1, dtype=torch.bool)  # the last column takes the −1 pads
        padded.scatter_(1, torch.where(self.tail >= 0, self.tail, self.n_keys), True)
        return seen | padded[:, : self.n_keys]


def verify_rows(parents: tuple[int, ...], depths: torch.Tensor, cached_length: int, n_pending: int) -> TreeRows:
    """The rows of a verify pass: the pending tokens as a chain after the cache, then each node at the root's position
    plus its depth, seeing the context, the pending tokens and its path (written in node order after them)."""
    node_paths = paths(parents)  # (nodes, depth)
    first_node = cached_length + n_pending
    pending = torch.arange(cached_length, first_node)
    root_position = first_node - 1
    no_tail = torch.full((n_pending, node_paths.shape[1]), -1, dtype=torch.long)
    node_tail = torch.where(node_paths >= 0, node_paths + first_node, -1)
    return TreeRows(
        positions=torch.cat([pending, root_position + depths]),
        prefix=torch.cat([pending + 1, torch.full((len(parents),), first_node, dtype=torch.long)]),
        tail=torch.cat([no_tail, node_tail]),
        n_keys=first_node + len(parents),
    )


def grown_rows(parents: tuple[int, ...], depths: torch.Tensor, tree_start: int, fed: list[int], new: list[int]) -> TreeRows:
    """Rows for the nodes `new` of a tree growing in a cache that holds `tree_start` positions, then the nodes `fed`
    in order: each new node is written after them and sees the context and its path."""
    slot_of = torch.full((len(parents),), -1, dtype=torch.long)
    in_cache = [*fed, *new]
    slot_of[torch.tensor(in_cache, dtype=torch.long)] = torch.arange(tree_start, tree_start + len(in_cache))
    new_index = torch.tensor(new, dtype=torch.long)
    node_paths = paths(parents)[new_index]  # (new, depth)
    tail = torch.where(node_paths >= 0, slot_of[node_paths.clamp(min=0)], -1)
    missing = (node_paths >= 0) & (tail < 0)
    if bool(missing.any()):
        row, column = (int(index) for index in missing.nonzero()[0])
        raise ValueError(f"node {new[row]}'s ancestor {int(node_paths[row, column])} is not in the cache: feed it first")
    return TreeRows(
        positions=tree_start - 1 + depths[new_index],
        prefix=torch.full((len(new),), tree_start, dtype=torch.long),
        tail=tail,
        n_keys=tree_start + len(in_cache),
    )
