"""Invariants of every run: reproducible seeds, token budgets, one target token per cycle, EOS."""

import pytest

from specviz.drafting.drafters import ModelDrafter
from specviz.engine import CachedDecoder, Cycle, DecodeSettings, SamplingSettings, speculative_decode
from tests.tiny import fake_vocabulary, tiny_llama

VOCAB = 64
PROMPT = [5, 6, 7, 8]


@pytest.fixture(scope="module")
def models():
    return tiny_llama(VOCAB, seed=0), tiny_llama(VOCAB, seed=1, layers=1)


def decode(models, vocabulary=None, **settings):
    target, draft = models
    return list(
        speculative_decode(
            CachedDecoder(target, VOCAB),
            ModelDrafter(CachedDecoder(draft, VOCAB)),
            PROMPT,
            DecodeSettings(**settings),
            vocabulary or fake_vocabulary(),
        )
    )


def test_same_seed_same_output_and_other_seeds_differ(models):
    sampling = SamplingSettings(temperature=1.0)
    first = decode(models, sampling=sampling, seed=11, max_new_tokens=30)[-1].new_token_ids
    again = decode(models, sampling=sampling, seed=11, max_new_tokens=30)[-1].new_token_ids
    others = {decode(models, sampling=sampling, seed=seed, max_new_tokens=30)[-1].new_token_ids for seed in range(5)}
    assert first == again, "the same seed must reproduce the same tokens"
    assert len(others) > 1, "different seeds should give different samples at temperature 1"


def test_greedy_ignores_the_seed(models):
    assert decode(models, seed=1)[-1].new_token_ids == decode(models, seed=2)[-1].new_token_ids


@pytest.mark.parametrize("max_new_tokens", [1, 2, 5, 17])
@pytest.mark.parametrize("gamma", [1, 4, 16])
def test_max_new_tokens_is_never_exceeded(models, max_new_tokens, gamma):
    events = decode(models, sampling=SamplingSettings(temperature=0.8), max_new_tokens=max_new_tokens, gamma=gamma)
    assert events[-1].new_tokens == max_new_tokens, "without EOS the run stops exactly at the budget"


def test_each_cycle_emits_accepted_plus_one(models):
    events = decode(models, sampling=SamplingSettings(temperature=1.0), max_new_tokens=60, gamma=4)
    cycles = [event for event in events if isinstance(event, Cycle)]
    for cycle in cycles:
        assert len(cycle.emitted_token_ids) == cycle.n_accepted + 1
        assert (cycle.resampled_token_id is None) != (cycle.bonus_token_id is None), "exactly one target token per cycle"
        statuses = [position.status for position in cycle.positions]
        assert statuses == ["accepted"] * cycle.n_accepted + (
            ["rejected"] + ["unverified"] * (len(statuses) - cycle.n_accepted - 1) if cycle.n_accepted < len(statuses) else []
        )
    summary = events[-1]
    assert summary.new_tokens == sum(len(c.emitted_token_ids) for c in cycles)
    assert summary.tally.accepted == sum(c.n_accepted for c in cycles)


def test_eos_stops_the_run(models):
    greedy = decode(models, max_new_tokens=30)[-1].new_token_ids
    eos = greedy[7]
    events = decode(models, vocabulary=fake_vocabulary(eos_token_id=eos), max_new_tokens=30)
    assert events[-1].new_token_ids == greedy[: greedy.index(eos) + 1]
    assert events[-1].stop_reason == "eos"


def test_stop_request_ends_the_run_early(models):
    calls = iter(range(100))
    events = list(
        speculative_decode(
            CachedDecoder(models[0], VOCAB),
            ModelDrafter(CachedDecoder(models[1], VOCAB)),
            PROMPT,
            DecodeSettings(max_new_tokens=60),
            fake_vocabulary(),
            should_stop=lambda: next(calls) >= 2,
        )
    )
    assert events[-1].stop_reason == "stopped"
    assert sum(isinstance(e, Cycle) for e in events) == 2


def test_lossy_flag_follows_lenience(models):
    assert decode(models, lenience=0.5)[-1].lossy
    assert all(e.lossy for e in decode(models, lenience=0.5) if isinstance(e, Cycle))
    assert not decode(models)[-1].lossy
