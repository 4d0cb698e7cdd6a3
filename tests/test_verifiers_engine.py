"""The three verifiers inside the engine: greedy output equals the target alone, a self-draft keeps everything, one run
judges its drafts three ways, and trees refuse block and match in one sentence."""

import pytest

from specviz.drafting.drafters import ModelDrafter
from specviz.engine import CachedDecoder, Cycle, DecodeSettings, SamplingSettings, SettingsError, speculative_decode
from specviz.engine.settings import VERIFICATIONS
from specviz.engine.tree_shape import TreeShape
from tests.test_greedy_exact import PROMPT, VOCAB, final, transformers_greedy
from tests.tiny import fake_vocabulary, tiny_llama


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=0)


@pytest.fixture(scope="module")
def draft():
    return tiny_llama(VOCAB, seed=1, layers=1)


def decode(target, draft_model, settings: DecodeSettings) -> list:
    drafter = ModelDrafter(CachedDecoder(draft_model, VOCAB))
    return list(speculative_decode(CachedDecoder(target, VOCAB), drafter, PROMPT, settings, fake_vocabulary()))


@pytest.mark.parametrize("verification", VERIFICATIONS)
def test_greedy_output_equals_the_target_alone_under_every_verifier(target, draft, verification):
    summary = final(decode(target, draft, DecodeSettings(max_new_tokens=30, gamma=3, verification=verification)))
    assert list(summary.new_token_ids) == transformers_greedy(target, PROMPT, 30), f"{verification} left greedy decoding"
    assert summary.tally.rejections > 0, "the random draft should be rejected sometimes, or this test proves little"


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.5])
@pytest.mark.parametrize("verification", VERIFICATIONS)
def test_the_target_as_its_own_draft(target, verification, temperature):
    """Token by token and block: α = 1 and γ + 1 tokens per pass at any temperature. Sample-and-match draws the
    target's own token apart from the draft's, so it keeps every draft only under greedy (at temperature T > 0 a draft
    survives with chance Σ p², below 1: the issue's 'every verifier' does not hold for match)."""
    gamma = 3
    settings = DecodeSettings(
        max_new_tokens=6 * (gamma + 1), gamma=gamma, sampling=SamplingSettings(temperature=temperature), verification=verification
    )
    tally = final(decode(target, target, settings)).tally
    if verification == "match" and temperature > 0:
        assert tally.alpha is not None and tally.alpha < 1, "match at T > 0 cannot keep every draft: its own draw differs"
        return
    assert tally.alpha == 1.0, f"{verification} at T = {temperature} rejected a draft equal to the target (α = {tally.alpha})"
    assert tally.tokens_per_cycle == gamma + 1


def test_one_run_judges_each_cycles_drafts_three_ways(target, draft):
    settings = DecodeSettings(
        max_new_tokens=24, gamma=3, sampling=SamplingSettings(temperature=1.0), compare_verifiers=True, verification="block"
    )
    cycles = [event for event in decode(target, draft, settings) if isinstance(event, Cycle)]
    for cycle in cycles:
        if not cycle.positions:
            continue
        assert [v.verification for v in cycle.verdicts] == list(VERIFICATIONS)
        assert all(len(v.p) == len(cycle.positions) for v in cycle.verdicts)
    assert any(len({v.n_accepted for v in c.verdicts}) > 1 for c in cycles), "some cycle should get different verdicts"


def test_a_run_without_the_comparison_carries_none(target, draft):
    settings = DecodeSettings(max_new_tokens=8, gamma=2, sampling=SamplingSettings(temperature=1.0))
    assert all(not event.verdicts for event in decode(target, draft, settings) if isinstance(event, Cycle))


@pytest.mark.parametrize("verification", ["block", "match"])
def test_trees_refuse_block_and_match_in_one_sentence(verification):
    with pytest.raises(SettingsError, match="token trees are verified token by token"):
        DecodeSettings(tree=TreeShape.parse("2x1"), verification=verification).validate()


def test_lenience_takes_token_by_token():
    with pytest.raises(SettingsError, match="lenient acceptance"):
        DecodeSettings(lenience=0.5, verification="block").validate()
    with pytest.raises(SettingsError, match="verification must be one of"):
        DecodeSettings(verification="blocky").validate()
