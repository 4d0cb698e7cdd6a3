"""Heads in EAGLE-3's stored form with random weights, built from a target's config.json: no training, no download."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file


def random_eagle3_head(
    target_dir: Path, out: Path, draft_ids: list[int], layer_ids: list[int] | None = None, seed: int = 0, lm_head: bool = True
) -> Path:
    """A head of the target's layer shapes over `draft_ids`, stored as specviz keeps one (config.json + model.safetensors)."""
    config = json.loads((Path(target_dir) / "config.json").read_text())
    hidden, ffn = config["hidden_size"], config["intermediate_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    attn, kv = config["num_attention_heads"] * head_dim, config["num_key_value_heads"] * head_dim
    generator = torch.Generator().manual_seed(seed)
    random = lambda *shape: torch.randn(*shape, generator=generator) * 0.02
    tensors = {
        "fc.weight": random(hidden, 3 * hidden),
        "midlayer.input_layernorm.weight": torch.ones(hidden),
        "midlayer.hidden_norm.weight": torch.ones(hidden),
        "midlayer.self_attn.q_proj.weight": random(attn, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": random(kv, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": random(kv, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": random(hidden, attn),
        "midlayer.post_attention_layernorm.weight": torch.ones(hidden),
        "midlayer.mlp.gate_proj.weight": random(ffn, hidden),
        "midlayer.mlp.up_proj.weight": random(ffn, hidden),
        "midlayer.mlp.down_proj.weight": random(hidden, ffn),
        "norm.weight": torch.ones(hidden),
        "d2t": torch.tensor(draft_ids, dtype=torch.long) - torch.arange(len(draft_ids)),
    }
    if lm_head:
        tensors["lm_head.weight"] = random(len(draft_ids), hidden)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, out / "model.safetensors")
    stored = {"draft_vocab_size": len(draft_ids)}
    if layer_ids is not None:
        stored["eagle_aux_hidden_state_layer_ids"] = layer_ids
    (out / "config.json").write_text(json.dumps(stored))
    return out
