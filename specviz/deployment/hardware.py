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
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from specviz.analysis.hardware_cache import cache_path, hardware_sentence, load_saved, save
from specviz.analysis.readings import verify_costs_of
from specviz.analysis.timing import StepTimes, measure_pass_seconds, measure_step_times, predicted
from specviz.deployment.memory import forward_activation_bytes, kv_bytes_per_token
from specviz.engine.compiled import enable, fast_model
from specviz.models.catalogue import Catalogue, Pair
from specviz.models.footprint import count_parameters, needed_bytes, recorded_config, too_big_sentence
from specviz.models.loading import choose_device, choose_dtype, is_local
from specviz.models.reduced_head import shares_target_embeddings
from specviz.models.stored import read_model
from specviz.models.weight_forms import apply_form, choose_form

ALPHAS = (0.5, 0.6, 0.7, 0.8, 0.9)  # what a report predicts at, when no α is given
CONTEXT = 64  # tokens in the cache when a step is timed


class HardwareError(RuntimeError):
    """The pair cannot be measured here (unknown architecture, too big): one sentence for the user."""


def config_for(reference: str, catalogue: Catalogue) -> PretrainedConfig:
    """A local folder's own config.json, or the architecture recorded for a hub id."""
    config = recorded_config(reference, catalogue)
    if config is None:
        raise HardwareError(f"No architecture recorded for {reference}: add it under `architectures:` in models.yaml.")
    return config


def build_random(config: PretrainedConfig, dtype: torch.dtype, device: torch.device, seed: int = 0) -> PreTrainedModel:
    """The architecture with random weights, in the pair's dtype, on the device."""
    torch.manual_seed(seed)  # only the weights' values depend on it, and they do not change the timings
    return AutoModelForCausalLM.from_config(config, dtype=dtype).to(device).eval()


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
    target_form: str | None = None  # each model's weight form on a CPU (models/weight_forms.py), as load_pair chooses it
    draft_form: str | None = None

    @property
    def needed_bytes(self) -> int:
        return needed_bytes(self.target_parameters + self.draft_parameters, self.dtype)


def plan(
    name: str,
    pair: Pair,
    catalogue: Catalogue,
    device: torch.device | None = None,
    dtype: str | None = None,
    weights: str | None = None,
) -> Plan:
    """What measuring the pair takes; the models' weight forms as load_pair chooses them (`weights` overrides the
    pair's `weights`/`draft_weights`; an explicit dtype alone asks for plain weights), so ν(k) is the form's."""
    device = device or choose_device()
    target_config, draft_config = config_for(pair.target_ref, catalogue), config_for(pair.draft_ref, catalogue)
    target_form = choose_form(weights or (pair.weights if dtype is None else None), device)
    draft_form = choose_form(weights or (pair.draft_weights if dtype is None else None), device)
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
        target_form,
        draft_form,
    )


def batch_bytes(p: Plan, batch: int, gamma: int, context: int = CONTEXT) -> int:
    """What timing at this batch size holds beyond the weights: both KV caches over context + γ + 1 tokens for every
    sequence, and the verify pass's activations over B·(γ + 1) positions (specviz.deployment.memory)."""
    length = context + gamma + 1
    kv = batch * length * (kv_bytes_per_token(p.target_config, p.dtype) + kv_bytes_per_token(p.draft_config, p.dtype))
    return kv + batch * forward_activation_bytes(p.target_config, p.dtype, gamma + 1, length)


def check_fits(p: Plan, available: int | None = None, extra_bytes: int = 0, extra_what: str = "") -> None:
    """Refuse, in one sentence, when both models (and `extra_bytes` of KV cache and activations) would not fit here."""
    refusal = too_big_sentence(
        p.pair, p.target_parameters, p.draft_parameters, p.dtype, p.device, available, extra_bytes, extra_what
    )
    if refusal:
        raise HardwareError(refusal)


def build_models(p: Plan) -> tuple[PreTrainedModel, PreTrainedModel]:
    """Target and draft as timed: a local folder's own weights (a bundled pair), else the architecture with random weights."""

    def build(reference: str, config: PretrainedConfig, seed: int, form: str | None) -> PreTrainedModel:
        if is_local(reference):
            model = read_model(reference, p.dtype).to(p.device).eval()
            if shares_target_embeddings(Path(reference)):
                return model  # a draft on its target's embedding stays as load_pair leaves it (loading.is_independent)
        else:
            model = build_random(config, p.dtype, p.device, seed=seed)
        return model if form is None else apply_form(model, form)

    models = build(p.target, p.target_config, 0, p.target_form), build(p.draft, p.draft_config, 1, p.draft_form)
    for model in models:  # timed as the engine runs them: on the fast path, compiled before anything is timed
        fast = enable(model)
        if fast is not None:
            fast.warm_up()
    return models


def engine_of(models: tuple[PreTrainedModel, PreTrainedModel]) -> str:
    """How the engine ran the timed models, in a few words (the numbers are only as true as this)."""
    kinds = []
    for model in models:
        fast = fast_model(model)
        if fast is None:
            kinds.append("transformers' forward and dynamic cache")
        else:
            kinds.append("static cache, compiled" if fast.report.compiled else "static cache, eager")
    return kinds[0] if kinds[0] == kinds[1] else f"target: {kinds[0]}; draft: {kinds[1]}"


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


def verify_curve(p: Plan, models: tuple[PreTrainedModel, PreTrainedModel], max_rows: int, repeats: int = 10) -> dict:
    """ν(k) for k = 1 … max_rows on the target as timed here: what a tree of k − 1 nodes costs to verify, in steps."""
    seconds = measure_pass_seconds(models[0], vocab_of(p), max_rows, context=CONTEXT, repeats=repeats)
    return {
        "verify_curve": {str(rows): nu for rows, nu in verify_costs_of(seconds).items()},  # JSON keys are strings
        "verify_curve_step_ms": 1000 * seconds[1],
        "verify_curve_context": CONTEXT,
    }


def report(p: Plan, times: StepTimes, alpha: float | None, alpha_source: str | None, engine: str | None = None) -> dict:
    """The JSON of `hardware`: sizes, timings, τ, ν and what they predict (through readings_of_steps)."""
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
        "target_form": p.target_form,  # None: plain weights in `dtype`
        "draft_form": p.draft_form,
        "engine": engine,
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
