"""How a drafter grows a token tree of a given shape (engine/tree_shape.py): `grow_tree`, and the budget's cut.

`branching[d]` is how many children each branching node of depth d gets (the root is depth 0), and `expanded` how many
nodes of a depth branch: those whose path the draft finds most probable (the product of q along it), as EAGLE-2 ranks
them; None lets every node branch. With a `budget` the shape is dynamic (EAGLE-2): the tree grows as above, then only
the `budget` nodes of highest path probability stay (a node's ancestors are always at least as probable, so they stay
with it).

Under greedy a node's children are the draft's top-k; under sampling they are drawn from q, independently or without
replacement (engine/acceptance.py), except in a dynamic shape, whose children are q's top-k under sampling too
(a child kept or dropped by how probable it is must not be a random draw: judged as a deterministic draft, q one-hot,
it stays exact). What is proposed depends on the draft alone, so the acceptance test stays exact.
The drafters that grow trees are in specviz/drafting/drafters.py.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from specviz.engine.acceptance import Siblings, draw_children
from specviz.engine.drafter import Proposal
from specviz.engine.sampling import display_probs, warp
from specviz.engine.settings import SamplingSettings
from specviz.engine.tree import ROOT, TokenTree
from specviz.engine.tree_shape import TreeShape


def grow_tree(
    root_logits: torch.Tensor,  # (1, vocab): the draft's logits after the last committed token
    shape: TreeShape,
    feed: Callable[[TokenTree, list[int]], torch.Tensor],  # (tree, nodes) → (len(nodes), vocab) logits after each
    settings: SamplingSettings,
    siblings: Siblings,
    generator: torch.Generator,
) -> tuple[Proposal, tuple[int, ...] | None]:
    """Depth by depth: rank the newest nodes by the draft's path probability, feed the best through `feed` in one
    forward, branch them all at once; with a budget, keep the most probable nodes of the whole tree. Returns the
    proposal, and each node's number while the tree grew where a budget dropped some (else None)."""
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
    shown = settings.greedy or not deterministic  # a deterministic draft under sampling: q one-hot, no logits shown
    draft_logits = _rows(logits_at, len(tree), root_logits) if shown else None
    draft_probs = _rows(q_at, len(tree), root_logits) if q_at else None
    return Proposal(tree, draft_probs, draft_logits, n_forwards), grown_ids


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
