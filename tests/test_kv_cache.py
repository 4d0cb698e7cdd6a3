"""Cached logits must equal uncached logits after any sequence of feeds and rollbacks."""

import random

import torch

from specviz.engine import CachedDecoder, rollback_to_accepted
from tests.tiny import tiny_llama

VOCAB = 64


def full_forward_logits(model, ids: list[int]) -> torch.Tensor:
    """The reference: the whole sequence at once, no cache."""
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def test_cache_matches_full_forward_after_random_rollbacks():
    model = tiny_llama(VOCAB, seed=3)
    decoder = CachedDecoder(model, VOCAB)
    rng = random.Random(0)
    sequence = [rng.randrange(VOCAB) for _ in range(5)]
    decoder.feed(sequence[:-1])
    for step in range(40):
        drafts = [rng.randrange(VOCAB) for _ in range(rng.randint(0, 6))]
        pending = sequence[decoder.cached_length :]
        logits = decoder.feed(pending + drafts, keep_last=len(drafts) + 1)
        reference = full_forward_logits(model, sequence + drafts)[-(len(drafts) + 1) :]
        torch.testing.assert_close(logits, reference, atol=1e-4, rtol=1e-4, msg=f"step {step}: cached logits differ")
        n_accepted = rng.randint(0, len(drafts))
        sequence += drafts[:n_accepted] + [rng.randrange(VOCAB)]
        still_pending = rollback_to_accepted(decoder, sequence)
        assert decoder.cached_length == len(sequence) - len(still_pending)
        assert still_pending[-1] == sequence[-1], "the newest token is always left to feed"


def test_truncate_never_grows_and_reset_empties():
    decoder = CachedDecoder(tiny_llama(VOCAB, seed=4), VOCAB)
    decoder.feed([1, 2, 3, 4])
    decoder.truncate(10)
    assert decoder.cached_length == 4
    decoder.truncate(2)
    assert decoder.cached_length == 2
    decoder.reset()
    assert decoder.cached_length == 0
