"""The process-wide model cache: each catalogue pair is loaded and warmed once, then shared by every session."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from specviz.engine.settings import DecodeSettings
from specviz.models.catalogue import Catalogue, load_catalogue
from specviz.runner import run

if TYPE_CHECKING:  # loading imports transformers: kept off the path to the app's first page
    from specviz.models.loading import LoadedPair

log = logging.getLogger("specviz")

_loaded: dict[str, LoadedPair] = {}
_load_s: dict[str, dict] = {}  # each pair's load times (specviz.deployment.collect.load_times), taken once at loading
_loading: dict[str, threading.Lock] = {}
_registry_lock = threading.Lock()
_catalogue: Catalogue | None = None


def catalogue() -> Catalogue:
    global _catalogue
    if _catalogue is None:
        _catalogue = load_catalogue()
    return _catalogue


def get_pair(name: str) -> LoadedPair:
    """The loaded pair, loading and warming it on first use (PairError with a clear sentence if it cannot be).

    Each pair has its own lock, so loading one pair never holds up sessions using another.
    """
    if name in _loaded:
        return _loaded[name]
    from specviz.models.loading import load_pair  # the boundary: torch and transformers load here, on first use

    with _registry_lock:
        lock = _loading.setdefault(name, threading.Lock())
    with lock:
        if name not in _loaded:
            pair = load_pair(name, catalogue().get(name), catalogue().offline_pairs())
            warm_up(pair)
            _load_s[name] = pair_load_times(pair)
            _loaded[name] = pair
    return _loaded[name]


def preload(name: str) -> threading.Thread:
    """Load a pair in the background (the app starts serving before its default pair is ready)."""

    def load() -> None:
        try:
            get_pair(name)
        except Exception:  # the first Run reports the error to the user
            log.exception("preloading %s failed", name)

    thread = threading.Thread(target=load, name=f"preload-{name}", daemon=True)
    thread.start()
    return thread


def warm_up(pair: LoadedPair) -> None:
    """Two short runs of each path, so the first user's timings are steady-state, not allocator and kernel set-up."""
    for max_new_tokens in (8, 24):
        settings = DecodeSettings(max_new_tokens=max_new_tokens, gamma=4)
        for mode in ("speculative", "autoregressive"):
            for _ in run(pair, "def main():\n    return", settings, mode=mode):
                pass


def pair_load_times(pair: LoadedPair) -> dict | None:
    """Each model's first load in this process (the app's cold start) and a warm reload, timed once, after warm-up."""
    from specviz.deployment.collect import APP_LOAD_SOURCE, load_times  # torch is loaded by now

    try:
        _, times = load_times(pair, cold_start=False)
    except Exception:  # a missing number must never keep a pair from serving
        log.exception("timing the loads of %s failed", pair.name)
        return None
    return {**times, "cold_source": APP_LOAD_SOURCE}


def device_of(name: str) -> str | None:
    """The device type a loaded pair runs on ("cpu", "cuda"); None before it is loaded."""
    return _loaded[name].device.type if name in _loaded else None


def is_loaded(name: str) -> bool:
    return name in _loaded


def pair_info(pair: LoadedPair) -> dict:
    """What the run-details panel shows, as plain data (it travels inside exported traces)."""
    return {
        "name": pair.name,
        "target": pair.target.reference.split("/assets/")[-1],
        "draft": pair.draft.reference.split("/assets/")[-1],
        "device": str(pair.device),
        "dtype": str(pair.dtype).replace("torch.", ""),
        "target_parameters": pair.target.parameters,
        "draft_parameters": pair.draft.parameters,
        "target_weight_mb": pair.target.weight_bytes / 2**20,
        "draft_weight_mb": pair.draft.weight_bytes / 2**20,
        "load_s": pair.load_s,
        "shared_vocab": pair.shared_vocab_size,
        "model_load_s": _load_s.get(pair.name),  # cold (first load here) and warm, per model; None until timed
    }
