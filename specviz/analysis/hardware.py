"""Hardware what-if: τ and ν of a pair's real architectures on this device (random weights for hub models).

The cost of a forward pass depends on a model's shape, dtype and device, not on its weights, so a hub
model is built from its recorded configuration (models.yaml, `architectures:`) with random weights; a local
folder (a bundled pair) is loaded with its own weights. Each is timed as the engine runs it (specviz.analysis.timing). Combined with an α
(given, or scored on local weights) it predicts the speedup on this machine.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from specviz.analysis.hardware_cache import cache_path, hardware_sentence, load_saved, save
from specviz.analysis.timing import StepTimes, measure_step_times, predicted
from specviz.deployment.memory import forward_activation_bytes, kv_bytes_per_token
from specviz.models.catalogue import Architecture, Catalogue, Pair
from specviz.models.loading import choose_device, choose_dtype, is_local

ALPHAS = (0.5, 0.6, 0.7, 0.8, 0.9)  # what a report predicts at, when no α is given
OVERHEAD_BYTES = 512 * 2**20  # activations, KV cache, allocator slack
MEMORY_SHARE = 0.8  # refuse to use more than this share of what is available
CONTEXT = 64  # tokens in the cache when a step is timed


class HardwareError(RuntimeError):
    """The pair cannot be measured here (unknown architecture, too big): one sentence for the user."""


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


def config_for(reference: str, catalogue: Catalogue) -> PretrainedConfig:
    """A local folder's own config.json, or the architecture recorded for a hub id."""
    if is_local(reference):
        return AutoConfig.from_pretrained(reference)
    architecture = catalogue.architecture(reference)
    if architecture is None:
        raise HardwareError(f"No architecture recorded for {reference}: add it under `architectures:` in models.yaml.")
    return config_of(architecture)


def count_parameters(config: PretrainedConfig) -> int:
    """Parameters of the model a config describes, counted on the meta device (nothing allocated)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def build_random(config: PretrainedConfig, dtype: torch.dtype, device: torch.device, seed: int = 0) -> PreTrainedModel:
    """The architecture with random weights, in the pair's dtype, on the device."""
    torch.manual_seed(seed)  # only the weights' values depend on it, and they do not change the timings
    return AutoModelForCausalLM.from_config(config, dtype=dtype).to(device).eval()


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


@dataclass(frozen=True)
class Plan:
    """What measuring a pair here would take, known before any weight is allocated."""

    pair: str
    target: str
    draft: str
    target_config: PretrainedConfig
    draft_config: PretrainedConfig
    target_parameters: int
    draft_parameters: int
    device: torch.device
    dtype: torch.dtype

    @property
    def needed_bytes(self) -> int:
        return (self.target_parameters + self.draft_parameters) * self.dtype.itemsize + OVERHEAD_BYTES


def plan(name: str, pair: Pair, catalogue: Catalogue, device: torch.device | None = None, dtype: str | None = None) -> Plan:
    device = device or choose_device()
    target_config, draft_config = config_for(pair.target_ref, catalogue), config_for(pair.draft_ref, catalogue)
    return Plan(
        name,
        pair.target,
        pair.draft,
        target_config,
        draft_config,
        count_parameters(target_config),
        count_parameters(draft_config),
        device,
        choose_dtype(device, dtype or pair.dtype),
    )


def batch_bytes(p: Plan, batch: int, gamma: int, context: int = CONTEXT) -> int:
    """What timing at this batch size holds beyond the weights: both KV caches over context + γ + 1 tokens for every
    sequence, and the verify pass's activations over B·(γ + 1) positions (specviz.deployment.memory)."""
    length = context + gamma + 1
    kv = batch * length * (kv_bytes_per_token(p.target_config, p.dtype) + kv_bytes_per_token(p.draft_config, p.dtype))
    return kv + batch * forward_activation_bytes(p.target_config, p.dtype, gamma + 1, length)


def check_fits(p: Plan, available: int | None = None, extra_bytes: int = 0, extra_what: str = "") -> None:
    """Refuse, in one sentence, when both models (and `extra_bytes` of KV cache and activations) would not fit here."""
    available = available_bytes(p.device) if available is None else available
    needed = p.needed_bytes + extra_bytes
    if needed > MEMORY_SHARE * available:
        dtype = str(p.dtype).replace("torch.", "")
        hint = (
            " Try --dtype bfloat16, or a machine with more memory."
            if p.dtype == torch.float32
            else " Try a machine with more memory."
        )
        raise HardwareError(
            f"{p.pair} will not fit here: {p.target_parameters / 1e9:.2f}B + {p.draft_parameters / 1e9:.2f}B parameters in "
            f"{dtype}{extra_what} need about {needed / 2**30:.1f} GiB, and {p.device.type} has {available / 2**30:.1f} GiB available.{hint}"
        )


def build_models(p: Plan) -> tuple[PreTrainedModel, PreTrainedModel]:
    """Target and draft as timed: a local folder's own weights (a bundled pair), else the architecture with random weights."""

    def build(reference: str, config: PretrainedConfig, seed: int) -> PreTrainedModel:
        if is_local(reference):
            return AutoModelForCausalLM.from_pretrained(reference, dtype=p.dtype).to(p.device).eval()
        return build_random(config, p.dtype, p.device, seed=seed)

    return build(p.target, p.target_config, 0), build(p.draft, p.draft_config, 1)


def weights_of(p: Plan) -> str:
    """What `build_models` times: the real weights, random weights of the real architectures, or one of each."""
    local = [is_local(reference) for reference in (p.target, p.draft)]
    if all(local):
        return "real (local folders)"
    return "random (real architectures)" if not any(local) else "real where a local folder, else random"


def vocab_of(p: Plan) -> int:
    return min(p.target_config.vocab_size, p.draft_config.vocab_size)


def measure(
    p: Plan,
    gamma: int,
    repeats: int = 10,
    context: int = CONTEXT,
    models: tuple[PreTrainedModel, PreTrainedModel] | None = None,
) -> StepTimes:
    """Time a draft step, a target step and a verify pass (on `models`, else on models built for this plan)."""
    target, draft = models or build_models(p)
    try:
        return measure_step_times(target, draft, vocab_of(p), gamma, context=context, repeats=repeats)
    finally:
        del target, draft


def report(p: Plan, times: StepTimes, alpha: float | None, alpha_source: str | None) -> dict:
    """The JSON of `hardware`: sizes, timings, τ, ν and what they predict (through measures_of)."""
    m = predicted(times, alpha)
    return {
        "pair": p.pair,
        "target": p.target,
        "draft": p.draft,
        "device": str(p.device),
        "device_name": device_name(p.device),
        "threads": torch.get_num_threads() if p.device.type == "cpu" else None,
        "dtype": str(p.dtype).replace("torch.", ""),
        "weights": weights_of(p),
        "target_parameters": p.target_parameters,
        "draft_parameters": p.draft_parameters,
        "gamma": times.gamma,
        "draft_step_ms": 1000 * times.draft_step_s,
        "target_step_ms": 1000 * times.target_step_s,
        "verify_ms": 1000 * times.verify_s,
        "tau": m.tau,
        "verify_cost": m.verify_cost,
        "alpha": alpha,
        "alpha_source": alpha_source,
        "predicted_speedup": m.predicted_with_verify_cost,
        "predicted_speedup_leviathan": m.predicted_speedup,
        "best_gamma": m.best_gamma,
        "best_speedup": m.best_speedup,
        "predictions": [prediction_at(times, a) for a in ALPHAS],
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def prediction_at(times: StepTimes, alpha: float) -> dict:
    m = predicted(times, alpha)
    return {
        "alpha": alpha,
        "predicted_speedup": m.predicted_with_verify_cost,
        "predicted_speedup_leviathan": m.predicted_speedup,
        "best_gamma": m.best_gamma,
        "best_speedup": m.best_speedup,
    }


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


__all__ = ["HardwareError", "cache_path", "hardware_sentence", "load_saved", "measure", "plan", "report", "save"]
