"""Drafters that grow token trees (engine/tree.py): per depth, the most probable nodes branch into the draft's choices.

A `TreeShape` gives `branching[d]`, how many children each branching node of depth d gets (the root is depth 0), and
`expanded`, how many nodes of a depth branch: those whose path the draft finds most probable (the product of q along
it), as EAGLE-2 ranks them; None lets every node branch. A chain is branching (1, …, 1). Under greedy a node's
children are the draft's top-k; under sampling they are drawn from q, independently or without replacement
(engine/tree_acceptance.py). What is proposed depends on the draft alone, so the acceptance test stays exact.

Two drafters, behind one interface (start, propose_tree, rollback, update):
  - `ModelTreeDrafter`: an independent draft model; each depth's branching nodes go through its KV cache in one
    forward with the tree mask, and after acceptance its cache keeps the accepted path (`compact_to_path`);
  - `FeatureTreeDrafter`: the EAGLE-style head (specviz/models/feature_head.py), one head forward per depth over the
    branching nodes, each reading its parent's predicted feature.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specviz.engine.kv_cache import CachedDecoder, compact_to_path, rollback_to_accepted
from specviz.engine.sampling import display_probs, warp
from specviz.engine.settings import SamplingSettings
from specviz.engine.tree import ROOT, TokenTree, feed_nodes, grown_visibility
from specviz.engine.tree_acceptance import Siblings, draw_children


@dataclass(frozen=True)
class TreeShape:
    """Children per branching node at each depth, and how many nodes of a depth branch (None: all)."""

    branching: tuple[int, ...]
    expanded: int | None = None

    def __post_init__(self) -> None:
        if not self.branching or any(width < 1 for width in self.branching):
            raise ValueError(f"a tree shape needs at least one depth and ≥ 1 child per branching node, not {self.branching}")
        if self.expanded is not None and self.expanded < 1:
            raise ValueError(f"at least one node per depth must branch, not {self.expanded}")

    @classmethod
    def chain(cls, gamma: int) -> TreeShape:
        return cls((1,) * gamma)

    def cut(self, depth: int) -> TreeShape:
        """The same shape, no deeper than `depth`."""
        return TreeShape(self.branching[:depth], self.expanded)

    @property
    def n_nodes(self) -> int:
        """The nodes a full tree of this shape holds (fewer if a draft runs out of tokens to offer)."""
        total, level = 0, 1
        for width in self.branching:
            level = level * width
            total += level
            level = min(level, self.expanded) if self.expanded is not None else level
        return total

    def __str__(self) -> str:
        widths = "×".join(str(width) for width in self.branching)
        return widths if self.expanded is None else f"{widths}, top {self.expanded} branch"


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


class ModelTreeDrafter(TreeDrafter):
    """An independent draft model: its top-k (or draws from q) at each branching node, one forward per depth."""

    name = "model tree"

    def __init__(self, decoder: CachedDecoder) -> None:
        self.decoder = decoder
        self.tree_start = 0
        self.fed: list[int] = []  # the nodes in the draft's cache this cycle, in slot order from tree_start

    def start(self, prompt_ids: list[int], prompt_hidden_states: torch.Tensor | None = None) -> None:
        self.decoder.reset()
        if len(prompt_ids) > 1:
            self.decoder.feed(prompt_ids[:-1])

    def propose_tree(
        self, committed: list[int], shape: TreeShape, settings: SamplingSettings, siblings: Siblings, generator: torch.Generator
    ) -> TreeProposal:
        root_logits = self.decoder.feed(committed[self.decoder.cached_length :])  # (1, vocab)
        self.tree_start, self.fed = self.decoder.cached_length, []

        def feed(tree: TokenTree, nodes: list[int]) -> torch.Tensor:
            logits = feed_nodes(self.decoder, tree, self.tree_start, self.fed, nodes)
            self.fed += nodes
            return logits

        return grow_tree(root_logits, shape, feed, settings, siblings, generator)

    def rollback(self, committed: list[int], accepted_nodes: list[int]) -> None:
        """Keep the accepted nodes the draft has fed (a prefix of the path: a node is fed only if it branched)."""
        slots = [self.fed.index(node) for node in accepted_nodes if node in self.fed]
        compact_to_path(self.decoder, self.tree_start, slots)
        rollback_to_accepted(self.decoder, committed)


class FeatureTreeDrafter(TreeDrafter):
    """EAGLE-2's way with the feature head: per depth, one head forward over the branching nodes, each reading its
    parent's predicted feature and attending to the true positions and its own ancestors."""

    name = "feature tree"

    def __init__(self, head, vocab_size: int) -> None:
        from specviz.drafting.drafters import FeatureDrafter

        self.chain = FeatureDrafter(head, vocab_size)  # its state: the head's cache and the target's known features
        self.head, self.vocab_size = head, vocab_size
        self.wanted_hidden_layers = head.shape.feature_layers

    def start(self, prompt_ids: list[int], prompt_hidden_states: torch.Tensor | None = None) -> None:
        self.chain.start(prompt_ids, prompt_hidden_states)

    @torch.inference_mode()
    def propose_tree(
        self, committed: list[int], shape: TreeShape, settings: SamplingSettings, siblings: Siblings, generator: torch.Generator
    ) -> TreeProposal:
        chain, head = self.chain, self.head
        first, last = chain.true_length + 1, len(committed) - 1  # catch up with true features, as the chain drafter does
        if last < first:
            raise ValueError("the feature head needs one target feature first: give the prompt at least two tokens")
        device = chain.features.device
        token_ids = torch.tensor(committed[first : last + 1], dtype=torch.long, device=device)
        predicted = {ROOT: head.step(token_ids, chain.features[first - 1 : last], chain.cache)[-1]}  # (hidden,)
        chain.true_length = last
        tree_start, fed = chain.cache.length, []

        def feed(tree: TokenTree, nodes: list[int]) -> torch.Tensor:
            parent_features = torch.stack([head.fed_back(predicted[tree.parents[node]]) for node in nodes])
            tokens = torch.tensor([tree.token_ids[node] for node in nodes], dtype=torch.long, device=device)
            positions = torch.tensor([tree_start - 1 + tree.depths[node] for node in nodes], device=device)
            visible = grown_visibility(tree, tree_start, fed, nodes).to(device)
            out = head_step_in_tree(head, tokens, parent_features, chain.cache, positions, visible)
            predicted.update(zip(nodes, out))
            fed.extend(nodes)
            return head.logits(out)[:, : self.vocab_size].float()

        root_logits = head.logits(predicted[ROOT][None])[:, : self.vocab_size].float()  # (1, vocab)
        return grow_tree(root_logits, shape, feed, settings, siblings, generator)

    def rollback(self, committed: list[int], accepted_nodes: list[int]) -> None:
        self.chain.cache.truncate(self.chain.true_length)  # drafted positions go; accepted tokens return with true features

    def update(self, committed: list[int], accepted_nodes: list[int], target_hidden_states: torch.Tensor | None) -> None:
        """The verify pass computed f at the root and every node; those along the accepted path are true."""
        chain = self.chain
        path_rows = [0] + [node + 1 for node in accepted_nodes]
        needed = len(committed) - 1 - len(chain.features)
        fresh = target_hidden_states[path_rows[:needed]]
        chain.features = torch.cat([chain.features, fresh.to(chain.features.dtype)])


def head_step_in_tree(head, token_ids, features, cache, positions, visible) -> torch.Tensor:
    """The head's drafting step for nodes of a tree: like FeatureHead.step, at the given positions and mask."""  # (n,), (n, width), …, (n, keys) → (n, hidden)
    x = head.layer_input(token_ids.view(1, -1), features.view(1, -1, head.shape.feature_width).to(head.input_norm.weight.dtype))
    q, k, v = head.queries_keys_values(x, positions)
    k, v = cache.append(k, v)
    groups = head.shape.heads // head.shape.kv_heads
    attended = F.scaled_dot_product_attention(
        q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1), attn_mask=visible
    )
    return head.finish(x, attended)[0]
