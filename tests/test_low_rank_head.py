"""A low-rank feature head: the target's last layer plus a trained rank-r change, shipped as the change alone."""

import torch

from specviz.drafting.drafters import FeatureDrafter
from specviz.engine import CachedDecoder, DecodeSettings, autoregressive_decode, speculative_decode
from specviz.models.feature_head import FeatureHead, head_from_target, load_head, save_head
from specviz.models.low_rank import LowRankLinear, merged_weight
from tests.tiny import fake_vocabulary, tiny_llama

VOCAB = 64


def scrambled_low_rank_head(target, rank: int = 4) -> FeatureHead:
    head = head_from_target(target, list(range(0, VOCAB, 2)), rank=rank).eval()
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return head


def test_starts_as_the_full_head_but_for_the_unread_embedding():
    """B starts at zero: each matrix is the target's (o and down silent), as the full head starts."""
    target = tiny_llama(VOCAB, seed=0)
    low, full = head_from_target(target, list(range(VOCAB)), rank=4), head_from_target(target, list(range(VOCAB)))
    for name in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
        assert isinstance(getattr(low, name), LowRankLinear)
        torch.testing.assert_close(getattr(low, name).weight, getattr(full, name).weight, rtol=0, atol=0)
    hidden = full.shape.hidden
    torch.testing.assert_close(low.fuse.weight[:, hidden:], full.fuse.weight[:, hidden:], rtol=0, atol=0)


def test_ships_the_change_alone_and_loads_back_to_the_same_matrices(tmp_path):
    target = tiny_llama(VOCAB, seed=0)
    head = scrambled_low_rank_head(target)
    save_head(head, tmp_path)
    stored = __import__("safetensors.torch", fromlist=["load_file"]).load_file(tmp_path / "feature_head.safetensors")
    assert not any(key.endswith(".weight") and key.split(".")[0] in ("q_proj", "gate_proj", "fuse") for key in stored)
    assert stored["q_proj.lora_a"].shape == (4, 32)
    loaded = load_head(tmp_path, target, dtype=torch.float32)
    for name, module in head.named_children():
        if isinstance(module, LowRankLinear):  # rebuilt from the target's matrix and the bf16-rounded change
            parts = [stored[f"{name}.{part}"] for part in ("scale", "lora_a", "lora_b")]
            base = module.base
            torch.testing.assert_close(getattr(loaded, name).weight, merged_weight(base, *parts), rtol=0, atol=0)
            torch.testing.assert_close(getattr(loaded, name).weight, module.weight, rtol=0.05, atol=0.05)


def test_the_fuse_drafts_as_its_factors_and_stays_unquantised_in_every_form(tmp_path):
    """The fuse's base passes the last feature through ([0 | I]): loaded for drafting it runs as s·f + B·A x, which
    equals the merged matrix, and a weight-only form (int8, int4) leaves it as it is while it packs the other matrices."""
    from specviz.kernels.weight_only import Int8WeightOnly
    from specviz.models.feature_head import head_in_form
    from specviz.models.low_rank import PassThroughLowRank

    target = tiny_llama(VOCAB, seed=0)
    save_head(scrambled_low_rank_head(target), tmp_path)
    head = load_head(tmp_path, target, dtype=torch.float32)
    assert isinstance(head.fuse, PassThroughLowRank)
    x = torch.randn(3, 5, head.shape.hidden + head.shape.feature_width, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(head.fuse(x), torch.nn.functional.linear(x, head.fuse.weight), rtol=1e-5, atol=1e-5)
    head_in_form(head, "int8")
    assert isinstance(head.fuse, PassThroughLowRank) and isinstance(head.q_proj, Int8WeightOnly)


def test_reads_the_target_lm_head_rows_not_its_embedding_when_untied():
    target = tiny_llama(VOCAB, seed=0)  # tie_word_embeddings=False
    kept = [1, 5, 9]
    head = head_from_target(target, kept)
    torch.testing.assert_close(head.head_weight, target.lm_head.weight[kept].float(), rtol=0, atol=0)


def test_greedy_speculation_with_a_loaded_low_rank_head_equals_the_target_alone(tmp_path):
    target = tiny_llama(VOCAB, seed=0, sharpness=4.0)
    save_head(scrambled_low_rank_head(target), tmp_path)
    head = load_head(tmp_path, target)
    prompt, settings = [3, 17, 5, 42, 8], DecodeSettings(max_new_tokens=24, gamma=3)
    plain = list(autoregressive_decode(CachedDecoder(target, VOCAB), prompt, settings, fake_vocabulary()))[-1]
    drafter = FeatureDrafter(head, VOCAB)
    spec = list(speculative_decode(CachedDecoder(target, VOCAB), drafter, prompt, settings, fake_vocabulary()))[-1]
    assert spec.new_token_ids == plain.new_token_ids


def test_a_continued_head_trains_its_change_alone_and_saves_it_compact(tmp_path):
    """`distill --init-head` on a low-rank head: loaded trainable, its matrices stay base (frozen) + s, A, B, compute
    what the drafting load computes, and save as the change again, not as full matrices."""
    target = tiny_llama(VOCAB, seed=0)
    save_head(scrambled_low_rank_head(target), tmp_path / "first")
    drafting = load_head(tmp_path / "first", target, dtype=torch.float32)
    continued = load_head(tmp_path / "first", target, dtype=torch.float32, trainable=True)
    trained = {name for name, module in continued.named_children() if isinstance(module, LowRankLinear)}
    assert trained >= {"q_proj", "o_proj", "down_proj", "fuse"}
    for name in trained:
        torch.testing.assert_close(getattr(continued, name).weight, getattr(drafting, name).weight, rtol=1e-6, atol=1e-6)
        assert not any(parameter_name == "base" for parameter_name, _ in getattr(continued, name).named_parameters())
    save_head(continued, tmp_path / "second")
    stored = __import__("safetensors.torch", fromlist=["load_file"]).load_file(tmp_path / "second" / "feature_head.safetensors")
    assert "q_proj.lora_a" in stored and "q_proj.weight" not in stored
