"""Greedy speculative decoding must equal the target's own greedy decoding, token for token."""

import pytest
import torch

from specviz.drafting.drafters import ModelDrafter, PromptLookupDrafter
from specviz.engine import CachedDecoder, DecodeSettings, Summary, autoregressive_decode, speculative_decode
from tests.tiny import fake_vocabulary, tiny_llama

VOCAB = 64
PROMPT = [3, 17, 5, 42, 8, 8, 9]


def final(events) -> Summary:
    events = list(events)
    assert isinstance(events[-1], Summary)
    return events[-1]


def transformers_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """The reference: transformers' own generate(), no cache tricks of ours."""
    ids = torch.tensor([prompt])
    output = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0
    )
    return output[0, len(prompt) :].tolist()


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=0)


@pytest.mark.parametrize("draft_kind", ["same-as-target", "random", "lookup"])
@pytest.mark.parametrize("gamma", [1, 3, 7])
def test_speculative_greedy_equals_target_greedy(target, draft_kind, gamma):
    settings = DecodeSettings(max_new_tokens=40, gamma=gamma)
    if draft_kind == "lookup":
        drafter = PromptLookupDrafter()
    else:
        draft_model = target if draft_kind == "same-as-target" else tiny_llama(VOCAB, seed=1, layers=1)
        drafter = ModelDrafter(CachedDecoder(draft_model, VOCAB))
    speculative = final(speculative_decode(CachedDecoder(target, VOCAB), drafter, PROMPT, settings, fake_vocabulary()))
    baseline = final(autoregressive_decode(CachedDecoder(target, VOCAB), PROMPT, settings, fake_vocabulary()))
    reference = transformers_greedy(target, PROMPT, 40)
    assert list(baseline.new_token_ids) == reference, "our autoregressive baseline must match transformers' generate()"
    assert list(speculative.new_token_ids) == reference, f"speculative ({draft_kind}, γ={gamma}) diverged from greedy"
    if draft_kind == "same-as-target":
        assert speculative.tally.alpha == 1.0, "a draft identical to the target must have every token accepted"
    if draft_kind == "random":
        assert speculative.tally.rejections > 0, "a random draft should be rejected sometimes, or this test proves little"


def test_adaptive_gamma_stays_exact(target):
    settings = DecodeSettings(max_new_tokens=50, gamma=2, adaptive_gamma=True)
    events = list(
        speculative_decode(
            CachedDecoder(target, VOCAB), ModelDrafter(CachedDecoder(target, VOCAB)), PROMPT, settings, fake_vocabulary()
        )
    )
    gammas = [event.gamma for event in events if hasattr(event, "positions")]
    assert gammas[:3] == [2, 4, 6], "all-accepted windows must grow γ by 2"
    assert list(events[-1].new_token_ids) == transformers_greedy(target, PROMPT, 50)


def test_adaptive_gamma_shrinks_on_rejection(target):
    settings = DecodeSettings(max_new_tokens=30, gamma=6, adaptive_gamma=True)
    draft = tiny_llama(VOCAB, seed=5, layers=1)
    events = list(
        speculative_decode(
            CachedDecoder(target, VOCAB), ModelDrafter(CachedDecoder(draft, VOCAB)), PROMPT, settings, fake_vocabulary()
        )
    )
    cycles = [event for event in events if hasattr(event, "positions")]
    scheduled, emitted = settings.gamma, 0
    for cycle in cycles:
        assert cycle.gamma == min(scheduled, settings.max_new_tokens - emitted - 1), "window = schedule, cut at the token limit"
        scheduled = scheduled + 2 if cycle.n_accepted == cycle.gamma else max(1, scheduled - 1)
        emitted += len(cycle.emitted_token_ids)
    assert any(c.n_accepted < c.gamma for c in cycles), "the random draft must be rejected at least once"
    assert list(events[-1].new_token_ids) == transformers_greedy(target, PROMPT, 30)


def test_padded_draft_vocabulary_is_cut_to_the_shared_length(target):
    """Like Qwen2.5 0.5B (151,936 rows) drafting for 7B (152,064): logits are cut to the shared length."""
    padded_draft = tiny_llama(VOCAB + 16, seed=2, layers=1)
    settings = DecodeSettings(max_new_tokens=30, gamma=4)
    speculative = final(
        speculative_decode(
            CachedDecoder(target, VOCAB), ModelDrafter(CachedDecoder(padded_draft, VOCAB)), PROMPT, settings, fake_vocabulary()
        )
    )
    assert list(speculative.new_token_ids) == transformers_greedy(target, PROMPT, 30)
