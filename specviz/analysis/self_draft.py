"""The self-draft check: the target drafting for itself. With q = p, token by token and block verification keep every
draft (α = 1, γ + 1 tokens per pass) at any temperature; sample-and-match keeps one only when the target's own draw
equals it (chance Σ p² at temperature > 0, 1 under greedy). A sanity row of `score`: a verifier that falls short
where it should not, or a verify pass whose rows disagree with single steps, shows here."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from specviz.engine.settings import VERIFICATIONS, DecodeSettings, SamplingSettings
from specviz.engine.tally import Tally

if TYPE_CHECKING:
    from specviz.models.loading import LoadedPair


def self_draft_tallies(
    pair: LoadedPair, prompt_ids: list[int], sampling: SamplingSettings, gamma: int, cycles: int = 8, seed: int = 0
) -> dict[str, Tally]:
    """Per verifier, the tally of `cycles` full windows with the target as its own draft (transformers' cache for both,
    so the two never share the fast path's buffers)."""
    from specviz.drafting.drafters import ModelDrafter
    from specviz.engine.kv_cache import CachedDecoder
    from specviz.engine.speculative import speculative_decode

    vocab = pair.shared_vocab_size
    settings = DecodeSettings(max_new_tokens=cycles * (gamma + 1), gamma=gamma, sampling=sampling, seed=seed)
    tallies = {}
    for name in VERIFICATIONS:
        drafter = ModelDrafter(CachedDecoder(pair.target.model, vocab))
        target = CachedDecoder(pair.target.model, vocab)
        events = speculative_decode(target, drafter, prompt_ids, replace(settings, verification=name), pair.vocabulary)
        tallies[name] = list(events)[-1].tally
    return tallies


def self_draft_line(tallies: dict[str, Tally], gamma: int) -> str:
    """One line: α and tokens per pass for each verifier, against what a self-draft should give."""
    parts = [
        f"{name} α {tally.alpha:.3f}, {tally.mean_acceptance_length:.2f} tokens/pass"
        if tally.alpha is not None and tally.mean_acceptance_length is not None
        else f"{name} n/a"
        for name, tally in tallies.items()
    ]
    return (
        f"self-draft check (the target drafts for itself, γ = {gamma}; expect α 1 and {gamma + 1} tokens/pass, "
        f"match below 1 at T > 0): " + " · ".join(parts)
    )
