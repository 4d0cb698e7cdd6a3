"""Speculative decoding (Leviathan et al. 2023), one cycle at a time, as a generator of events.

Notation (GUIDE.md): p is the target's next-token distribution and q the draft's, both after the
same temperature / top-k / top-p warping; γ drafts are proposed per cycle; α is the probability
that one draft is accepted; τ is the time of a draft forward over the time of a target forward.

One cycle:
  1. draft: sample x_1..x_γ from q, one step at a time, keeping each q_i;
  2. verify: one target forward over the last token + x_1..x_γ gives p_1..p_{γ+1};
  3. accept x_i while u_i ≤ min(1, p_i(x_i) / q_i(x_i)); at the first rejection sample from
     norm(max(0, p_i − q_i)); if all γ pass, sample a bonus token from p_{γ+1};
  4. roll both KV caches back to the accepted prefix (the draft catches up next cycle);
  5. the drafter's strategy learns from the verdict (adaptive γ, dynamic drafting, ...).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import torch

from specviz.engine.acceptance import Verdict, verify
from specviz.engine.drafters import AdaptiveGamma, Drafter, Proposal, Verification
from specviz.engine.events import Cycle, DraftPosition, Event, Summary
from specviz.engine.kv_cache import CachedDecoder, rollback_to_accepted, synchronize
from specviz.engine.settings import DecodeSettings
from specviz.engine.start import prefill, run_started
from specviz.engine.tally import Tally
from specviz.engine.vocabulary import Vocabulary

StopCheck = Callable[[], bool]


def speculative_decode(
    target: CachedDecoder,
    drafter: Drafter,
    prompt_ids: list[int],
    settings: DecodeSettings,
    vocabulary: Vocabulary,
    should_stop: StopCheck = lambda: False,
) -> Iterator[Event]:
    """Yield RunStarted, then one Cycle per target forward, then a Summary."""
    if settings.adaptive_gamma and not isinstance(drafter, AdaptiveGamma):
        drafter = AdaptiveGamma(drafter)  # the user-facing switch selects the strategy; the loop knows no flags
    generator = torch.Generator(device=target.device).manual_seed(settings.seed)
    prefill_s = prefill(target, prompt_ids, also=lambda: drafter.start(prompt_ids))
    started = run_started("speculative", prompt_ids, settings, vocabulary, drafter.name, prefill_s)
    yield replace(started, adaptive_gamma=started.adaptive_gamma or isinstance(drafter, AdaptiveGamma))

    committed = list(prompt_ids)
    new_ids: list[int] = []
    tally = Tally()
    decode_s = 0.0
    stop_reason = "max_new_tokens"
    while len(new_ids) < settings.max_new_tokens:
        if should_stop():
            stop_reason = "stopped"
            break
        cycle_start = time.perf_counter()
        scheduled = drafter.window(settings.gamma)
        window = min(scheduled, settings.max_new_tokens - len(new_ids) - 1)  # never draft past the limit

        # 1. draft model inference, sequentially
        proposal = drafter.propose(committed, window, settings.sampling, generator)
        synchronize(target.device)
        draft_done = time.perf_counter()

        # 2. parallel inference on the target: the pending token plus every draft, one forward
        target_input = committed[target.cached_length :] + proposal.token_ids
        n_verified = len(proposal.token_ids) + 1
        hidden_states = None
        if drafter.wants_target_hidden_states:
            target_logits, hidden_states = target.feed_with_hidden_states(target_input, keep_last=n_verified)
        else:
            target_logits = target.feed(target_input, keep_last=n_verified)  # (k+1, vocab)
        synchronize(target.device)
        verify_done = time.perf_counter()

        # 3. accept a prefix of the drafts, then the target's own token
        verdict = verify(
            target_logits,
            proposal.token_ids,
            proposal.draft_probs,
            proposal.draft_logits,
            settings.sampling,
            settings.lenience,
            generator,
            settings.top_n,
        )
        emitted = proposal.token_ids[: verdict.n_accepted] + [verdict.new_token_id]
        emitted = emitted[: settings.max_new_tokens - len(new_ids)]
        if vocabulary.eos_token_id in emitted:
            emitted = emitted[: emitted.index(vocabulary.eos_token_id) + 1]
            stop_reason = "eos"
        committed += emitted
        new_ids += emitted

        # 4. roll both KV caches back to the accepted prefix
        rollback_to_accepted(target, committed)
        drafter.rollback(committed)

        # 5. the drafting strategy learns from the verdict
        n_drafted = len(proposal.token_ids)
        drafter.update(Verification(window, n_drafted, verdict.n_accepted, tuple(committed), hidden_states))

        timings = dict(draft_s=draft_done - cycle_start, verify_s=verify_done - draft_done, overhead_s=0.0)
        cycle = _cycle_event(tally.cycles, window, proposal, verdict, emitted, vocabulary, settings, timings)
        draft_stop = "token limit" if n_drafted == window < scheduled else proposal.stop_reason
        cycle_end = time.perf_counter()
        # overhead: acceptance, rollback, the strategy's update and this event
        cycle = replace(cycle, overhead_s=cycle_end - verify_done, draft_stop=draft_stop)
        decode_s += cycle_end - cycle_start
        tally = tally.add(cycle)
        yield cycle

        if stop_reason == "eos":
            break

    yield Summary(
        mode="speculative",
        new_token_ids=tuple(new_ids),
        text=vocabulary.text(new_ids),
        wall_s=prefill_s + decode_s,
        prefill_s=prefill_s,
        stop_reason=stop_reason,
        tally=tally,
        lossy=settings.lossy,
    )


def _cycle_event(
    index: int,
    window: int,
    proposal: Proposal,
    verdict: Verdict,
    emitted: list[int],
    vocabulary: Vocabulary,
    settings: DecodeSettings,
    timings: dict[str, float],
) -> Cycle:
    """Turn the verdict's numbers into a plain event, one DraftPosition per drafted token."""

    def ranked(entries: list[tuple[int, float]]) -> tuple[tuple[int, str, float], ...]:
        return tuple((token, decode_token(token), prob) for token, prob in entries)

    decode_token = vocabulary.token_text
    positions = []
    for i, token in enumerate(proposal.token_ids):
        tested = i <= verdict.n_accepted
        status = "accepted" if i < verdict.n_accepted else ("rejected" if i == verdict.n_accepted else "unverified")
        positions.append(
            DraftPosition(
                token_id=token,
                text=decode_token(token),
                status=status,
                q=verdict.q_shown[i],
                p=verdict.p_shown[i] if tested else None,
                accept_probability=verdict.accept_probability[i] if tested else None,
                u=verdict.uniforms[i] if tested and verdict.uniforms is not None else None,
                overlap=verdict.overlap[i] if tested else None,
                top_p=ranked(verdict.top_p[i]),
                top_q=ranked(verdict.top_q[i]),
                top_residual=ranked(verdict.top_residual) if status == "rejected" else (),
            )
        )
    return Cycle(
        index=index,
        gamma=window,
        positions=tuple(positions),
        n_accepted=verdict.n_accepted,
        resampled_token_id=None if verdict.is_bonus else verdict.new_token_id,
        bonus_token_id=verdict.new_token_id if verdict.is_bonus else None,
        new_token_text=decode_token(verdict.new_token_id),
        bonus_top_p=ranked(verdict.top_p[verdict.n_accepted]),
        emitted_token_ids=tuple(emitted),
        **timings,
        n_draft_forwards=proposal.n_forwards,
        lossy=settings.lossy,
    )
