"""Drafters that grow token trees, behind the interface of specviz/engine/tree_drafter.py (start, propose_tree,
rollback, update):
  - `ModelTreeDrafter`: an independent draft model; each depth's branching nodes go through its KV cache in one
    forward with the tree mask, and after acceptance its cache keeps the accepted path (`compact_to_path`);
  - `FeatureTreeDrafter`: the EAGLE-style head (specviz/models/feature_head.py), one head forward per depth over the
    branching nodes, each reading its parent's predicted feature.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from specviz.drafting.drafters import FeatureDrafter
from specviz.engine.kv_cache import CachedDecoder, compact_to_path, rollback_to_accepted
from specviz.engine.settings import SamplingSettings
from specviz.engine.tree import ROOT, TokenTree, feed_nodes, grown_visibility
from specviz.engine.tree_acceptance import Siblings
from specviz.engine.tree_drafter import TreeDrafter, TreeProposal, TreeShape, grow_tree


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
