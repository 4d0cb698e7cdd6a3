"""Tiny models built from a config inside the tests: nothing is downloaded."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specviz.drafting.drafters import ModelDrafter
from specviz.engine import (
    CachedDecoder,
    Cycle,
    DecodeSettings,
    RunStarted,
    SamplingSettings,
    Summary,
    Vocabulary,
    autoregressive_decode,
    speculative_decode,
)
from specviz.engine.tree_shape import TreeShape
from specviz.process.machine_load import OtherLoad
from specviz.run.pair_info import PairInfo
from specviz.run.trace import Trace

GROUPED = {"hidden": 128, "layers": 2, "kv_heads": 2}  # grouped key/value heads (4 query heads, 2 key/value), as SmolLM2 has


def small_shape(vocab_size: int, hidden: int = 32, layers: int = 2, kv_heads: int = 4) -> dict[str, int]:
    """A small decoder's shape in transformers' config keywords: 4 query heads, an MLP twice the width, 256 positions."""
    return {
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": kv_heads,
        "max_position_embeddings": 256,
    }


def small_llama_config(vocab_size: int, hidden: int = 32, layers: int = 2, kv_heads: int = 4) -> LlamaConfig:
    """A small Llama's config (small_shape), untied, with no special tokens."""
    shape = small_shape(vocab_size, hidden, layers, kv_heads)
    return LlamaConfig(**shape, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def tiny_llama(
    vocab_size: int = 64, seed: int = 0, hidden: int = 32, layers: int = 2, sharpness: float = 1.0
) -> LlamaForCausalLM:
    """A random Llama; sharpness > 1 scales the output layer so its distributions are peaked, not near-uniform."""
    config = small_llama_config(vocab_size, hidden, layers)
    generator = torch.Generator().manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5 if parameter.dim() > 1 else parameter)
        model.lm_head.weight.mul_(sharpness)
    return model


class FakeTokenizer:
    """Token i is the text "<i>"; enough for the engine, which only decodes."""

    def __init__(self, eos_token_id: int | None = None) -> None:
        self.eos_token_id = eos_token_id

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(f"<{i}>" for i in ids)


def fake_vocabulary(eos_token_id: int | None = None) -> Vocabulary:
    return Vocabulary(FakeTokenizer(eos_token_id))


TRACE_VOCAB = 32


def record_tiny_trace(tree: TreeShape | None = None, verification: str = "exact") -> Trace:
    """A sampled speculative run of two tiny models and its baseline, recorded as the app records one: a chain of
    γ = 3, or the token tree of shape `tree` (its cycles' positions are the tree's nodes, `parents` set); a chain's
    cycles carry every verifier's verdict on their drafts, its own judged by `verification`."""
    target, draft = tiny_llama(TRACE_VOCAB, seed=0), tiny_llama(TRACE_VOCAB, seed=1, layers=1)
    settings = DecodeSettings(
        max_new_tokens=20,
        gamma=3,
        sampling=SamplingSettings(temperature=1.0),
        seed=2,
        tree=tree,
        verification=verification,
        compare_verifiers=tree is None,
    )
    recorded = Trace(pair=PairInfo(name="tiny"), prompt="<1><2><3>", other_load=OtherLoad(0.12, 0.5))
    target_decoder = CachedDecoder(target, TRACE_VOCAB)
    if tree is None:
        events = speculative_decode(
            target_decoder, ModelDrafter(CachedDecoder(draft, TRACE_VOCAB)), [1, 2, 3], settings, fake_vocabulary()
        )
    else:
        drafter = ModelDrafter(CachedDecoder(draft, TRACE_VOCAB))
        events = speculative_decode(target_decoder, drafter, [1, 2, 3], settings, fake_vocabulary())
    for event in events:
        if isinstance(event, RunStarted):
            recorded.started = event
        elif isinstance(event, Cycle):
            recorded.cycles.append(event)
        elif isinstance(event, Summary):
            recorded.summary = event
    events = list(autoregressive_decode(CachedDecoder(target, TRACE_VOCAB), [1, 2, 3], settings, fake_vocabulary()))
    recorded.baseline_steps = events[1:-1]
    recorded.baseline = events[-1]
    return recorded


def pass_and_steps(decoder, tokens: list[int]):
    """The logits of `tokens` fed as one verify pass, then (after rolling back) one step at a time: equal in every
    row-independent form, which is what keeps greedy speculation exact."""  # → (len(tokens), vocab) × 2
    start = decoder.cached_length
    together = decoder.feed(tokens, keep_last=len(tokens))
    decoder.truncate(start)
    return together, torch.cat([decoder.feed([token]) for token in tokens])


def grouped_llama(seed: int, noise: float = 0.0, vocab: int = 64) -> LlamaForCausalLM:
    """A small Llama with grouped key/value heads and peaked next-token distributions (greedy far from ties in
    float32), over `vocab` tokens; `noise` perturbs a copy of seed's weights, a draft that agrees with it often but not always."""
    config = small_llama_config(vocab, **GROUPED)
    model = LlamaForCausalLM(config).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2)
        model.lm_head.weight.mul_(3.0)
        noisy = torch.Generator().manual_seed(seed + 100)
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=noisy) * noise)
    return model
