"""Speculative decoding with token trees (SpecInfer, EAGLE-2), one cycle at a time, as a generator of events.

One cycle (`tree_cycle`, numbered as below):
  1. draft a tree: per depth, the draft's most probable nodes branch into its top-k (or into draws from q);
  2. verify: one target forward over the pending token and every node, each node attending to its ancestors only;
  3. accept a path from the root (engine/tree_acceptance.py), then the target's own token;
  4. compact both KV caches to the accepted path, then roll back as after a chain;
  5. the drafter reads the target's features along the path (the feature head).
A chain is the tree of shape (1, …, 1): the same tokens as engine/speculative.py, through the tree's verify pass.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from specviz.engine.kv_cache import CachedDecoder, compact_to_path, rollback_to_accepted, synchronize
from specviz.engine.settings import DecodeSettings
from specviz.engine.start import prefill
from specviz.engine.tree import TokenTree, verify_tree
from specviz.engine.tree_acceptance import Siblings, explain_tree_verdict, judge_tree
from specviz.engine.tree_drafter import TreeDrafter, TreeShape
from specviz.engine.vocabulary import Vocabulary


@dataclass(frozen=True)
class TreeCycle:
    """One tree cycle in plain numbers: every node, what the test made of it, and what was emitted."""

    index: int
    token_ids: tuple[int, ...]  # per node
    parents: tuple[int, ...]  # per node; −1: the last committed token
    status: tuple[str, ...]  # per node: "accepted", "rejected" or "untested"
    p: tuple[float | None, ...]  # p(x) at the node's parent; None if untested
    q: tuple[float, ...]
    accept_probability: tuple[float | None, ...]
    u: tuple[float | None, ...]  # None under greedy, or if untested
    accepted_nodes: tuple[int, ...]
    emitted_token_ids: tuple[int, ...]  # the accepted path's tokens and the target's own
    n_rows: int  # rows of the verify pass: the pending token and every node
    n_draft_forwards: int
    draft_s: float
    verify_s: float
    overhead_s: float


@dataclass(frozen=True)
class TreeSummary:
    new_token_ids: tuple[int, ...]
    n_cycles: int  # target passes after the prefill
    n_rows: int  # rows verified over the run
    wall_s: float
    stop_reason: str

    @property
    def tokens_per_pass(self) -> float:
        return len(self.new_token_ids) / self.n_cycles if self.n_cycles else 0.0


def tree_speculative_decode(
    target: CachedDecoder,
    drafter: TreeDrafter,
    prompt_ids: list[int],
    settings: DecodeSettings,
    shape: TreeShape,
    vocabulary: Vocabulary,
    siblings: Siblings = "without_replacement",
) -> Iterator[TreeCycle | TreeSummary]:
    """Yield one TreeCycle per target forward, then a TreeSummary. Exact only: lenient acceptance is a chain's."""
    if settings.lossy:
        raise ValueError("token trees accept exactly; lenient acceptance (lenience < 1) is offered for chains only")
    generator = torch.Generator(device=target.device).manual_seed(settings.seed)
    prefill_s = prefill(
        target,
        prompt_ids,
        also=lambda hidden_states: drafter.start(prompt_ids, hidden_states),
        layers=drafter.wanted_hidden_layers,
    )
    committed, cycles, rows, engine_s, stop_reason = list(prompt_ids), 0, 0, prefill_s, "max_new_tokens"
    while len(committed) - len(prompt_ids) < settings.max_new_tokens:
        remaining = settings.max_new_tokens - (len(committed) - len(prompt_ids))
        cycle = tree_cycle(target, drafter, committed, remaining, settings, shape, siblings, vocabulary, generator, cycles)
        cycles, rows = cycles + 1, rows + cycle.n_rows
        engine_s += cycle.draft_s + cycle.verify_s + cycle.overhead_s
        yield cycle
        if vocabulary.ends_run(list(cycle.emitted_token_ids)) is not None:
            stop_reason = "eos"
            break
    yield TreeSummary(tuple(committed[len(prompt_ids) :]), cycles, rows, engine_s, stop_reason)


def tree_cycle(
    target: CachedDecoder,
    drafter: TreeDrafter,
    committed: list[int],
    remaining: int,
    settings: DecodeSettings,
    shape: TreeShape,
    siblings: Siblings,
    vocabulary: Vocabulary,
    generator: torch.Generator,
    index: int,
) -> TreeCycle:
    """Draft a tree, verify it, accept a path, compact, learn: one target forward. `committed` grows by the emitted tokens."""
    cycle_start = time.perf_counter()

    # 1. draft a tree, no deeper than the token limit allows (the target adds one token itself)
    depth = min(len(shape.branching), remaining - 1)
    proposal = drafter.propose_tree(committed, shape.cut(depth), settings.sampling, siblings, generator) if depth > 0 else None
    synchronize(target.device)
    draft_done = time.perf_counter()
    tree = proposal.tree if proposal else TokenTree((), ())

    # 2. one target forward over the pending token and every node, each node seeing its ancestors only
    target_logits, hidden_states = verify_tree(target, committed, tree, drafter.wanted_hidden_layers)
    synchronize(target.device)
    verify_done = time.perf_counter()

    # 3. accept a path from the root, then the target's own token
    draft_probs = proposal.draft_probs if proposal else None
    verdict = judge_tree(target_logits, tree, draft_probs, settings.sampling, siblings, generator)
    emitted = ([tree.token_ids[node] for node in verdict.accepted_nodes] + [verdict.new_token_id])[:remaining]
    end = vocabulary.ends_run(emitted)
    emitted = emitted if end is None else emitted[: end + 1]
    tree_start = len(committed)  # the target's cache: the committed tokens, then one entry per node
    committed += emitted

    # 4. keep the accepted path in both caches
    compact_to_path(target, tree_start, verdict.accepted_nodes)
    rollback_to_accepted(target, committed)
    if proposal:
        drafter.rollback(committed, verdict.accepted_nodes)

        # 5. the drafter learns the target's features along the path
        drafter.update(committed, verdict.accepted_nodes, hidden_states)
    synchronize(target.device)
    cycle_done = time.perf_counter()

    # the clock has stopped: the numbers a drawing of the tree shows
    draft_logits = proposal.draft_logits if proposal else None
    shown = explain_tree_verdict(verdict, target_logits, tree, draft_logits, settings.sampling)
    return TreeCycle(
        index=index,
        token_ids=tree.token_ids,
        parents=tree.parents,
        status=tuple(shown.status),
        p=tuple(shown.p_shown),
        q=tuple(shown.q_shown),
        accept_probability=tuple(shown.accept_probability),
        u=tuple(shown.uniforms),
        accepted_nodes=tuple(verdict.accepted_nodes),
        emitted_token_ids=tuple(emitted),
        n_rows=len(tree) + 1,
        n_draft_forwards=proposal.n_forwards if proposal else 0,
        draft_s=draft_done - cycle_start,
        verify_s=verify_done - draft_done,
        overhead_s=cycle_done - verify_done,
    )
