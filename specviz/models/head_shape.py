"""What a head copies from its target's config (no torch here): its layer shapes and rope, read one way.

A transformers config object and a config.json dict are read alike, so the heads built for a loaded target
(feature_head.py, eagle3_head.py) and the export that reads a target's folder (deployment/export.py) agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def config_value(config: Any, key: str, default: Any = None) -> Any:
    """config[key] of a config.json dict, or config.key of a transformers config."""
    return config.get(key, default) if isinstance(config, dict) else getattr(config, key, default)


def rope_theta(config: Any) -> float:
    """RoPE's base θ: in `rope_parameters` since transformers 5, a top-level key before; Llama's 10000 if neither."""
    rope = config_value(config, "rope_parameters") or {}
    return float(rope.get("rope_theta", config_value(config, "rope_theta", 10000.0)))


@dataclass(frozen=True)
class TargetLayerShape:
    """The fields every head's shape starts with: the target's layer shapes (the head's layer copies them), rope and
    vocabulary. A head's shape adds which of the target's hidden states it reads, as `feature_layers`."""

    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    rope_theta: float
    rms_norm_eps: float
    vocab_size: int  # the target's: logits keep full width, −∞ outside the draft's ids

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def feature_width(self) -> int:
        """The width of what the target hands the head: one hidden state per feature layer, side by side."""
        return self.hidden * len(self.feature_layers)  # type: ignore[attr-defined]  (each head's shape names them)


def target_layer_shape(config: Any) -> dict[str, Any]:
    """The target's layer shapes, rope and vocabulary: the fields every head's shape takes from it."""
    return {
        "hidden": config_value(config, "hidden_size"),
        "heads": config_value(config, "num_attention_heads"),
        "kv_heads": config_value(config, "num_key_value_heads"),
        "ffn": config_value(config, "intermediate_size"),
        "rope_theta": rope_theta(config),
        "rms_norm_eps": config_value(config, "rms_norm_eps"),
        "vocab_size": config_value(config, "vocab_size"),
    }
