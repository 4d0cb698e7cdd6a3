"""What a pair needs in memory, known before any weight is read: configs, parameter counts, the fit check.

Loading a model too big for the machine does not fail politely: the kernel's OOM killer ends the whole
server, for every visitor. So every load first builds each model's config (a local folder's config.json,
the shape recorded under `architectures:` in models.yaml, or the hub's config.json, a few kB), counts its
parameters on the meta device (nothing allocated), and refuses in one sentence when they would not fit.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig

from specviz.models.catalogue import Architecture, Catalogue

OVERHEAD_BYTES = 512 * 2**20  # activations, KV cache, allocator slack
MEMORY_SHARE = 0.8  # refuse to use more than this share of what is available


def config_of(architecture: Architecture) -> PretrainedConfig:
    """transformers' configuration for a recorded architecture, in its family's own field names."""
    a = architecture
    common = {"vocab_size": a.vocab_size, "tie_word_embeddings": a.tie_embeddings, "bos_token_id": None, "eos_token_id": None}
    if a.family == "gpt2":
        fields = {"n_embd": a.hidden_size, "n_layer": a.layers, "n_head": a.heads, "n_inner": a.intermediate_size}
        return AutoConfig.for_model("gpt2", n_positions=a.context, **fields, **common)
    fields = {
        "hidden_size": a.hidden_size,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "intermediate_size": a.intermediate_size,
        "max_position_embeddings": a.context,
    }
    if a.family in ("llama", "qwen2"):
        fields["num_key_value_heads"] = a.kv_heads or a.heads
    return AutoConfig.for_model(a.family, **fields, **common)


def recorded_config(reference: str, catalogue: Catalogue) -> PretrainedConfig | None:
    """A local folder's own config.json, or the architecture recorded for a hub id; None if neither."""
    if Path(reference).is_dir():
        return AutoConfig.from_pretrained(reference)
    architecture = catalogue.architecture(reference)
    return config_of(architecture) if architecture else None


def config_before_loading(reference: str, catalogue: Catalogue) -> PretrainedConfig | None:
    """The recorded config, else the hub's config.json (a few kB); None when none can be had."""
    config = recorded_config(reference, catalogue)
    if config is not None:
        return config
    try:
        return AutoConfig.from_pretrained(reference)
    except (OSError, ValueError, KeyError):
        return None  # loading itself will say, in one sentence, why the model cannot be had


def count_parameters(config: PretrainedConfig) -> int:
    """Parameters of the model a config describes, counted on the meta device (nothing allocated)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def available_bytes(device: torch.device) -> int:
    """Free memory where the weights will live: the GPU's, or the machine's available RAM."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def needed_bytes(parameters: int, dtype: torch.dtype) -> int:
    """Weights in the dtype, plus a fixed allowance for activations, caches and slack."""
    return parameters * dtype.itemsize + OVERHEAD_BYTES


def too_big_sentence(
    name: str,
    target_parameters: int,
    draft_parameters: int,
    dtype: torch.dtype,
    device: torch.device,
    available: int | None = None,
    extra_bytes: int = 0,
    extra_what: str = "",
) -> str | None:
    """The one-sentence refusal when both models (and `extra_bytes` of caches and activations) would not fit here."""
    available = available_bytes(device) if available is None else available
    needed = needed_bytes(target_parameters + draft_parameters, dtype) + extra_bytes
    if needed <= MEMORY_SHARE * available:
        return None
    dtype_name = str(dtype).replace("torch.", "")
    hint = (
        " Try --dtype bfloat16, or a machine with more memory." if dtype == torch.float32 else " Try a machine with more memory."
    )
    return (
        f"{name} will not fit here: {target_parameters / 1e9:.2f}B + {draft_parameters / 1e9:.2f}B parameters in "
        f"{dtype_name}{extra_what} need about {needed / 2**30:.1f} GiB, and {device.type} has {available / 2**30:.1f} GiB available.{hint}"
    )
