"""A draft whose head covers part of the vocabulary (EAGLE-3 / FR-Spec) keeps speculative decoding exact.

q is 0 outside the kept ids, so those tokens are never drafted; the target still reaches them through the
residual norm(max(0, p − q)) over its whole vocabulary. Proved with the same references as the full-vocabulary
draft: transformers' greedy generate(), and a chi-square test against the target's exact joint distribution.
"""

import copy

import pytest
import torch

from specviz.drafting.drafters import ModelDrafter
from specviz.engine import CachedDecoder, DecodeSettings, SamplingSettings, speculative_decode
from specviz.models.reduced_head import ReducedHead, reduce_head
from tests.test_greedy_exact import PROMPT as GREEDY_PROMPT
from tests.test_greedy_exact import final, transformers_greedy
from tests.test_sampling_lossless import PROMPT, SIGNIFICANCE, VOCAB, chi_square_p_value, reference_joint, speculative_counts
from tests.tiny import fake_vocabulary, tiny_llama

KEPT = [0, 2, 3, 5]  # tokens 1 and 4 can never be drafted


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=0, hidden=16, layers=1)


@pytest.fixture(scope="module")
def reduced_draft():
    return reduce_head(tiny_llama(VOCAB, seed=1, hidden=16, layers=1), KEPT)


def test_reduced_head_gives_full_width_logits_with_minus_infinity_outside(reduced_draft):
    full = tiny_llama(VOCAB, seed=1, hidden=16, layers=1)
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        reduced_logits, full_logits = reduced_draft(ids).logits[0], full(ids).logits[0]
    assert isinstance(reduced_draft.get_output_embeddings(), ReducedHead)
    assert reduced_logits.shape == full_logits.shape, "the reduced head must keep the full vocabulary width"
    assert torch.allclose(reduced_logits[:, KEPT], full_logits[:, KEPT], atol=1e-5), "kept rows must be the original head's"
    outside = [token for token in range(VOCAB) if token not in KEPT]
    assert torch.isneginf(reduced_logits[:, outside]).all(), "tokens outside the kept ids must have q = 0"


def test_target_puts_mass_outside_the_drafts_vocabulary(target):
    """Guard: if p never reached tokens 1 and 4 the chi-square test below would not exercise the residual."""
    joint = reference_joint(target, 0)
    outside = joint[[1, 4]].sum() + joint[:, [1, 4]].sum()
    assert outside > 0.1, f"the target gives tokens 1 and 4 only {outside:.3f} of its mass: the test would prove little"


def test_sampling_with_a_reduced_head_matches_the_target_distribution(target, reduced_draft):
    settings = DecodeSettings(max_new_tokens=3, gamma=3, sampling=SamplingSettings(temperature=1.0))
    counts = speculative_counts(target, lambda: ModelDrafter(CachedDecoder(reduced_draft, VOCAB)), settings)
    p_value = chi_square_p_value(counts, reference_joint(target, 0))
    assert p_value > SIGNIFICANCE, f"a reduced-vocabulary draft changed the output distribution (chi-square p = {p_value:.2e})"


@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_with_a_reduced_head_equals_target_greedy(gamma):
    target = tiny_llama(64, seed=0)
    draft = reduce_head(copy.deepcopy(target), list(range(0, 64, 2)))  # agrees with the target wherever its argmax is even
    settings = DecodeSettings(max_new_tokens=40, gamma=gamma)
    summary = final(
        speculative_decode(
            CachedDecoder(target, 64), ModelDrafter(CachedDecoder(draft, 64)), GREEDY_PROMPT, settings, fake_vocabulary()
        )
    )
    assert list(summary.new_token_ids) == transformers_greedy(target, GREEDY_PROMPT, 40), "greedy output must be the target's"
    assert summary.tally.accepted > 0 and summary.tally.rejections > 0, "the test needs both accepted and rejected drafts"


def test_out_of_range_ids_are_refused():
    with pytest.raises(ValueError, match="draft vocabulary"):
        reduce_head(tiny_llama(VOCAB, seed=1, hidden=16, layers=1), [0, VOCAB])
