"""The feature head's draft step on the fast path (models/head_fast_path.py): over its preallocated cache it drafts
what FeatureHead.step drafts (to float32 rounding: the attention sums in another order), rolls back by a length,
and speculation with it stays exactly the target's greedy output. The compiled package is tested in the slow set."""

import pytest
import torch

from specviz.drafting.drafters import FeatureDrafter
from specviz.engine import CachedDecoder, DecodeSettings, Summary, speculative_decode
from specviz.engine.compiled import compiler_missing
from specviz.models.feature_head import FeatureCache
from specviz.models.head_fast_path import FastHead
from tests.test_feature_head import PROMPT, VOCAB, random_head
from tests.test_greedy_exact import transformers_greedy
from tests.tiny import fake_vocabulary, tiny_llama


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=0)


def head_of(kind: str, target, folder):
    """A scrambled head: full, or low-rank as drafting loads it (the fuse as its factors, models/low_rank.py)."""
    if kind == "full":
        return random_head(target)
    from specviz.models.feature_head import load_head, save_head
    from tests.test_low_rank_head import scrambled_low_rank_head

    save_head(scrambled_low_rank_head(target), folder)
    return load_head(folder, target, dtype=torch.float32)


def eager(fast: FastHead) -> FastHead:
    assert fast.engine == "eager"  # a head whose package is not loaded: the same step, run eager
    return fast


def steps_of(draft_step, head, token_ids, features, cache, reference: bool):
    """Catch up on six positions, roll back to four, feed two again, then one fed-back draft: (f̂, logits) of each."""
    if reference:

        def draft_step(tokens, inputs, cache):
            predicted = head.step(tokens, inputs, cache)[-1:]
            return predicted, head.logits(predicted)

    out = [draft_step(token_ids[:6], features[:6], cache)]
    cache.truncate(4)
    out.append(draft_step(token_ids[4:6], features[4:6], cache))
    out.append(draft_step(token_ids[6:7], head.fed_back(out[-1][0]), cache))
    return out


@pytest.mark.parametrize("kind", ["full", "low-rank"])
@torch.inference_mode()
def test_the_static_cache_step_drafts_what_the_heads_own_step_drafts(target, kind, tmp_path):
    head = head_of(kind, target, tmp_path / "head")
    token_ids, features = torch.randint(0, VOCAB, (10,)), torch.randn(10, 32)
    fast = eager(FastHead(head))
    got = steps_of(fast.draft_step, head, token_ids, features, fast.new_cache(), reference=False)
    expected = steps_of(None, head, token_ids, features, FeatureCache(), reference=True)
    for (predicted, logits), (want_predicted, want_logits) in zip(got, expected):
        torch.testing.assert_close(predicted, want_predicted, atol=2e-4, rtol=2e-4)
        torch.testing.assert_close(logits, want_logits, atol=2e-4, rtol=2e-4)


@torch.inference_mode()
def test_the_static_cache_grows_and_keeps_what_it_held(target):
    head = random_head(target)
    fast = eager(FastHead(head))
    cache = fast.new_cache()
    features = torch.randn(cache.tensor.shape[1] + 3, 32)
    tokens = torch.randint(0, VOCAB, (features.shape[0],))
    fast.draft_step(tokens[:5], features[:5], cache)
    held = cache.tensor[:, :5].clone()
    fast.draft_step(tokens[5:], features[5:], cache)  # past the first allocation
    assert cache.length == features.shape[0] and cache.tensor.shape[1] >= cache.length
    assert torch.equal(cache.tensor[:, :5], held)


@pytest.mark.parametrize("gamma,kind", [(1, "full"), (3, "full"), (2, "low-rank")])
def test_speculation_with_the_fast_head_equals_generate(target, gamma, kind, tmp_path):
    head = head_of(kind, target, tmp_path / "head")
    drafter = FeatureDrafter(head, VOCAB)
    drafter.fast = eager(FastHead(head))
    settings = DecodeSettings(max_new_tokens=30, gamma=gamma)
    summary = list(speculative_decode(CachedDecoder(target, VOCAB), drafter, PROMPT, settings, fake_vocabulary()))[-1]
    assert isinstance(summary, Summary)
    assert list(summary.new_token_ids) == transformers_greedy(target, PROMPT, 30)
    assert summary.tally.rejections > 0, "a scrambled head should be rejected sometimes, or this test proves little"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["full", "low-rank"])
def test_the_compiled_draft_step_matches_the_eager_one_and_stays_exact(target, kind, tmp_path, monkeypatch):
    if compiler_missing(torch.device("cpu")):
        pytest.skip(compiler_missing(torch.device("cpu")))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    head = head_of(kind, target, tmp_path / "head")
    token_ids, features = torch.randint(0, VOCAB, (10,)), torch.randn(10, 32)
    compiled = FastHead(head)
    assert set(compiled.warm_up().seconds) == {"compile"}, compiled.report.reason
    with torch.inference_mode():
        got = steps_of(compiled.draft_step, head, token_ids, features, compiled.new_cache(), reference=False)
        fast = eager(FastHead(head))
        expected = steps_of(fast.draft_step, head, token_ids, features, fast.new_cache(), reference=False)
    for (predicted, logits), (want_predicted, want_logits) in zip(got, expected):
        torch.testing.assert_close(predicted, want_predicted, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(logits, want_logits, atol=1e-4, rtol=1e-4)
    drafter = FeatureDrafter(head, VOCAB)
    drafter.fast = compiled
    settings = DecodeSettings(max_new_tokens=30, gamma=2)
    summary = list(speculative_decode(CachedDecoder(target, VOCAB), drafter, PROMPT, settings, fake_vocabulary()))[-1]
    assert list(summary.new_token_ids) == transformers_greedy(target, PROMPT, 30)
    assert set(FastHead(head).warm_up().seconds) == {"load"}  # a restart loads the package
