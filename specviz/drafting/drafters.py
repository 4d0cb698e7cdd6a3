"""Drafters: strategies that propose the next tokens, as chains or token trees, and learn from what the target accepts.

Each is a specviz.engine.drafter.Drafter (the interface the engine calls); a draft model, dynamic
(confidence-stopped) drafting, an EAGLE-style feature head and n-gram prompt lookup live here, and
specviz/drafting/registry.py names them; docs/architecture.md, "Adding a drafter", walks through it.
A chain is the tree of width one: a drafter that can branch grows other shapes with `grow_tree`
(specviz/drafting/growth.py), one draft forward per depth over all the branching nodes; a chain it drafts one token
per forward, as the paper does. Every strategy is exact: what is proposed may depend on anything but the target's
coming decision, and the acceptance test is unchanged.
"""

from __future__ import annotations

import itertools
import math

import torch

from specviz.drafting.growth import grow_tree
from specviz.engine.drafter import WINDOW_FULL, Drafter, Feedback, Proposal
from specviz.engine.kv_cache import Decoder, compact_to_path, rollback_to_accepted
from specviz.engine.sampling import SamplingSettings, display_probs, draw
from specviz.engine.tree import ROOT, TokenTree, feed_nodes
from specviz.engine.tree_rows import grown_rows
from specviz.engine.tree_shape import TreeShape
from specviz.models.feature_head import FeatureCache
from specviz.models.head_fast_path import fast_head
from specviz.models.head_step import cached_step

Draw = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]  # one draft: its token (1,), q (1, vocab) or None, logits


class ModelDrafter(Drafter):
    """A small causal LM behind its own KV cache: a chain sampled one token per forward, or a tree grown one forward
    per depth with the tree's mask, whose accepted path its cache then keeps (`compact_to_path`).

    With a confidence threshold it drafts chains dynamically: it stops after a draft whose probability
    under q falls below the threshold (transformers' `assistant_confidence_threshold`).
    """

    name = "model"
    grows_trees = True

    def __init__(self, decoder: Decoder, confidence_threshold: float | None = None) -> None:
        self.decoder = decoder
        self.confidence_threshold = confidence_threshold
        self.tree_start = 0  # the cache's length before this cycle's drafts
        self.fed: list[int] = []  # the nodes in the cache this cycle (numbered as grown), in slot order
        self.grown_ids: tuple[int, ...] | None = None  # each proposed node's number while growing, if a budget cut some

    def start(self, prompt_ids: list[int], prompt_hidden_states: torch.Tensor | None = None) -> None:
        self.decoder.reset()
        if len(prompt_ids) > 1:
            self.decoder.feed(prompt_ids[:-1])
        self.tree_start, self.fed, self.grown_ids = self.decoder.cached_length, [], None

    def propose(self, committed, shape: TreeShape, settings: SamplingSettings, generator, siblings="without_replacement"):
        logits = self.decoder.feed(committed[self.decoder.cached_length :])  # (1, vocab): q after the last committed token
        self.tree_start, self.fed, self.grown_ids = self.decoder.cached_length, [], None
        if not shape.is_chain:

            def feed(tree: TokenTree, nodes: list[int]) -> torch.Tensor:
                logits = feed_nodes(self.decoder, tree, self.tree_start, self.fed, nodes)
                self.fed += nodes
                return logits

            proposal, self.grown_ids = grow_tree(logits, shape, feed, settings, siblings, generator)
            return proposal
        gamma = shape.n_nodes
        drawn: list[Draw] = []
        for step in range(gamma):
            if step > 0:
                logits = self.decoder.feed(drawn[-1][0])  # (1, vocab)
                self.fed.append(step - 1)
            token, probs = draw(logits, settings, generator)  # (1,), stays on the device: no sync per step
            drawn.append((token, probs, logits))
            if self.confidence_threshold is not None and step + 1 < gamma:
                confidence = display_probs(logits, settings)[0, token].item()  # q(x) as shown; syncs once per draft
                if confidence < self.confidence_threshold:
                    shown = math.floor(confidence * 100) / 100  # rounded down, so the line never reads "0.40 < 0.40"
                    return chain_of(drawn, f"confidence {shown:.2f} < {self.confidence_threshold:.2f}")
        return chain_of(drawn, WINDOW_FULL)

    def rollback(self, committed: list[int], accepted_nodes: list[int]) -> None:
        """Keep the accepted nodes the draft has fed (a prefix of the path: a node is fed only if it branched)."""
        grown = [self.grown_ids[node] if self.grown_ids else node for node in accepted_nodes]
        slot = {node: index for index, node in enumerate(self.fed)}
        kept = [slot[node] for node in itertools.takewhile(slot.__contains__, grown)]
        compact_to_path(self.decoder, self.tree_start, kept)
        rollback_to_accepted(self.decoder, committed)
        self.tree_start, self.fed, self.grown_ids = self.decoder.cached_length, [], None  # a cycle with no draft keeps all


class DynamicDrafter(ModelDrafter):
    """transformers' default assisted generation: up to 20 drafts, stopping after one with q(x) < 0.4 (chains only)."""

    name = "dynamic"
    grows_trees = False

    def __init__(self, decoder: Decoder, confidence_threshold: float = 0.4, max_window: int = 20) -> None:
        super().__init__(decoder, confidence_threshold)
        self.max_window = max_window

    def window(self, gamma: int) -> int:
        return self.max_window  # the confidence threshold, not γ, decides where a draft ends


class FeatureDrafter(Drafter):
    """An EAGLE-style head that drafts from the target's own features (specviz/models/feature_head.py); any head
    with FeatureHead's drafting interface (step, logits, fed_back, and for trees layer_input, queries_keys_values,
    finish) will do.

    Head position i reads (f_{i-1}, x_i). Every committed position whose previous feature the target has computed
    is fed with true inputs; the first draft of a cycle is the output at the last committed token, and each further
    draft feeds back the head's own predicted feature (in a tree, its parent's: one head forward per depth over all
    the branching nodes, EAGLE-2's way). Rollback keeps only the true-input positions; the verify pass's features
    along the accepted path (`Feedback.target_hidden_states`) extend what is known for the next cycle.
    A chain runs on the head's compiled draft step where it has one; a tree needs the eager head (`compiled=False`).
    """

    name = "feature"
    grows_trees = True
    wants_target_hidden_states = True

    def __init__(self, head, vocab_size: int, compiled: bool = True) -> None:
        self.head = head
        self.vocab_size = vocab_size
        self.fast = fast_head(head) if compiled else None  # the head's compiled draft step, where it has one
        self.target_hidden_layers = head.shape.feature_layers  # the last layer first, then any lower ones it fuses
        self.cache = None
        self.features: torch.Tensor | None = None  # (known, hidden): the target's feature after each committed token
        self.true_length = 0  # head positions fed with true features (the rest of the cache is this cycle's drafts)

    def start(self, prompt_ids: list[int], prompt_hidden_states: torch.Tensor | None = None) -> None:
        self.cache = self.fast.new_cache() if self.fast else FeatureCache()
        width = self.head.shape.feature_width
        device = self.head.kept_ids.device
        self.features = prompt_hidden_states if prompt_hidden_states is not None else torch.zeros(0, width, device=device)
        self.true_length = 0

    @torch.inference_mode()
    def propose(self, committed, shape: TreeShape, settings: SamplingSettings, generator, siblings="without_replacement"):
        if not shape.is_chain and self.fast is not None:
            raise ValueError("this feature drafter runs the head's compiled chain step: build it with compiled=False for trees")
        # 1. catch up: head positions true_length+1 … len(committed)−1, each from (f_{i-1}, x_i), all true
        first, last = self.true_length + 1, len(committed) - 1
        if last < first:  # a one-token prompt: no feature yet (the first verify pass makes one)
            return Proposal.chain([], stop_reason="no target feature yet")
        device = self.features.device
        token_ids = torch.tensor(committed[first : last + 1], dtype=torch.long, device=device)
        predicted, logits = self._step(token_ids, self.features[first - 1 : last])  # (1, hidden), (1, vocab)
        self.true_length = last
        if not shape.is_chain:
            return self._grow(predicted, logits[:, : self.vocab_size].float(), shape, settings, siblings, generator)
        # 2. draft: read out a token, feed back (f̂, x̂), γ times
        drawn: list[Draw] = []
        for step in range(shape.n_nodes):
            logits = logits[:, : self.vocab_size].float()
            token, probs = draw(logits, settings, generator)  # (1,)
            drawn.append((token, probs, logits))
            if step + 1 < shape.n_nodes:  # the prediction stands in for the last layer; lower layers are unknown (zeros)
                predicted, logits = self._step(token, self.head.fed_back(predicted))
        return chain_of(drawn, WINDOW_FULL)

    def _step(self, token_ids: torch.Tensor, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed positions after the head's cache: f̂ at the last one (1, hidden) and its full-width logits (1, vocab)."""
        if self.fast is not None:
            return self.fast.draft_step(token_ids, features, self.cache)  # one compiled call (models/head_fast_path.py)
        predicted = self.head.step(token_ids, features, self.cache)[-1:]
        return predicted, self.head.logits(predicted)

    def _grow(self, root_feature, root_logits, shape, settings, siblings, generator) -> Proposal:
        """A tree: per depth, one head forward over the branching nodes, each reading its parent's predicted feature
        and attending to the true positions and its own ancestors."""
        head, cache, device = self.head, self.cache, root_feature.device
        predicted = [root_feature]  # per forward: (n, hidden)
        row_of = {ROOT: 0}  # node → its predicted feature's row in torch.cat(predicted)
        tree_start, fed = cache.length, []

        def feed(tree: TokenTree, nodes: list[int]) -> torch.Tensor:
            parent_rows = torch.tensor([row_of[tree.parents[node]] for node in nodes], device=device)
            parent_features = head.fed_back(torch.cat(predicted).index_select(0, parent_rows))  # (n, width)
            tokens = torch.tensor([tree.token_ids[node] for node in nodes], dtype=torch.long, device=device)
            rows = grown_rows(tree.parents, tree.depth_tensor, tree_start, fed, nodes)
            out = cached_step(head, tokens, parent_features, cache, rows.positions.to(device), rows.visible().to(device))
            first_row = sum(len(block) for block in predicted)
            row_of.update((node, first_row + index) for index, node in enumerate(nodes))
            predicted.append(out)
            fed.extend(nodes)
            return head.logits(out)[:, : self.vocab_size].float()

        return grow_tree(root_logits, shape, feed, settings, siblings, generator)[0]

    def rollback(self, committed: list[int], accepted_nodes: list[int]) -> None:
        self.cache.truncate(self.true_length)  # the drafts' positions go; accepted tokens return with true features

    def update(self, feedback: Feedback) -> None:
        """The verify pass computed f at the pending token and at every node; those along the accepted path are true."""
        path_rows = [0] + [node + 1 for node in feedback.accepted_nodes]
        needed = len(feedback.committed) - 1 - len(self.features)  # every committed token's but the target's new one
        fresh = feedback.target_hidden_states[path_rows[:needed]]
        self.features = torch.cat([self.features, fresh.to(self.features.dtype)])


class PromptLookupDrafter(Drafter):
    """No model: what followed earlier occurrences of the recent n-gram. A chain follows the latest match; a tree
    merges the continuations of as many matches as depth 1 has children, most recent first (continuations that begin
    alike share their nodes), as deep as the shape, at most its number of nodes. q is one-hot."""

    name = "lookup"
    grows_trees = True

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def propose(self, committed, shape: TreeShape, settings: SamplingSettings, generator, siblings="without_replacement"):
        continuations = lookup_continuations(committed, shape.branching[0], shape.depth, self.max_ngram, self.min_ngram)
        tree = merged_tree(continuations, shape.n_nodes)
        stop_reason = WINDOW_FULL if tree.depth == shape.depth else ("no earlier match" if not tree else "match ran out")
        return Proposal(tree, None, None, 0, stop_reason)


def chain_of(drawn: list[Draw], stop_reason: str) -> Proposal:
    """A chain drafted one forward per token, from its draws: q_1..q_k as one (k, vocab) tensor, or None under greedy,
    where each q_i is one-hot on its draft."""
    tokens, probs_rows, logits_rows = zip(*drawn)
    draft_probs = None if probs_rows[0] is None else torch.cat(probs_rows)
    return Proposal.chain(torch.cat(tokens).tolist(), draft_probs, torch.cat(logits_rows), len(drawn), stop_reason)


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
