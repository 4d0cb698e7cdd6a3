"""The feature head (EAGLE-style drafter): its cache, its training-time test, and exactness through the engine."""

import copy

import pytest
import torch

from specviz.drafting.drafters import FeatureDrafter
from specviz.engine import CachedDecoder, DecodeSettings, Summary, autoregressive_decode, speculative_decode
from specviz.kernels import w4a8
from specviz.models.feature_head import FeatureCache, head_from_target, head_in_form, load_head, own_weight_bytes, save_head
from tests.test_greedy_exact import transformers_greedy
from tests.tiny import fake_vocabulary, tiny_llama

VOCAB = 64
PROMPT = [3, 17, 5, 42, 8, 8, 9]


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=0)


def random_head(target, seed: int = 1, kept: list[int] | None = None, layers: tuple[int, ...] = (-1,)):
    """A head from the target's last layer, its weights then scrambled: it drafts, and is often wrong."""
    head = head_from_target(target, kept or list(range(VOCAB)), layers).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return head


def test_cache_steps_equal_teacher_forcing(target):
    assert_cache_steps_equal_teacher_forcing(random_head(target))


def assert_cache_steps_equal_teacher_forcing(head) -> None:
    """A head stepped through its cache in pieces, rolled back and fed again, computes what one teacher-forced pass does
    (also run on the EAGLE-3 head, tests/test_eagle3_head.py)."""
    token_ids = torch.randint(0, head.shape.vocab_size, (1, 10))
    features = torch.randn(1, 10, head.shape.feature_width)
    with torch.no_grad():
        whole, _ = head(token_ids, features)
        cache = FeatureCache()
        pieces = [head.step(token_ids[0, a:b], features[0, a:b], cache) for a, b in ((0, 6), (6, 7), (7, 10))]
        cache.truncate(4)  # rolled back, then fed again: the same result
        again = head.step(token_ids[0, 4:10], features[0, 4:10], cache)
    torch.testing.assert_close(torch.cat(pieces), whole[0], atol=2e-4, rtol=2e-4)
    torch.testing.assert_close(again, whole[0, 4:], atol=2e-4, rtol=2e-4)


def test_second_training_step_is_what_the_second_draft_sees(target):
    """Training's unrolled step equals drafting: true keys before position i, the fed-back prediction at i."""
    head = random_head(target)
    token_ids, features = torch.randint(0, VOCAB, (1, 9)), torch.randn(1, 9, 32)
    with torch.no_grad():
        first, first_kv = head(token_ids, features)
        fed_back = torch.cat([features[:, :1], first[:, :-1]], dim=1)
        second = head.second_step(token_ids, fed_back, first_kv)
        for position in (1, 4, 8):
            cache = FeatureCache()
            head.step(token_ids[0, :position], features[0, :position], cache)
            drafted = head.step(token_ids[0, position : position + 1], fed_back[0, position : position + 1], cache)
            torch.testing.assert_close(drafted[0], second[0, position], atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_feature_drafter_greedy_equals_generate(target, gamma):
    settings = DecodeSettings(max_new_tokens=40, gamma=gamma)
    drafter = FeatureDrafter(random_head(target), VOCAB)
    speculative = list(speculative_decode(CachedDecoder(target, VOCAB), drafter, PROMPT, settings, fake_vocabulary()))[-1]
    assert isinstance(speculative, Summary)
    assert list(speculative.new_token_ids) == transformers_greedy(target, PROMPT, 40), f"γ={gamma}: diverged from greedy"
    assert speculative.tally.rejections > 0, "a scrambled head should be rejected sometimes, or this test proves little"


@pytest.mark.parametrize("layers", [(-1,), (-1, 1)])
def test_the_drafter_reads_the_targets_true_features(target, layers):
    """After a run, every known feature is the target's own (teacher-forced over the output), and the head's cache
    holds exactly the true-input positions: a bookkeeping slip would only lower α, so exactness tests cannot see it."""
    head = random_head(target, layers=layers)
    drafter = FeatureDrafter(head, VOCAB)
    summary = list(
        speculative_decode(
            CachedDecoder(target, VOCAB), drafter, PROMPT, DecodeSettings(max_new_tokens=25, gamma=3), fake_vocabulary()
        )
    )[-1]
    sequence = PROMPT + list(summary.new_token_ids)
    with torch.no_grad():
        states = target(torch.tensor([sequence]), output_hidden_states=True).hidden_states
        truth = torch.cat([states[layer][0] for layer in layers], dim=-1)  # (n, hidden · layers)
        known = len(drafter.features)
        assert known == len(sequence) - 1, "features are known for every token but the last emitted one"
        torch.testing.assert_close(drafter.features, truth[:known], atol=1e-4, rtol=1e-4)
        _, (keys, _) = head(torch.tensor([sequence[1 : drafter.true_length + 1]]), truth[None, : drafter.true_length])
    assert drafter.cache.length == drafter.true_length
    torch.testing.assert_close(drafter.cache.keys, keys, atol=1e-4, rtol=1e-4)


def test_a_reduced_head_never_drafts_outside_its_tokens(target):
    kept = list(range(0, VOCAB, 3))
    drafter = FeatureDrafter(random_head(target, kept=kept), VOCAB)
    settings = DecodeSettings(max_new_tokens=30, gamma=4)
    events = list(speculative_decode(CachedDecoder(target, VOCAB), drafter, PROMPT, settings, fake_vocabulary()))
    drafted = {position.token_id for event in events for position in getattr(event, "positions", ())}
    assert drafted and drafted <= set(kept), f"drafted {sorted(drafted - set(kept))} outside the kept ids"
    baseline = list(autoregressive_decode(CachedDecoder(target, VOCAB), PROMPT, settings, fake_vocabulary()))[-1]
    assert events[-1].new_token_ids == baseline.new_token_ids


def test_a_saved_head_loads_back_with_the_same_logits(target, tmp_path):
    head = random_head(target)
    save_head(head, tmp_path, dtype=torch.float32)
    loaded = load_head(tmp_path, target, dtype=torch.float32)
    token_ids, features = torch.randint(0, VOCAB, (1, 6)), torch.randn(1, 6, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded.logits(loaded(token_ids, features)[0][0]), head.logits(head(token_ids, features)[0][0]))
    assert sorted(name for name, _ in loaded.named_parameters()) == sorted(name for name, _ in head.named_parameters())
    assert "embedding" not in " ".join(loaded.state_dict()), "the target's embedding is borrowed, never saved"


def gently_trained_head(target, seed: int = 0):
    """A head near its start (the target's feature passed through), nudged: random_head's logits are too chaotic to
    compare forms on (bf16 alone moves them 2 %)."""
    head = head_from_target(target, list(range(VOCAB))).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in head.parameters():
            if parameter.dim() > 1:
                parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.1)
    return head


# measured on three seeds: bf16 alone 0.010–0.012, int8 0.032–0.040, int4 0.37–0.44 (16 levels over groups of 32
# weights on a 32-wide layer); on SmolLM2's head, benchmarks/head_forms.py counts the argmaxes each form keeps
@pytest.mark.parametrize(
    "form, tolerance",
    [
        ("int8", 0.08),
        ("int4", 0.6),
        pytest.param("w4a8", 0.6, marks=pytest.mark.skipif(not w4a8.available(), reason="no w4a8 kernel on this CPU")),
    ],
)
def test_a_head_in_a_weight_only_form_stays_close_smaller_and_exact(target, form, tolerance):
    """Quantising the head changes only the draft: its logits move a little, its bytes shrink, the output does not."""
    head = gently_trained_head(target)
    quantised = head_in_form(copy.deepcopy(head), form)  # a copy: head_from_target draws its fuse weights at random
    assert quantised.form == form and quantised.head_weight is None
    generator = torch.Generator().manual_seed(0)
    token_ids = torch.randint(0, VOCAB, (1, 12), generator=generator)
    features = torch.randn(1, 12, 32, generator=generator)
    with torch.no_grad():
        full = head.kept_logits(head(token_ids, features)[0])
        small = quantised.kept_logits(quantised(token_ids, features.to(torch.bfloat16))[0]).float()
    relative = ((small - full).norm() / full.norm()).item()
    assert relative < tolerance, f"{form}: logits moved by {relative:.3f} of their size"
    parameters, stored = own_weight_bytes(quantised)
    counted = sum(p.numel() for p in head.parameters()) + head.head_weight.numel()  # the unquantised head's own tensors
    assert parameters == counted, "the parameter count is the head's layer and kept rows, whatever the form"
    assert stored < 0.7 * 2 * parameters, f"{form} should store less than bf16 ({stored} bytes for {parameters})"
    settings = DecodeSettings(max_new_tokens=30, gamma=3)
    summary = list(
        speculative_decode(CachedDecoder(target, VOCAB), FeatureDrafter(quantised, VOCAB), PROMPT, settings, fake_vocabulary())
    )[-1]
    assert list(summary.new_token_ids) == transformers_greedy(target, PROMPT, 30)
