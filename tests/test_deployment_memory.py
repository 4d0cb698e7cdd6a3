"""Memory from known shapes: weight bytes, KV-cache bytes per token (checked against a real cache), the peak estimate."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from specviz.deployment.memory import (
    LoadTimes,
    MemoryReport,
    ModelMemory,
    PairLoadTimes,
    bytes_per_element,
    estimated_memory_report,
    estimated_peak_bytes,
    forward_activation_bytes,
    kv_bytes_per_token,
    weight_bytes,
)
from tests.tiny import tiny_llama

TARGET = {
    "hidden_size": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "intermediate_size": 64,
    "vocab_size": 100,
}
DRAFT = {**TARGET, "num_hidden_layers": 1}


def test_bytes_per_element_by_name_or_dtype():
    assert bytes_per_element("bfloat16") == 2 and bytes_per_element("torch.float16") == 2
    assert bytes_per_element(torch.float32) == 4 and bytes_per_element(torch.bfloat16) == 2
    with pytest.raises(ValueError, match="Unknown dtype"):
        bytes_per_element("float8")


def test_weight_bytes_match_a_real_model_in_two_dtypes():
    model = tiny_llama(64)
    parameters = sum(p.numel() for p in model.parameters())
    assert weight_bytes(parameters, torch.float32) == sum(p.numel() * p.element_size() for p in model.parameters())
    assert weight_bytes(parameters, "bfloat16") == sum(p.numel() * 2 for p in model.parameters())


def test_kv_bytes_per_token_from_known_shapes():
    assert kv_bytes_per_token(TARGET, "float32") == 2 * 2 * 2 * 8 * 4, "2 × layers × kv_heads × (hidden / heads) × bytes"
    no_gqa = {k: v for k, v in TARGET.items() if k != "num_key_value_heads"}
    assert kv_bytes_per_token(no_gqa, "float32") == 2 * 2 * 4 * 8 * 4, "kv_heads default to the attention heads"
    assert kv_bytes_per_token({**TARGET, "head_dim": 16}, "bfloat16") == 2 * 2 * 2 * 16 * 2, "an explicit head_dim wins"
    gpt2 = {"n_embd": 64, "n_head": 4, "n_layer": 3, "vocab_size": 50}
    assert kv_bytes_per_token(gpt2, "float16") == 2 * 3 * 4 * 16 * 2, "GPT-2's field names"


def test_kv_bytes_per_token_match_a_real_cache():
    model = tiny_llama(64, layers=3)
    cache = DynamicCache(config=model.config)
    tokens = 11
    with torch.inference_mode():
        model(input_ids=torch.arange(tokens).view(1, -1), cache=cache, use_cache=True)
    cached = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert cached == tokens * kv_bytes_per_token(model.config, torch.float32)


def test_activation_and_peak_estimates_by_hand():
    # one position, 10 in context, float32: logits 100 × (4 + 4); one layer (4·32 + 2·64 + 2·2·8) × 4; scores 4 × 10 × 4
    assert forward_activation_bytes(TARGET, "float32", 1, 10) == 800 + 1152 + 160
    alone = estimated_peak_bytes(TARGET, 1000, "float32", 10)
    assert alone == 4000 + 256 * 10 + 2112
    # γ = 3: the target's cache holds 13 during the verify pass over 4 positions; the draft's 10
    verify = 4 * 100 * 8 + 4 * 288 * 4 + 4 * 4 * 13 * 4
    paired = estimated_peak_bytes(TARGET, 1000, "float32", 10, DRAFT, 500, gamma=3)
    assert paired == 4000 + 2000 + 256 * 13 + 128 * 10 + verify


def test_memory_report_adds_and_round_trips():
    target = ModelMemory.of("t", TARGET, 1000, "float32")
    draft = ModelMemory.of("d", DRAFT, 500, "float32")
    report = estimated_memory_report(target, draft, TARGET, DRAFT, "float32", 10, 3)
    assert report.autoregressive_peak_bytes == 8672 and report.speculative_peak_bytes == 19248
    assert report.added_bytes == 19248 - 8672
    assert report.added_fraction == pytest.approx((19248 - 8672) / 8672)
    for run, parts in report.peak_parts().items():
        assert sum(parts.values()) == getattr(report, f"{run}_peak_bytes"), f"the {run} bar must stack to its peak"
    assert MemoryReport.from_json(report.to_json()) == report
    assert report.to_json()["added_bytes"] == report.added_bytes


def test_cold_start_of_a_pair_loads_both():
    times = PairLoadTimes(LoadTimes(cold_s=5.0, warm_s=1.0), LoadTimes(cold_s=2.0, warm_s=0.5))
    assert times.autoregressive_cold_s == 5.0 and times.speculative_cold_s == 7.0
    assert PairLoadTimes.from_json(times.to_json()) == times
