"""Speculative decoding (Leviathan et al. 2023), chains and token trees (SpecInfer, EAGLE-2), one cycle at a time, as
a generator of events.

Notation (docs/algorithm.md): p is the target's next-token distribution and q the draft's, both after the
same temperature / top-k / top-p warping; γ drafts are proposed per cycle; α is the probability
that one draft is accepted; τ is the time of a draft forward over the time of a target forward.
A chain is the tree with one child per depth: a cycle drafts a tree (`TreeShape.chain(γ)`, or the shape
`settings.tree` names) and verifies it in one target forward, each node attending to its ancestors only.

One cycle (`speculative_cycle`, numbered as below):
  1. draft: x_1..x_γ from q, one step at a time, keeping each q_i (a tree: per depth, the draft's most probable
     nodes branch into its top-k, or into draws from q);
  2. verify: one target forward over the last token and every drafted node gives p at the root and after each node;
  3. accept a path from the root (engine/acceptance.py): x_i while u_i ≤ min(1, p_i(x_i) / q_i(x_i)), siblings one
     after another; after the last rejection sample from the residual norm(max(0, p − q)); at a leaf, a bonus token
     from p (a chain may instead be judged as a block, or by matching the target's own samples: engine/verifiers.py);
  4. roll both KV caches back to the accepted path (the draft catches up next cycle);
  5. the drafter's strategy learns from what was accepted (adaptive γ, dynamic drafting, a feature head's features).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import torch

from specviz.engine.acceptance import Shown, Siblings, compare_verdicts, explain, judge
from specviz.engine.drafter import AdaptiveGamma, Drafter, Feedback, Proposal, with_schedule
from specviz.engine.events import Cycle, DraftPosition, Event, Summary
from specviz.engine.kv_cache import CachedDecoder, compact_to_path, rollback_to_accepted, synchronize
from specviz.engine.settings import MAX_SEED, DecodeSettings, SettingsError, StopCheck, never_stop
from specviz.engine.start import prefill, run_started
from specviz.engine.tally import Tally
from specviz.engine.tree import TokenTree, verify_tree
from specviz.engine.tree_shape import TreeShape
from specviz.engine.verifiers import Verdict
from specviz.engine.vocabulary import Vocabulary


def speculative_decode(
    target: CachedDecoder,
    drafter: Drafter,
    prompt_ids: list[int],
    settings: DecodeSettings,
    vocabulary: Vocabulary,
    should_stop: StopCheck = never_stop,
    siblings: Siblings = "without_replacement",
) -> Iterator[Event]:
    """Yield RunStarted, then one Cycle per target forward, then a Summary. With `settings.tree` the drafter grows
    trees of that shape, and each Cycle's positions are the tree's nodes (with `parents`): every view, the trace and
    `bench` read a tree as they read a chain."""
    drafter = with_schedule(drafter, settings.adaptive_gamma)  # the user's switch picks the strategy; the loop knows no flags
    shape = settings.tree
    if shape is not None:
        settings.validate()  # a tree accepts exactly: lenient, adaptive, block and match settings are refused here
        if not drafter.grows_trees:
            raise SettingsError(f"the {drafter.name} drafter drafts chains only: it cannot grow the tree {shape.text}")
    generator = torch.Generator(device=target.device).manual_seed(settings.seed)
    prefill_s = prefill(
        target,
        prompt_ids,
        also=lambda hidden_states: drafter.start(prompt_ids, hidden_states),
        layers=drafter.wanted_hidden_layers,
    )
    started = run_started(
        "speculative", prompt_ids, settings, vocabulary, drafter.name, prefill_s, target.engine, target.rows_exact
    )
    tree_fields = {"gamma": shape.depth, "tree": shape.text} if shape else {}
    yield replace(started, adaptive_gamma=isinstance(drafter, AdaptiveGamma), **tree_fields)

    committed, tally, stop_reason = list(prompt_ids), Tally(), "max_new_tokens"
    while tally.emitted < settings.max_new_tokens:
        if should_stop():
            stop_reason = "stopped"
            break
        remaining = settings.max_new_tokens - tally.emitted
        clock_s = prefill_s + tally.draft_s + tally.verify_s + tally.overhead_s  # the request's engine time so far
        cycle = speculative_cycle(
            target, drafter, committed, remaining, settings, vocabulary, generator, tally.cycles, clock_s, siblings
        )
        tally = tally.add(cycle)
        yield cycle
        if vocabulary.ends_run(cycle.emitted_token_ids) is not None:
            stop_reason = "eos"
            break

    new_ids = committed[len(prompt_ids) :]
    yield Summary(
        mode="speculative",
        new_token_ids=tuple(new_ids),
        text=vocabulary.text(new_ids),
        wall_s=prefill_s + tally.draft_s + tally.verify_s + tally.overhead_s,
        prefill_s=prefill_s,
        stop_reason=stop_reason,
        tally=tally,
        lossy=settings.lossy,
    )


def speculative_cycle(
    target: CachedDecoder,
    drafter: Drafter,
    committed: list[int],
    remaining: int,
    settings: DecodeSettings,
    vocabulary: Vocabulary,
    generator: torch.Generator,
    index: int,
    clock_s: float = 0.0,
    siblings: Siblings = "without_replacement",
) -> Cycle:
    """Draft, verify, accept, roll back, learn: one target forward. `committed` grows by the emitted tokens.

    `clock_s` is the request's engine time before this cycle; the event's `released_s` adds the time into the cycle
    at which its tokens were fixed.
    """
    cycle_start = time.perf_counter()
    scheduled = drafter.window(settings.tree.depth if settings.tree else settings.gamma)
    depth = min(scheduled, remaining - 1)  # never draft past the token limit (the target adds one token itself)

    # 1. draft model inference, sequentially (a tree: one draft forward per depth)
    proposal = Proposal.chain([])
    if depth > 0:
        shape = settings.tree.cut(depth) if settings.tree else TreeShape.chain(depth)
        proposal = drafter.propose(committed, shape, settings.sampling, generator, siblings)
    tree = proposal.tree
    synchronize(target.device)
    draft_done = time.perf_counter()

    # 2. parallel inference on the target: the pending token and every node, each seeing its ancestors only
    target_logits, hidden_states = verify_tree(target, committed, tree, drafter.wanted_hidden_layers)
    synchronize(target.device)
    verify_done = time.perf_counter()

    # 3. accept a path from the root, then the target's own token
    verdict = judge(
        target_logits,
        tree,
        proposal.draft_probs,
        settings.sampling,
        generator,
        siblings,
        settings.verification,
        settings.lenience,
    )
    accepted_ids = [tree.token_ids[node] for node in verdict.accepted_nodes]
    emitted = (accepted_ids + [verdict.new_token_id])[:remaining]
    end = vocabulary.ends_run(emitted)
    emitted = emitted if end is None else emitted[: end + 1]  # cut at the token limit and after an end-of-turn token
    tree_start = len(committed)  # the target's cache: the committed tokens, then one entry per node
    committed += emitted
    released_s = clock_s + time.perf_counter() - cycle_start  # the burst is known here, before the rollback

    # 4. roll both KV caches back to the accepted path
    compact_to_path(target, tree_start, verdict.accepted_nodes)
    rollback_to_accepted(target, committed)
    drafter.rollback(committed, verdict.accepted_nodes)

    # 5. the drafting strategy learns from what was accepted
    drafter.update(Feedback(depth, len(tree), tuple(verdict.accepted_nodes), tuple(committed), hidden_states))
    synchronize(target.device)
    cycle_done = time.perf_counter()

    # the clock has stopped: the numbers the UI shows, and each token's text (the baseline's are untimed too)
    shown = explain(verdict, target_logits, tree, proposal.draft_probs, proposal.draft_logits, settings.sampling, settings.top_n)
    draft_stop = "token limit" if tree.depth == depth < scheduled else proposal.stop_reason
    timings = {"draft_s": draft_done - cycle_start, "verify_s": verify_done - draft_done, "released_s": released_s}
    context = committed[:tree_start]
    cycle = cycle_event(index, depth, proposal, verdict, shown, emitted, vocabulary, settings, draft_stop, timings, context)
    if settings.compare_verifiers and tree.is_chain:  # the same drafts judged by every verifier, with their own generators
        seed = (settings.seed + index) % MAX_SEED
        cycle = replace(cycle, verdicts=compare_verdicts(verdict, proposal.token_ids, proposal.draft_probs, seed))
    # overhead: the acceptance test, the rollback and the strategy's update
    return replace(cycle, overhead_s=cycle_done - verify_done)


def cycle_event(
    index: int,
    depth: int,
    proposal: Proposal,
    verdict: Verdict,
    shown: Shown,
    emitted: list[int],
    vocabulary: Vocabulary,
    settings: DecodeSettings,
    draft_stop: str | None,
    timings: dict[str, float],
    context: list[int],
) -> Cycle:
    """Turn the acceptance test's numbers into a plain event, one DraftPosition per drafted node.

    Each token's text is its piece of the text after `context` and its ancestors (engine/vocabulary.py): a character
    split across tokens shows once, whole, on the token that completes it.
    """

    def named(entries: list[tuple[int, float]]) -> tuple[tuple[int, str, float], ...]:
        return tuple((token, vocabulary.token_text(token), prob) for token, prob in entries)

    tree = proposal.tree
    pieces = node_pieces(vocabulary, context, tree)
    accepted_ids = [tree.token_ids[node] for node in verdict.accepted_nodes]
    # a tree's node shows p, q and u, and its target distribution is bonus_top_p; Σ min(p, q) is a chain's analytic α
    # (Tally reads it), which a sibling tested against a residual does not have
    is_tree = settings.tree is not None  # a tree run's cycles carry the tree's structure; a chain's leave it implied
    positions = tuple(
        DraftPosition(
            token,
            pieces[node],
            *(numbers[node] for numbers in (shown.status, shown.q, shown.p, shown.accept_probability, shown.uniforms)),
            *((None, (), (), ()) if is_tree else (shown.overlap[node], *(named(top[node]) for top in shown.tops))),
        )
        for node, token in enumerate(tree.token_ids)
    )
    return Cycle(
        index=index,
        gamma=depth,
        positions=positions,
        n_accepted=verdict.n_accepted,
        resampled_token_id=None if verdict.is_bonus else verdict.new_token_id,
        bonus_token_id=verdict.new_token_id if verdict.is_bonus else None,
        new_token_text=vocabulary.pieces(context + accepted_ids, [verdict.new_token_id])[0],
        bonus_top_p=named(shown.bonus_top_p),
        emitted_token_ids=tuple(emitted),
        **timings,
        overhead_s=0.0,
        n_draft_forwards=proposal.n_forwards,
        lossy=settings.lossy,
        draft_stop=draft_stop,
        parents=tree.parents if is_tree else (),
        accepted_nodes=tuple(verdict.accepted_nodes) if is_tree else (),
    )


def node_pieces(vocabulary: Vocabulary, context: list[int], tree: TokenTree) -> list[str]:
    """Each node's piece of text after the context and its ancestors, read along each leaf's path (a chain: one)."""
    pieces = [""] * len(tree)
    for leaf in tree.leaves:
        path = tree.path(leaf)
        for node, piece in zip(path, vocabulary.pieces(context, [tree.token_ids[node] for node in path])):
            pieces[node] = piece
    return pieces
