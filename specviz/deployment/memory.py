"""Memory of a pair: weight bytes, KV-cache bytes per token, a run's peak, and what speculation adds.

Weights: parameters × bytes per element. KV cache per token: 2 (keys, values) × layers × kv_heads × head_dim ×
bytes. On a GPU the peak of a run is CUDA's allocator peak (specviz.deployment.device); on
a CPU it is estimated from the tensors a run holds at its widest point (`estimated_peak_bytes`):

  weights of every model run
  + each model's KV cache at the longest length it reaches (the prompt, every new token, and for the target
    during a verify pass also the γ drafts fed before the rollback)
  + the largest forward pass's activations (`forward_activation_bytes`): logits for every scored position in
    the model's dtype and the engine's float32 copy, one layer's hidden, attention and MLP tensors (inference
    frees each layer's before the next), and eager attention's scores, heads × positions × length.

The estimate leaves out the allocator's slack, the tokenizer and Python itself, so it is a floor, not a ceiling.
Configurations are HF config objects or their dicts, GPT-2 field names included.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

BYTES_PER_ELEMENT = {"float64": 8, "float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "int8": 1, "uint8": 1}
FLOAT32_BYTES = 4  # the engine casts the logits it keeps to float32

Config = Any  # an HF PretrainedConfig, or its dict


def bytes_per_element(dtype: Any) -> int:
    """Bytes of one element of a dtype: a torch.dtype (its itemsize) or a name such as "bfloat16" or "torch.float16"."""
    itemsize = getattr(dtype, "itemsize", None)
    if isinstance(itemsize, int):
        return itemsize
    name = str(dtype).removeprefix("torch.")
    if name not in BYTES_PER_ELEMENT:
        raise ValueError(f"Unknown dtype {dtype!r}: expected one of {', '.join(BYTES_PER_ELEMENT)}")
    return BYTES_PER_ELEMENT[name]


def _field(config: Config, *names: str) -> Any:
    """The first of these fields the config sets (HF object or dict), else None."""
    for name in names:
        value = config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)
        if value is not None:
            return value
    return None


@dataclass(frozen=True)
class Shape:
    """What memory depends on in a causal LM's configuration."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int

    @classmethod
    def of(cls, config: Config) -> Shape:
        """Read a config: kv_heads default to the attention heads, head_dim to hidden / heads (GPT-2 names too)."""
        hidden = _field(config, "hidden_size", "n_embd", "d_model")
        heads = _field(config, "num_attention_heads", "n_head")
        layers = _field(config, "num_hidden_layers", "n_layer")
        vocab = _field(config, "vocab_size")
        if None in (hidden, heads, layers, vocab):
            raise ValueError("The config lacks one of hidden_size, num_attention_heads, num_hidden_layers, vocab_size")
        return cls(
            layers=int(layers),
            heads=int(heads),
            kv_heads=int(_field(config, "num_key_value_heads") or heads),
            head_dim=int(_field(config, "head_dim") or hidden // heads),
            hidden=int(hidden),
            intermediate=int(_field(config, "intermediate_size", "n_inner") or 4 * hidden),
            vocab=int(vocab),
        )


def weight_bytes(parameters: int, dtype: Any) -> int:
    """Bytes of a model's weights: parameters × bytes per element."""
    return parameters * bytes_per_element(dtype)


def kv_bytes_per_token(config: Config, dtype: Any) -> int:
    """Bytes one token adds to a model's KV cache: 2 × layers × kv_heads × head_dim × bytes."""
    shape = Shape.of(config)
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * bytes_per_element(dtype)


def forward_activation_bytes(config: Config, dtype: Any, positions: int, length: int) -> int:
    """Transient bytes of one forward over `positions` new tokens with `length` tokens in context (see the module doc)."""
    s, size = Shape.of(config), bytes_per_element(dtype)
    logits = positions * s.vocab * (size + FLOAT32_BYTES)
    layer = positions * (4 * s.hidden + 2 * s.intermediate + 2 * s.kv_heads * s.head_dim) * size
    scores = s.heads * positions * length * size
    return logits + layer + scores


def estimated_peak_bytes(
    target_config: Config,
    target_parameters: int,
    dtype: Any,
    longest_length: int,
    draft_config: Config | None = None,
    draft_parameters: int = 0,
    gamma: int = 0,
) -> int:
    """A run's peak from its tensors: the target alone (no draft), or the pair verifying γ + 1 positions."""
    if draft_config is None:
        return (
            weight_bytes(target_parameters, dtype)
            + kv_bytes_per_token(target_config, dtype) * longest_length
            + forward_activation_bytes(target_config, dtype, 1, longest_length)
        )
    target_length = longest_length + gamma  # the drafts sit in the target's cache until the rollback
    verify = forward_activation_bytes(target_config, dtype, gamma + 1, target_length)
    draft_step = forward_activation_bytes(draft_config, dtype, 1, longest_length)
    return (
        weight_bytes(target_parameters, dtype)
        + weight_bytes(draft_parameters, dtype)
        + kv_bytes_per_token(target_config, dtype) * target_length
        + kv_bytes_per_token(draft_config, dtype) * longest_length
        + max(verify, draft_step)
    )


@dataclass(frozen=True)
class ModelMemory:
    """One model's footprint: its weights, and what each token adds to its KV cache."""

    reference: str
    parameters: int
    weight_bytes: int
    kv_bytes_per_token: int

    @classmethod
    def of(cls, reference: str, config: Config, parameters: int, dtype: Any) -> ModelMemory:
        return cls(reference, parameters, weight_bytes(parameters, dtype), kv_bytes_per_token(config, dtype))


@dataclass(frozen=True)
class MemoryReport:
    """A pair's memory: each model, and the peak of an autoregressive run against a speculative one."""

    target: ModelMemory
    draft: ModelMemory
    autoregressive_peak_bytes: int
    speculative_peak_bytes: int
    peak_source: str  # "cuda max_memory_allocated" or "estimated from tensors"

    @property
    def added_bytes(self) -> int:
        """What speculation adds to the peak: the draft's weights and cache, the verify pass's activations."""
        return self.speculative_peak_bytes - self.autoregressive_peak_bytes

    @property
    def added_fraction(self) -> float | None:
        """added_bytes over the autoregressive peak (0.2 is 20 %)."""
        return self.added_bytes / self.autoregressive_peak_bytes if self.autoregressive_peak_bytes else None

    def peak_parts(self) -> dict[str, dict[str, int]]:
        """Each peak split into weights and the rest (KV caches and activations), for a stacked bar chart."""
        target, draft = self.target.weight_bytes, self.draft.weight_bytes
        return {
            "autoregressive": {"target weights": target, "KV cache, activations": self.autoregressive_peak_bytes - target},
            "speculative": {
                "target weights": target,
                "draft weights": draft,
                "KV cache, activations": self.speculative_peak_bytes - target - draft,
            },
        }

    def to_json(self) -> dict:
        """What `run --json` carries as `memory`."""
        return {**asdict(self), "added_bytes": self.added_bytes, "added_fraction": self.added_fraction}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MemoryReport:
        return cls(
            ModelMemory(**data["target"]),
            ModelMemory(**data["draft"]),
            data["autoregressive_peak_bytes"],
            data["speculative_peak_bytes"],
            data["peak_source"],
        )


def estimated_memory_report(
    target: ModelMemory,
    draft: ModelMemory,
    target_config: Config,
    draft_config: Config,
    dtype: Any,
    longest_length: int,
    gamma: int,
) -> MemoryReport:
    """A MemoryReport whose peaks are estimated from the tensors (a CPU has no allocator peak to read)."""
    alone = estimated_peak_bytes(target_config, target.parameters, dtype, longest_length)
    paired = estimated_peak_bytes(target_config, target.parameters, dtype, longest_length, draft_config, draft.parameters, gamma)
    return MemoryReport(target, draft, alone, paired, "estimated from tensors")


@dataclass(frozen=True)
class LoadTimes:
    """One model's load time: cold (a fresh process, from disk) and warm (again, files in the page cache; None where
    the model was not read a second time: the app loads each model once)."""

    cold_s: float
    warm_s: float | None = None


@dataclass(frozen=True)
class PairLoadTimes:
    """Both models' load times; a speculative deployment loads both before its first token."""

    target: LoadTimes
    draft: LoadTimes

    @property
    def autoregressive_cold_s(self) -> float:
        return self.target.cold_s

    @property
    def speculative_cold_s(self) -> float:
        """Target then draft, loaded one after the other as `load_pair` does."""
        return self.target.cold_s + self.draft.cold_s

    def to_json(self) -> dict:
        """What `run --json` carries as `load_s`."""
        return {"target": asdict(self.target), "draft": asdict(self.draft), "speculative_cold_s": self.speculative_cold_s}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PairLoadTimes:
        return cls(LoadTimes(**data["target"]), LoadTimes(**data["draft"]))
