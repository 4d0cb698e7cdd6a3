"""Drafters that grow token trees, behind the interface of specviz/engine/tree_drafter.py (start, propose_tree,
rollback, update); specviz/drafting/registry.py names them beside the chain drafters of the same strategy:
  - "model", `ModelTreeDrafter`: an independent draft model; each depth's branching nodes go through its KV cache in
    one forward with the tree mask, and after acceptance its cache keeps the accepted path (`compact_to_path`);
  - "feature", `FeatureTreeDrafter`: the EAGLE-style head (specviz/models/feature_head.py), one head forward per depth
    over all the branching nodes, each reading its parent's predicted feature (EAGLE-2's way);
  - "lookup", `LookupTreeDrafter`: no model; the continuations of several earlier matches of the recent n-gram, as
    branches of one tree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from specviz.drafting.drafters import FeatureDrafter
from specviz.engine.kv_cache import Decoder, compact_to_path, rollback_to_accepted
from specviz.engine.settings import SamplingSettings, SettingsError
from specviz.engine.tree import ROOT, TokenTree, feed_nodes
from specviz.engine.tree_acceptance import Siblings
from specviz.engine.tree_drafter import TreeDrafter, TreeProposal, TreeShape, grow_tree
from specviz.engine.tree_rows import grown_rows

if TYPE_CHECKING:
    from specviz.models.loading import LoadedPair


class ModelTreeDrafter(TreeDrafter):
    """An independent draft model: its top-k (or draws from q) at each branching node, one forward per depth."""

    name = "model tree"

    def __init__(self, decoder: Decoder) -> None:
        self.decoder = decoder
        self.tree_start = 0
        self.fed: list[int] = []  # the nodes in the draft's cache this cycle (numbered as grown), in slot order
        self.grown_ids: tuple[int, ...] | None = None  # each proposed node's number while growing, if a budget cut some

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

        proposal = grow_tree(root_logits, shape, feed, settings, siblings, generator)
        self.grown_ids = proposal.grown_ids
        return proposal

    def rollback(self, committed: list[int], accepted_nodes: list[int]) -> None:
        """Keep the accepted nodes the draft has fed (a prefix of the path: a node is fed only if it branched)."""
        grown = [self.grown_ids[node] if self.grown_ids else node for node in accepted_nodes]
        slot = {node: index for index, node in enumerate(self.fed)}
        kept = []
        for node in grown:
            if node not in slot:
                break
            kept.append(slot[node])
        compact_to_path(self.decoder, self.tree_start, kept)
        rollback_to_accepted(self.decoder, committed)


class FeatureTreeDrafter(TreeDrafter):
    """EAGLE-2's way with the feature head: per depth, one head forward over all the branching nodes, each reading its
    parent's predicted feature and attending to the true positions and its own ancestors."""

    name = "feature tree"

    def __init__(self, head, vocab_size: int) -> None:
        self.chain = FeatureDrafter(
            head, vocab_size, compiled=False
        )  # eager (head_step_in_tree appends to its cache); its state: the head's cache and the target's known features
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
        predicted = [head.step(token_ids, chain.features[first - 1 : last], chain.cache)[-1:]]  # per forward: (n, hidden)
        row_of = {ROOT: 0}  # node → its predicted feature's row in torch.cat(predicted)
        chain.true_length = last
        tree_start, fed = chain.cache.length, []

        def feed(tree: TokenTree, nodes: list[int]) -> torch.Tensor:
            parent_rows = torch.tensor([row_of[tree.parents[node]] for node in nodes], device=device)
            parent_features = head.fed_back(torch.cat(predicted).index_select(0, parent_rows))  # (n, width)
            tokens = torch.tensor([tree.token_ids[node] for node in nodes], dtype=torch.long, device=device)
            rows = grown_rows(tree.parents, tree.depth_tensor, tree_start, fed, nodes)
            out = head_step_in_tree(
                head, tokens, parent_features, chain.cache, rows.positions.to(device), rows.visible().to(device)
            )
            first_row = sum(len(block) for block in predicted)
            row_of.update((node, first_row + index) for index, node in enumerate(nodes))
            predicted.append(out)
            fed.extend(nodes)
            return head.logits(out)[:, : self.vocab_size].float()

        root_logits = head.logits(predicted[0])[:, : self.vocab_size].float()  # (1, vocab)
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
    x = head.layer_input(token_ids.view(1, -1), features.view(1, token_ids.numel(), -1).to(head.input_norm.weight.dtype))
    q, k, v = head.queries_keys_values(x, positions)
    k, v = cache.append(k, v)
    groups = head.shape.heads // head.shape.kv_heads
    attended = F.scaled_dot_product_attention(
        q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1), attn_mask=visible
    )
    return head.finish(x, attended)[0]


class LookupTreeDrafter(TreeDrafter):
    """Prompt lookup with branches: what followed each of several earlier matches of the recent n-gram, most recent
    first, merged into one tree (continuations that begin alike share their nodes). No model, so q is one-hot.

    The shape reads as: as many matches as depth 1 has children, as deep as the shape, at most its number of nodes."""

    name = "lookup tree"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def propose_tree(
        self, committed: list[int], shape: TreeShape, settings: SamplingSettings, siblings: Siblings, generator: torch.Generator
    ) -> TreeProposal:
        continuations = lookup_continuations(committed, shape.branching[0], shape.depth, self.max_ngram, self.min_ngram)
        return TreeProposal(merged_tree(continuations, shape.n_nodes), None, 0)


def lookup_continuations(tokens: list[int], n_matches: int, length: int, max_ngram: int, min_ngram: int) -> list[list[int]]:
    """Up to `n_matches` different continuations (each ≤ `length` tokens) of earlier matches of the last n-gram: the
    longest n first, the most recent match first within it."""
    found: list[list[int]] = []
    for n in range(min(max_ngram, len(tokens) - 1), min_ngram - 1, -1):
        suffix = tokens[-n:]
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start : start + n] == suffix:
                continuation = tokens[start + n : start + n + length]
                if continuation and continuation not in found:
                    found.append(continuation)
                    if len(found) == n_matches:
                        return found
    return found


def merged_tree(continuations: list[list[int]], max_nodes: int) -> TokenTree:
    """The continuations as one tree, depth by depth (siblings in the order their continuations came), ≤ max_nodes."""
    children: dict[tuple[int, ...], list[int]] = {(): []}
    for continuation in continuations:
        for depth in range(1, len(continuation) + 1):
            prefix, parent = tuple(continuation[:depth]), tuple(continuation[: depth - 1])
            if prefix not in children:
                children[prefix] = []
                children[parent].append(continuation[depth - 1])
    tokens: list[int] = []
    parents: list[int] = []
    level = [((), ROOT)]  # (prefix, its node) of the depth above
    while level and len(tokens) < max_nodes:
        below = []
        for prefix, node in level:
            for token in children[prefix]:
                if len(tokens) == max_nodes:
                    break
                tokens.append(token)
                parents.append(node)
                below.append(((*prefix, token), len(tokens) - 1))
        level = below
    return TokenTree(tuple(tokens), tuple(parents))


def feature_tree_drafter(pair: LoadedPair) -> TreeDrafter:
    if pair.feature_head is None:
        raise SettingsError(
            f"{pair.name} has no feature head: choose another tree drafter, or a pair with one (its models.yaml entry names a feature_head)"
        )
    return FeatureTreeDrafter(pair.feature_head.head, pair.shared_vocab_size)


def model_tree_drafter(pair: LoadedPair) -> TreeDrafter:
    from specviz.engine.compiled import decoder_for

    if pair.draft is None:
        raise SettingsError(f"{pair.name} has no draft model: choose the feature or lookup tree drafter")
    return ModelTreeDrafter(decoder_for(pair.draft.model, pair.shared_vocab_size))
