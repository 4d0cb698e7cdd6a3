"""Loading a pair: device and dtype choice, tokenizer checks, and one-sentence errors instead of tracebacks."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from specviz.engine import Vocabulary
from specviz.models.catalogue import Pair, PairError

__all__ = ["LoadedModel", "LoadedPair", "PairError", "choose_device", "choose_dtype", "load_pair"]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    reference: str
    model: PreTrainedModel
    parameters: int
    weight_bytes: int
    load_s: float = 0.0  # from_pretrained and the move to the device, timed where it was loaded


@dataclass
class LoadedPair:
    name: str
    target: LoadedModel
    draft: LoadedModel
    tokenizer: PreTrainedTokenizerBase
    shared_vocab_size: int
    device: torch.device
    dtype: torch.dtype
    load_s: float
    chat_template: bool
    vocabulary: Vocabulary

    @property
    def context_length(self) -> int:
        lengths = [getattr(m.model.config, "max_position_embeddings", None) for m in (self.target, self.draft)]
        return min(length for length in lengths if length) if any(lengths) else 2048


def choose_device() -> torch.device:
    """CUDA when present, else Apple's MPS, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def choose_dtype(device: torch.device, override: str | None = None) -> torch.dtype:
    """bf16 (or fp16) on a GPU, fp32 on the CPU, unless the catalogue says otherwise."""
    if override:
        return DTYPES[override]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Can this machine open a connection to the hub (HF_ENDPOINT honoured)?"""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with socket.create_connection((endpoint.hostname, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def is_local(reference: str) -> bool:
    return Path(reference).is_dir()


def is_cached(reference: str) -> bool:
    """Is this hub model's config already in the local cache?"""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(reference, "config.json"), str)
    except Exception:  # an id the cache cannot even parse is not cached
        return False


def check_reachable(reference: str, offline_pairs: list[str]) -> None:
    """Fail fast, in one sentence, when a model is neither a folder, nor cached, nor downloadable."""
    if reference.startswith(("assets/", "/", "./")) and not is_local(reference):
        raise PairError(f"Model folder {reference} does not exist.")
    if is_local(reference) or is_cached(reference) or hub_reachable():
        return
    offline = ", ".join(offline_pairs) or "none"
    raise PairError(
        f"Cannot load {reference}: the Hugging Face hub is unreachable from this machine and the model is not "
        f"in the local cache. Pairs that work offline: {offline}."
    )


def load_tokenizer(reference: str) -> PreTrainedTokenizerBase:
    try:
        return AutoTokenizer.from_pretrained(reference)
    except (OSError, ValueError) as error:
        raise PairError(f"Cannot load the tokenizer of {reference}: {str(error).splitlines()[0]}") from None


def check_same_tokenizer(
    target_ref: str, target_tok: PreTrainedTokenizerBase, draft_ref: str, draft_tok: PreTrainedTokenizerBase
) -> None:
    """Speculative decoding compares probabilities token by token: both models must share one vocabulary."""
    if target_tok.get_vocab() != draft_tok.get_vocab():
        raise PairError(
            f"The draft {draft_ref} ({len(draft_tok):,} tokens) and the target {target_ref} ({len(target_tok):,} tokens) "
            "use different tokenizers; speculative decoding needs both to share one vocabulary."
        )


def load_model(reference: str, device: torch.device, dtype: torch.dtype) -> LoadedModel:
    started = time.perf_counter()
    try:
        model = AutoModelForCausalLM.from_pretrained(reference, dtype=dtype).to(device).eval()
    except torch.OutOfMemoryError:
        raise PairError(f"Out of memory while loading {reference} on {device}; choose a smaller pair.") from None
    except (OSError, ValueError, KeyError) as error:
        raise PairError(f"Cannot load {reference}: {str(error).splitlines()[0]}") from None
    parameters = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return LoadedModel(reference, model, parameters, weight_bytes, time.perf_counter() - started)


def load_pair(name: str, pair: Pair, offline_pairs: list[str], device: torch.device | None = None) -> LoadedPair:
    """Load tokenizer, target and draft, refusing mismatched tokenizers before any weights are read."""
    started = time.perf_counter()
    device = device or choose_device()
    dtype = choose_dtype(device, pair.dtype)
    for reference in (pair.target_ref, pair.draft_ref):
        check_reachable(reference, offline_pairs)
    target_tok, draft_tok = load_tokenizer(pair.target_ref), load_tokenizer(pair.draft_ref)
    check_same_tokenizer(pair.target_ref, target_tok, pair.draft_ref, draft_tok)
    target, draft = load_model(pair.target_ref, device, dtype), load_model(pair.draft_ref, device, dtype)
    shared = min(target.model.config.vocab_size, draft.model.config.vocab_size)  # configs may pad differently
    return LoadedPair(
        name,
        target,
        draft,
        target_tok,
        shared,
        device,
        dtype,
        time.perf_counter() - started,
        pair.chat_template,
        Vocabulary(target_tok),
    )
