"""EAGLE-3's standard checkpoint config, written in one place (no torch here): the keys SpecForge's
`LlamaForCausalLMEagle3` has and llama.cpp's converter, vLLM and SGLang read. specviz's stored head
(models/eagle3_head.py) and the export (deployment/export.py) each add their own keys to it."""

from __future__ import annotations

from typing import Any, Protocol

ARCHITECTURE = "LlamaForCausalLMEagle3"  # SpecForge's name: llama.cpp and SGLang register it, vLLM maps it
LAYER_IDS_KEY = "eagle_aux_hidden_state_layer_ids"  # llama.cpp's and vLLM's key (id k: the input of layer k)
# specviz's keys: lm_head rows that are the target's own are not shipped (rebuilt at load), and the config says whose:
# the embedding's (a tied target, such as SmolLM2) or the LM head's (an untied one, such as Qwen2.5-Coder-1.5B)
LM_HEAD_FROM_EMBEDDING = "specviz_lm_head_from_target_embedding"
LM_HEAD_FROM_TARGET_HEAD = "specviz_lm_head_from_target_lm_head"


def default_aux_layers(layers: int) -> tuple[int, ...]:
    """vLLM's and SpecForge's default low/mid/high: the residual stream entering layers 2, N//2 and N−3."""
    return (2, layers // 2, layers - 3)


class StandardShape(Protocol):
    """What the standard config says of a head: its own widths, the target's, and the target layers it reads."""

    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    vocab_size: int  # the target's
    draft_vocab_size: int
    target_hidden: int
    aux_layers: tuple[int, ...]  # id k: the input of target layer k


def standard_config(shape: StandardShape, dtype: str) -> dict[str, Any]:
    """A one-layer Llama with EAGLE-3's keys: the draft vocabulary, the target's width and the layers it reads."""
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "llama",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.ffn,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": shape.rms_norm_eps,
        "rope_theta": shape.rope_theta,
        "vocab_size": shape.vocab_size,
        "draft_vocab_size": shape.draft_vocab_size,
        "target_hidden_size": shape.target_hidden,
        LAYER_IDS_KEY: list(shape.aux_layers),
        "tie_word_embeddings": False,  # else SGLang reads lm_head from the embedding
        "torch_dtype": dtype,
    }
