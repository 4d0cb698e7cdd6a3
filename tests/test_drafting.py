"""Drafting strategies: the registry, dynamic drafting, the update hook and the target's hidden states, all exact."""

import pytest
import torch

from specviz.drafting.drafters import DynamicDrafter, ModelDrafter, PromptLookupDrafter
from specviz.drafting.registry import STRATEGIES, drafter_choices, make_drafter
from specviz.engine import (
    AdaptiveGamma,
    CachedDecoder,
    Cycle,
    DecodeSettings,
    Feedback,
    SamplingSettings,
    SettingsError,
    speculative_decode,
)
from tests.test_greedy_exact import PROMPT, VOCAB, transformers_greedy
from tests.test_sampling_lossless import SIGNIFICANCE, chi_square_p_value, reference_joint, speculative_counts
from tests.tiny import fake_vocabulary, tiny_llama


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=0)


def cycles_of(events) -> list[Cycle]:
    return [event for event in events if isinstance(event, Cycle)]


def test_registry_names_every_strategy_once():
    keys = [key for _, key in drafter_choices()]
    assert keys == list(STRATEGIES) and {"model", "adaptive", "dynamic", "lookup"} <= set(keys)
    assert all(label and label != key for label, key in drafter_choices()), "the app shows labels, not keys"
    with pytest.raises(SettingsError, match="unknown drafter"):
        make_drafter(None, "no-such-drafter")


def test_dynamic_drafting_is_exact_and_stops_on_low_confidence(target):
    """transformers' default: up to 20 drafts, stop after one whose q(x) < 0.4. Greedy output must not change."""
    draft = tiny_llama(VOCAB, seed=0, layers=2, sharpness=1.0)  # the target itself: long confident runs
    noisy = tiny_llama(VOCAB, seed=3, layers=1, sharpness=2.0)
    for draft_model in (draft, noisy):
        drafter = DynamicDrafter(CachedDecoder(draft_model, VOCAB), confidence_threshold=0.4, max_window=20)
        events = list(
            speculative_decode(
                CachedDecoder(target, VOCAB), drafter, PROMPT, DecodeSettings(max_new_tokens=60), fake_vocabulary()
            )
        )
        assert list(events[-1].new_token_ids) == transformers_greedy(target, PROMPT, 60), (
            "dynamic drafting changed the greedy output"
        )
        cycles = cycles_of(events)
        assert all(c.gamma <= 20 for c in cycles)
        stops = [c.draft_stop for c in cycles]
        assert all(stop in ("window full", "token limit") or stop.startswith("confidence ") for stop in stops), stops
        for cycle in cycles:
            if cycle.draft_stop.startswith("confidence "):
                shown = float(cycle.draft_stop.split()[1])
                q = cycle.positions[-1].q
                assert q < 0.4 and shown <= q < shown + 0.01, f"the stop names the last draft's q ({q:.4f}): {cycle.draft_stop}"
                assert all(p.q >= 0.4 for p in cycle.positions[:-1]), "drafting goes on while the draft is confident"
    assert any(c.draft_stop.startswith("confidence ") for c in cycles), "the noisy draft must stop on confidence at least once"


def test_dynamic_drafting_keeps_the_target_distribution():
    target, draft = tiny_llama(6, seed=0, hidden=16, layers=1), tiny_llama(6, seed=1, hidden=16, layers=1)
    settings = DecodeSettings(max_new_tokens=3, gamma=3, sampling=SamplingSettings(temperature=1.0))
    counts = speculative_counts(target, lambda: DynamicDrafter(CachedDecoder(draft, 6), confidence_threshold=0.4), settings)
    p_value = chi_square_p_value(counts, reference_joint(target, 0))
    assert p_value > SIGNIFICANCE, f"dynamic drafting changed the output distribution (chi-square p = {p_value:.2e})"


def test_adaptive_gamma_is_a_strategy_any_drafter_can_wear(target):
    drafter = AdaptiveGamma(PromptLookupDrafter())
    events = list(
        speculative_decode(
            CachedDecoder(target, VOCAB), drafter, PROMPT, DecodeSettings(max_new_tokens=40, gamma=3), fake_vocabulary()
        )
    )
    assert events[0].adaptive_gamma, "RunStarted says the schedule is adaptive"
    assert list(events[-1].new_token_ids) == transformers_greedy(target, PROMPT, 40)
    scheduled, emitted = 3, 0
    for cycle in cycles_of(events):
        assert cycle.gamma == min(scheduled, 40 - emitted - 1)
        scheduled = scheduled + 2 if cycle.n_accepted == cycle.gamma else max(1, scheduled - 1)
        emitted += len(cycle.emitted_token_ids)


class HiddenStateReader(ModelDrafter):
    """What an EAGLE-style drafter would do: ask for the target's hidden states, here only to record them."""

    name = "hidden-state reader"
    wants_target_hidden_states = True

    def __init__(self, decoder: CachedDecoder) -> None:
        super().__init__(decoder)
        self.seen: list[Feedback] = []

    def update(self, verification: Feedback) -> None:
        self.seen.append(verification)


def test_a_drafter_can_read_the_targets_hidden_states(target):
    drafter = HiddenStateReader(CachedDecoder(tiny_llama(VOCAB, seed=4, layers=1), VOCAB))
    events = list(
        speculative_decode(
            CachedDecoder(target, VOCAB), drafter, PROMPT, DecodeSettings(max_new_tokens=30, gamma=3), fake_vocabulary()
        )
    )
    assert list(events[-1].new_token_ids) == transformers_greedy(target, PROMPT, 30), (
        "asking for hidden states must not change the output"
    )
    committed = list(drafter.seen[-1].committed)
    with torch.no_grad():
        reference = target(torch.tensor([committed]), output_hidden_states=True).hidden_states[-1][0]  # (length, hidden)
    for seen in drafter.seen:
        assert seen.target_hidden_states.shape[0] == seen.n_drafted + 1
        first = len(seen.committed) - seen.n_accepted - 2  # the pending token's position; accepted drafts follow it
        kept = seen.target_hidden_states[: seen.n_accepted + 1]
        torch.testing.assert_close(kept, reference[first : first + seen.n_accepted + 1], atol=1e-4, rtol=1e-4)


def test_every_cycle_says_why_drafting_stopped(target):
    lookup = list(
        speculative_decode(
            CachedDecoder(target, VOCAB),
            PromptLookupDrafter(),
            PROMPT,
            DecodeSettings(max_new_tokens=20, gamma=4),
            fake_vocabulary(),
        )
    )
    stops = {c.draft_stop for c in cycles_of(lookup)}
    assert stops <= {"window full", "no earlier match", "match ran out", "token limit"} and stops
    model = list(
        speculative_decode(
            CachedDecoder(target, VOCAB),
            ModelDrafter(CachedDecoder(target, VOCAB)),
            PROMPT,
            DecodeSettings(max_new_tokens=12, gamma=4),
            fake_vocabulary(),
        )
    )
    assert [c.draft_stop for c in cycles_of(model)] == ["window full", "window full", "token limit"], (
        "12 tokens: 5 + 5, then γ cut to 1"
    )
