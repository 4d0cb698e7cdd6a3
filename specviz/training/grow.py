"""Depth growth: a trained target becomes a deeper one that computes the same function, then trains on.

Each layer named in `after` is followed by a copy of itself whose two output projections (attention's
o_proj and the MLP's down_proj) start at zero, so the residual stream, and so the logits, are unchanged
at first (function-preserving growth, as in "stacking" of Gong et al. 2019 and SOLAR's depth up-scaling).
Training then gives the new layers work to do.

Why deeper and not wider: on a CPU a decoding step of a small model costs about the same per layer
whatever its width, so depth sets the target's step time and therefore τ, the draft's cost in target
steps. A deeper target makes the one-layer draft relatively cheaper, which raises the speedup ceiling.
"""

from __future__ import annotations

import copy

import torch
from transformers import LlamaForCausalLM


def deepen(model: LlamaForCausalLM, after: list[int]) -> LlamaForCausalLM:
    """In place: insert a zero-output copy of each layer listed in after; returns the model."""
    layers = []
    for index, layer in enumerate(model.model.layers):
        layers.append(layer)
        if index in after:
            twin = copy.deepcopy(layer)
            torch.nn.init.zeros_(twin.self_attn.o_proj.weight)
            torch.nn.init.zeros_(twin.mlp.down_proj.weight)
            layers.append(twin)
    for index, layer in enumerate(layers):
        layer.self_attn.layer_idx = index  # each layer finds its own slot in the KV cache
    model.model.layers = torch.nn.ModuleList(layers)
    model.config.num_hidden_layers = len(layers)
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = [model.config.layer_types[0]] * len(layers)
    return model
