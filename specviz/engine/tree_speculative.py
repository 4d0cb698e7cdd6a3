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
from dataclasses import replace

import torch

from specviz.engine.events import Cycle, DraftPosition, Event
from specviz.engine.kv_cache import CachedDecoder, compact_to_path, rollback_to_accepted, synchronize
from specviz.engine.sampling import display_probs
from specviz.engine.settings import DecodeSettings, StopCheck, never_stop
from specviz.engine.speculative import cycles_then_summary
from specviz.engine.start import prefill, run_started
from specviz.engine.tree import ROOT, TokenTree, verify_tree
from specviz.engine.tree_acceptance import Siblings, explain_tree_verdict, judge_tree
from specviz.engine.tree_drafter import TreeDrafter, TreeShape
from specviz.engine.vocabulary import Vocabulary


def tree_speculative_decode(
    target: CachedDecoder,
    drafter: TreeDrafter,
    prompt_ids: list[int],
    settings: DecodeSettings,
    vocabulary: Vocabulary,
    should_stop: StopCheck = never_stop,
    siblings: Siblings = "without_replacement",
) -> Iterator[Event]:
    """Yield RunStarted, then one Cycle per target forward (its positions the tree's nodes), then a Summary: the
    events of engine/speculative.py, so every view, the trace and `bench` read a tree as they read a chain."""
    shape = settings.tree
    if shape is None:
        raise ValueError("tree_speculative_decode needs settings.tree, the shape to draft")
    settings.validate()  # a tree accepts exactly: lenient and adaptive settings are refused here
    generator = torch.Generator(device=target.device).manual_seed(settings.seed)
    prefill_s = prefill(
        target,
        prompt_ids,
        also=lambda hidden_states: drafter.start(prompt_ids, hidden_states),
        layers=drafter.wanted_hidden_layers,
    )
    started = run_started("speculative", prompt_ids, settings, vocabulary, drafter.name, prefill_s, target.engine)
    yield replace(started, gamma=shape.depth, tree=shape.text)

    def next_cycle(committed: list[int], remaining: int, index: int, clock_s: float) -> Cycle:
        return tree_cycle(target, drafter, committed, remaining, settings, shape, siblings, vocabulary, generator, index, clock_s)

    yield from cycles_then_summary(next_cycle, prompt_ids, prefill_s, settings, vocabulary, should_stop)


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
    clock_s: float = 0.0,
) -> Cycle:
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
    released_after_s = time.perf_counter() - cycle_start  # the burst is known here, before the caches are compacted

    # 4. keep the accepted path in both caches
    compact_to_path(target, tree_start, verdict.accepted_nodes)
    rollback_to_accepted(target, committed)
    if proposal:
        drafter.rollback(committed, verdict.accepted_nodes)

        # 5. the drafter learns the target's features along the path
        drafter.update(committed, verdict.accepted_nodes, hidden_states)
    synchronize(target.device)
    cycle_done = time.perf_counter()

    # the clock has stopped: the numbers a drawing of the tree shows, and each node's text
    draft_logits = proposal.draft_logits if proposal else None
    shown = explain_tree_verdict(verdict, target_logits, tree, draft_logits, settings.sampling)
    context = committed[:tree_start]
    last = verdict.accepted_nodes[-1] if verdict.accepted_nodes else ROOT
    target_p = display_probs(target_logits[last + 1].float(), settings.sampling)  # (vocab,): where the target's token came from
    top = target_p.topk(min(settings.top_n, target_p.shape[-1]))
    is_bonus = last not in tree.parents  # a leaf (or no tree): every child was accepted, none left to test
    positions = tuple(
        DraftPosition(
            token_id=token,
            text=vocabulary.pieces(context + [tree.token_ids[a] for a in tree.path(node)[:-1]], [token])[0],
            status="unverified" if shown.status[node] == "untested" else shown.status[node],
            q=shown.q_shown[node],
            p=shown.p_shown[node],
            accept_probability=shown.accept_probability[node],
            u=shown.uniforms[node],
            overlap=None,
        )
        for node, token in enumerate(tree.token_ids)
    )
    return Cycle(
        index=index,
        gamma=len(shape.branching) if proposal else 0,
        positions=positions,
        n_accepted=len(verdict.accepted_nodes),
        resampled_token_id=None if is_bonus else verdict.new_token_id,
        bonus_token_id=verdict.new_token_id if is_bonus else None,
        new_token_text=vocabulary.pieces(context + emitted[:-1], [verdict.new_token_id])[0],
        bonus_top_p=tuple((int(t), vocabulary.token_text(int(t)), float(v)) for v, t in zip(top.values, top.indices)),
        emitted_token_ids=tuple(emitted),
        draft_s=draft_done - cycle_start,
        verify_s=verify_done - draft_done,
        overhead_s=cycle_done - verify_done,
        n_draft_forwards=proposal.n_forwards if proposal else 0,
        lossy=False,
        released_s=clock_s + released_after_s,
        parents=tree.parents,
        accepted_nodes=tuple(verdict.accepted_nodes),
    )
