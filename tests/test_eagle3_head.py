"""The EAGLE-3 head (specviz/models/eagle3_head.py): its cache, its training-time test unrolled over three drafts,
its standard checkpoint, and exactness through the engine's chain and tree drafters."""

import json
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file

from specviz.drafting.drafters import FeatureDrafter
from specviz.engine import CachedDecoder, DecodeSettings, Summary, speculative_decode
from specviz.engine.compiled import compiler_missing
from specviz.engine.tree_shape import TreeShape
from specviz.models.eagle3_head import Eagle3Head, Eagle3Shape, load_head, save_head
from specviz.models.feature_head import FeatureCache
from specviz.models.head_fast_path import FastHead
from tests.test_feature_head import assert_cache_steps_equal_teacher_forcing
from tests.test_greedy_exact import transformers_greedy
from tests.tiny import fake_vocabulary, tiny_llama

VOCAB = 64
PROMPT = [3, 17, 5, 42, 8, 8, 9]
AUX = (0, 1, 2)  # the tiny target's hidden states 0..2 stand in for low, mid and high


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=0, layers=3)


def random_head(target, seed: int = 1, kept: list[int] | None = None) -> Eagle3Head:
    """A head with random weights (it drafts, and is often wrong), over the target's embedding."""
    kept = kept or list(range(VOCAB))
    head = Eagle3Head(Eagle3Shape.of_target(target.config, len(kept), AUX), target.get_input_embeddings().weight.detach(), kept)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in head.named_parameters():
            if "norm" not in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * parameter.shape[-1] ** -0.5)
    return head.eval()


def test_cache_steps_equal_teacher_forcing(target):
    assert_cache_steps_equal_teacher_forcing(random_head(target))


def shifted(token_ids: torch.Tensor, by: int) -> torch.Tensor:
    return torch.cat([token_ids[:, by:], token_ids.new_zeros(token_ids.shape[0], by)], dim=1)


def test_the_unrolled_training_steps_are_what_drafting_steps_compute(target):
    """Training-time test: unrolled step k (k = 1..3) gives, at every base position, drafting step k's output and logits."""
    head = random_head(target)
    length = 9
    token_ids, features = torch.randint(0, VOCAB, (1, length)), torch.randn(1, length, 96)
    with torch.no_grad():
        first, first_kv = head(token_ids, features)
        unrolled, own = [first], []
        for step in (1, 2):
            unrolled.append(head.unrolled_step(shifted(token_ids, step), unrolled[-1], first_kv, own, step))
        for base in (0, 3, 6):
            cache = FeatureCache()
            drafted = [head.step(token_ids[0, : base + 1], features[0, : base + 1], cache)[-1:]]
            for step in (1, 2):
                position = base + step
                drafted.append(head.step(token_ids[0, position : position + 1], head.fed_back(drafted[-1]), cache))
            for k in range(3):
                torch.testing.assert_close(drafted[k][0], unrolled[k][0, base], atol=2e-4, rtol=2e-4)
                torch.testing.assert_close(
                    head.logits(drafted[k]), head.logits(unrolled[k][0, base : base + 1]), atol=2e-4, rtol=2e-4
                )


def test_a_saved_head_is_the_standard_checkpoint_and_loads_back(target, tmp_path):
    kept = list(range(0, VOCAB, 2))
    head = random_head(target, kept=kept)
    save_head(head, tmp_path, dtype=torch.float32)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert (config["draft_vocab_size"], config["target_hidden_size"], config["eagle_aux_hidden_state_layer_ids"]) == (
        32,
        32,
        [0, 1, 2],
    )
    weights = load_file(tmp_path / "model.safetensors")
    assert weights["fc.weight"].shape == (32, 96)
    assert weights["midlayer.self_attn.q_proj.weight"].shape == (32, 64)
    assert weights["lm_head.weight"].shape == (32, 32)
    assert weights["d2t"].dtype == torch.int64 and (torch.arange(32) + weights["d2t"]).tolist() == kept
    assert weights["t2d"].dtype == torch.bool and weights["t2d"].nonzero().flatten().tolist() == kept
    back = load_head(tmp_path, target, dtype=torch.float32)
    state = torch.randn(3, 32)
    torch.testing.assert_close(back.logits(state), head.logits(state))


def test_a_head_whose_lm_head_is_the_targets_rows_ships_without_it(target, tmp_path):
    head = random_head(target)
    with torch.no_grad():
        head.lm_head.weight.copy_(target.get_input_embeddings().weight[head.kept_ids])
    head.lm_head_from_embedding = True
    save_head(head, tmp_path, dtype=torch.float32)
    assert "lm_head.weight" not in load_file(tmp_path / "model.safetensors")
    back = load_head(tmp_path, target, dtype=torch.float32)
    torch.testing.assert_close(back.lm_head.weight, head.lm_head.weight)


@pytest.mark.parametrize("gamma", [1, 3])
def test_the_chain_drafter_with_an_eagle3_head_is_greedy_exact(target, gamma):
    settings = DecodeSettings(max_new_tokens=30, gamma=gamma)
    drafter = FeatureDrafter(random_head(target, kept=list(range(0, VOCAB, 2))), VOCAB)
    summary = list(speculative_decode(CachedDecoder(target, VOCAB), drafter, PROMPT, settings, fake_vocabulary()))[-1]
    assert isinstance(summary, Summary)
    assert list(summary.new_token_ids) == transformers_greedy(target, PROMPT, 30)
    assert summary.tally.rejections > 0


@pytest.mark.parametrize("shape", [TreeShape((3, 2)), TreeShape((3, 2, 2, 1), expanded=2)], ids=str)
def test_the_tree_drafter_with_an_eagle3_head_is_greedy_exact(target, shape):
    drafter = FeatureDrafter(random_head(target, kept=list(range(0, VOCAB, 2))), VOCAB, compiled=False)
    settings = replace(DecodeSettings(max_new_tokens=30), tree=shape)
    summary = list(speculative_decode(CachedDecoder(target, VOCAB), drafter, PROMPT, settings, fake_vocabulary()))[-1]
    assert list(summary.new_token_ids) == transformers_greedy(target, PROMPT, 30)


@torch.inference_mode()
def test_the_fast_path_step_drafts_what_the_heads_own_step_drafts(target):
    """The static-cache step (run eager here; compiled in the slow set): catch up, roll back, feed again, feed back."""
    head = random_head(target, kept=list(range(0, VOCAB, 2)))
    token_ids, features = torch.randint(0, VOCAB, (10,)), torch.randn(10, 96)
    got = steps_of(eager(FastHead(head)), head, token_ids, features, reference=False)
    expected = steps_of(None, head, token_ids, features, reference=True)
    for (predicted, logits), (want_predicted, want_logits) in zip(got, expected):
        torch.testing.assert_close(predicted, want_predicted, atol=2e-4, rtol=2e-4)
        torch.testing.assert_close(logits, want_logits, atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("gamma", [1, 3])
def test_speculation_with_the_fast_eagle3_head_equals_generate(target, gamma):
    head = random_head(target, kept=list(range(0, VOCAB, 2)))
    drafter = FeatureDrafter(head, VOCAB)
    drafter.fast = eager(FastHead(head))
    summary = list(
        speculative_decode(
            CachedDecoder(target, VOCAB), drafter, PROMPT, DecodeSettings(max_new_tokens=30, gamma=gamma), fake_vocabulary()
        )
    )[-1]
    assert list(summary.new_token_ids) == transformers_greedy(target, PROMPT, 30)
    assert summary.tally.rejections > 0


@pytest.mark.slow
def test_the_compiled_eagle3_step_matches_the_eager_one(target, tmp_path, monkeypatch):
    if compiler_missing(torch.device("cpu")):
        pytest.skip(compiler_missing(torch.device("cpu")))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    head = random_head(target, kept=list(range(0, VOCAB, 2)))
    token_ids, features = torch.randint(0, VOCAB, (10,)), torch.randn(10, 96)
    compiled = FastHead(head)
    assert set(compiled.warm_up().seconds) == {"compile"}, compiled.report.reason
    with torch.inference_mode():
        got = steps_of(compiled, head, token_ids, features, reference=False)
        expected = steps_of(eager(FastHead(head)), head, token_ids, features, reference=False)
    for (predicted, logits), (want_predicted, want_logits) in zip(got, expected):
        torch.testing.assert_close(predicted, want_predicted, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(logits, want_logits, atol=1e-4, rtol=1e-4)
    drafter = FeatureDrafter(head, VOCAB)
    drafter.fast = compiled
    summary = list(
        speculative_decode(
            CachedDecoder(target, VOCAB), drafter, PROMPT, DecodeSettings(max_new_tokens=30, gamma=2), fake_vocabulary()
        )
    )[-1]
    assert list(summary.new_token_ids) == transformers_greedy(target, PROMPT, 30)


def eager(fast: FastHead) -> FastHead:
    assert fast.engine == "eager"
    return fast


def steps_of(fast: FastHead | None, head, token_ids, features, reference: bool):
    """Catch up on six positions, roll back to four, feed two again, then one fed-back draft: (output, logits) of each."""
    if reference:
        cache = FeatureCache()

        def draft_step(tokens, inputs, cache):
            predicted = head.step(tokens, inputs, cache)[-1:]
            return predicted, head.logits(predicted)
    else:
        cache, draft_step = fast.new_cache(), fast.draft_step
    out = [draft_step(token_ids[:6], features[:6], cache)]
    cache.truncate(4)
    out.append(draft_step(token_ids[4:6], features[4:6], cache))
    out.append(draft_step(token_ids[6:7], head.fed_back(out[-1][0]), cache))
    return out


def test_a_tiny_fit_warm_starts_from_a_feature_head_and_stops_at_its_budget(target, tmp_path):
    from specviz.models.feature_head import head_from_target
    from specviz.training.distill.eagle3_fit import (
        Eagle3FitSettings,
        calibration_layers,
        fit_eagle3,
        head_from_feature_head,
        layers_read,
        teacher_rows,
    )
    from specviz.training.distill.feature_fit import target_features

    old = head_from_target(target, list(range(0, VOCAB, 2)), (-1, 1))
    generator = torch.Generator().manual_seed(0)
    sequences = [(torch.randint(0, VOCAB, (12,), generator=generator).tolist(), 4) for _ in range(12)]
    calibration = target_features(target, sequences[:4], calibration_layers(old, AUX), quiet=True)
    head, measured = head_from_feature_head(target, old, AUX, calibration)
    assert 0 < measured["fc_least_squares_r2"] <= 1 and not head.lm_head.weight.requires_grad
    # the tiny target is untied (as Qwen2.5-Coder-1.5B is): lm_head starts as its LM head's rows, not its embedding's,
    # and the fit's teacher reads the target's distribution through them
    torch.testing.assert_close(head.lm_head.weight, target.lm_head.weight[head.kept_ids])
    assert head.lm_head_from_target_head and not head.lm_head_from_embedding
    torch.testing.assert_close(teacher_rows(head), target.lm_head.weight[head.kept_ids])
    validation = target_features(target, sequences[:3], layers_read(AUX), quiet=True)
    settings = Eagle3FitSettings(batch_size=4, budget_s=0.5, checkpoint_s=1e9, validate_depths=3)
    log = fit_eagle3(head, target, sequences[3:], validation, settings, checkpoint=tmp_path, progress=lambda line: None)
    assert log.steps[0] == 0 and log.steps[-1] >= 1 and all(len(row) == 3 for row in log.validation_agreement)
    back = load_head(tmp_path, target, dtype=torch.float32)  # the checkpoint is the standard checkpoint, lm_head rebuilt
    torch.testing.assert_close(back.fc.weight, head.fc.weight.to(torch.bfloat16).float())
    assert "lm_head.weight" not in load_file(tmp_path / "model.safetensors")
    torch.testing.assert_close(back.lm_head.weight, target.lm_head.weight[head.kept_ids])
