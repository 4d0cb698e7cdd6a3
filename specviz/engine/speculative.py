"""Speculative decoding (Leviathan et al. 2023), one cycle at a time, as a generator of events.

Notation (docs/algorithm.md): p is the target's next-token distribution and q the draft's, both after the
same temperature / top-k / top-p warping; γ drafts are proposed per cycle; α is the probability
that one draft is accepted; τ is the time of a draft forward over the time of a target forward.

One cycle (`speculative_cycle`, numbered as below):
  1. draft: sample x_1..x_γ from q, one step at a time, keeping each q_i;
  2. verify: one target forward over the last token + x_1..x_γ gives p_1..p_{γ+1};
  3. accept x_i while u_i ≤ min(1, p_i(x_i) / q_i(x_i)); at the first rejection sample from
     norm(max(0, p_i − q_i)); if all γ pass, sample a bonus token from p_{γ+1} (or judge the block jointly, or
     match the target's own samples: `verification`, engine/verifiers.py);
  4. roll both KV caches back to the accepted prefix (the draft catches up next cycle);
  5. the drafter's strategy learns from what was accepted (adaptive γ, dynamic drafting, ...).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import torch

from specviz.engine.acceptance import Acceptance, Verdict, compare_verdicts, explain_verdict, judge_drafts
from specviz.engine.drafter import AdaptiveGamma, Drafter, Feedback, Proposal, with_schedule
from specviz.engine.events import Cycle, DraftPosition, Event, Summary
from specviz.engine.kv_cache import CachedDecoder, rollback_to_accepted, synchronize
from specviz.engine.settings import MAX_SEED, DecodeSettings, StopCheck, never_stop
from specviz.engine.start import prefill, run_started
from specviz.engine.tally import Tally
from specviz.engine.vocabulary import Vocabulary


def speculative_decode(
    target: CachedDecoder,
    drafter: Drafter,
    prompt_ids: list[int],
    settings: DecodeSettings,
    vocabulary: Vocabulary,
    should_stop: StopCheck = never_stop,
) -> Iterator[Event]:
    """Yield RunStarted, then one Cycle per target forward, then a Summary."""
    drafter = with_schedule(drafter, settings.adaptive_gamma)  # the user's switch picks the strategy; the loop knows no flags
    generator = torch.Generator(device=target.device).manual_seed(settings.seed)
    prefill_s = prefill(
        target,
        prompt_ids,
        also=lambda hidden_states: drafter.start(prompt_ids, hidden_states),
        layers=drafter.wanted_hidden_layers,
    )
    started = run_started("speculative", prompt_ids, settings, vocabulary, drafter.name, prefill_s, target.engine)
    yield replace(started, adaptive_gamma=isinstance(drafter, AdaptiveGamma))

    def next_cycle(committed: list[int], remaining: int, index: int, clock_s: float) -> Cycle:
        return speculative_cycle(target, drafter, committed, remaining, settings, vocabulary, generator, index, clock_s)

    yield from cycles_then_summary(next_cycle, prompt_ids, prefill_s, settings, vocabulary, should_stop)


def cycles_then_summary(
    next_cycle: Callable[[list[int], int, int, float], Cycle],  # (committed, remaining, index, clock_s) → one cycle
    prompt_ids: list[int],
    prefill_s: float,
    settings: DecodeSettings,
    vocabulary: Vocabulary,
    should_stop: StopCheck,
) -> Iterator[Cycle | Summary]:
    """The loop a chain and a token tree share: cycles until the token limit, an end-of-turn token or Stop, then the
    Summary. `next_cycle` grows `committed` by the tokens it emits."""
    committed, tally, stop_reason = list(prompt_ids), Tally(), "max_new_tokens"
    while tally.emitted < settings.max_new_tokens:
        if should_stop():
            stop_reason = "stopped"
            break
        remaining = settings.max_new_tokens - tally.emitted
        clock_s = prefill_s + tally.draft_s + tally.verify_s + tally.overhead_s  # the request's engine time so far
        cycle = next_cycle(committed, remaining, tally.cycles, clock_s)
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
) -> Cycle:
    """Draft, verify, accept, roll back, learn: one target forward. `committed` grows by the emitted tokens.

    `clock_s` is the request's engine time before this cycle; the event's `released_s` adds the time into the cycle
    at which its tokens were fixed.
    """
    cycle_start = time.perf_counter()
    scheduled = drafter.window(settings.gamma)
    window = min(scheduled, remaining - 1)  # never draft past the token limit

    # 1. draft model inference, sequentially
    proposal = drafter.propose(committed, window, settings.sampling, generator)
    synchronize(target.device)
    draft_done = time.perf_counter()

    # 2. parallel inference on the target: the pending token plus every draft, one forward
    target_logits, hidden_states = verify_pass(target, committed, proposal.token_ids, drafter.wanted_hidden_layers)
    synchronize(target.device)
    verify_done = time.perf_counter()

    # 3. accept a prefix of the drafts, then the target's own token
    verdict = judge_drafts(
        target_logits,
        proposal.token_ids,
        proposal.draft_probs,
        settings.sampling,
        settings.lenience,
        generator,
        settings.verification,
    )
    emitted = emitted_tokens(proposal.token_ids, verdict, remaining, vocabulary)
    context_length = len(committed)
    committed += emitted
    released_s = clock_s + time.perf_counter() - cycle_start  # the burst is known here, before the rollback

    # 4. roll both KV caches back to the accepted prefix
    rollback_to_accepted(target, committed)
    drafter.rollback(committed)

    # 5. the drafting strategy learns from what was accepted
    n_drafted = len(proposal.token_ids)
    drafter.update(Feedback(window, n_drafted, verdict.n_accepted, tuple(committed), hidden_states))
    synchronize(target.device)
    cycle_done = time.perf_counter()

    # the clock has stopped: the numbers the UI shows, and each token's text (the baseline's are untimed too)
    acceptance = explain_verdict(
        verdict, target_logits, proposal.token_ids, proposal.draft_probs, proposal.draft_logits, settings.sampling, settings.top_n
    )
    draft_stop = "token limit" if n_drafted == window < scheduled else proposal.stop_reason
    timings = {"draft_s": draft_done - cycle_start, "verify_s": verify_done - draft_done, "released_s": released_s}
    cycle = cycle_event(
        index, window, proposal, acceptance, emitted, vocabulary, settings, draft_stop, timings, committed[:context_length]
    )
    if settings.compare_verifiers:  # the same drafts judged by every verifier, with their own generators (untimed)
        seed = (settings.seed + index) % MAX_SEED
        cycle = replace(cycle, verdicts=compare_verdicts(verdict, proposal.token_ids, proposal.draft_probs, seed))
    # overhead: the acceptance test, the rollback and the strategy's update
    return replace(cycle, overhead_s=cycle_done - verify_done)


def verify_pass(
    target: CachedDecoder, committed: list[int], draft_ids: list[int], hidden_layers: tuple[int, ...] = ()
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One target forward over the pending token and every draft: the logits of p_1..p_{k+1} (and hidden states if asked)."""
    target_input = committed[target.cached_length :] + draft_ids
    n_verified = len(draft_ids) + 1
    if hidden_layers:  # (k+1, vocab), (k+1, hidden · layers)
        return target.feed_with_hidden_states(target_input, keep_last=n_verified, layers=hidden_layers)
    return target.feed(target_input, keep_last=n_verified), None  # (k+1, vocab)


def emitted_tokens(draft_ids: list[int], verdict: Verdict, remaining: int, vocabulary: Vocabulary) -> list[int]:
    """The accepted drafts and the target's own token, cut at the token limit and after an end-of-turn token."""
    emitted = (draft_ids[: verdict.n_accepted] + [verdict.new_token_id])[:remaining]
    end = vocabulary.ends_run(emitted)
    return emitted if end is None else emitted[: end + 1]


def cycle_event(
    index: int,
    window: int,
    proposal: Proposal,
    acceptance: Acceptance,
    emitted: list[int],
    vocabulary: Vocabulary,
    settings: DecodeSettings,
    draft_stop: str | None,
    timings: dict[str, float],
    context: list[int],
) -> Cycle:
    """Turn the acceptance test's numbers into a plain event, one DraftPosition per drafted token.

    Each token's text is its piece of the text after `context` (engine/vocabulary.py): a character split
    across tokens shows once, whole, on the token that completes it.
    """

    def ranked(entries: list[tuple[int, float]]) -> tuple[tuple[int, str, float], ...]:
        return tuple((token, decode_token(token), prob) for token, prob in entries)

    decode_token = vocabulary.token_text
    draft_pieces = vocabulary.pieces(context, proposal.token_ids)
    accepted = proposal.token_ids[: acceptance.n_accepted]
    new_token_piece = vocabulary.pieces(context + accepted, [acceptance.new_token_id])[0]
    positions = []
    for i, token in enumerate(proposal.token_ids):
        tested = i <= acceptance.n_accepted
        status = "accepted" if i < acceptance.n_accepted else ("rejected" if i == acceptance.n_accepted else "unverified")
        positions.append(
            DraftPosition(
                token_id=token,
                text=draft_pieces[i],
                status=status,
                q=acceptance.q_shown[i],
                p=acceptance.p_shown[i] if tested else None,
                accept_probability=acceptance.accept_probability[i] if tested else None,
                u=acceptance.uniforms[i] if tested and acceptance.uniforms is not None else None,
                overlap=acceptance.overlap[i] if tested else None,
                top_p=ranked(acceptance.top_p[i]),
                top_q=ranked(acceptance.top_q[i]),
                top_residual=ranked(acceptance.top_residual) if status == "rejected" else (),
            )
        )
    return Cycle(
        index=index,
        gamma=window,
        positions=tuple(positions),
        n_accepted=acceptance.n_accepted,
        resampled_token_id=None if acceptance.is_bonus else acceptance.new_token_id,
        bonus_token_id=acceptance.new_token_id if acceptance.is_bonus else None,
        new_token_text=new_token_piece,
        bonus_top_p=ranked(acceptance.top_p[acceptance.n_accepted]),
        emitted_token_ids=tuple(emitted),
        **timings,
        overhead_s=0.0,
        n_draft_forwards=proposal.n_forwards,
        lossy=settings.lossy,
        draft_stop=draft_stop,
    )
