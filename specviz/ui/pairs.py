"""Pairs are loaded once per catalogue key and shared by every session (they are only read)."""

from __future__ import annotations

import threading

from specviz.catalogue import Catalogue, load_catalogue
from specviz.engine import DecodeSettings
from specviz.loading import LoadedPair, load_pair
from specviz.runner import run

_loaded: dict[str, LoadedPair] = {}
_lock = threading.Lock()
_catalogue: Catalogue | None = None


def catalogue() -> Catalogue:
    global _catalogue
    if _catalogue is None:
        _catalogue = load_catalogue()
    return _catalogue


def get_pair(name: str) -> LoadedPair:
    """The loaded pair, loading it on first use (PairError with a clear sentence if it cannot be)."""
    with _lock:
        if name not in _loaded:
            pair = load_pair(name, catalogue().get(name), catalogue().offline_pairs())
            warm_up(pair)
            _loaded[name] = pair
        return _loaded[name]


def warm_up(pair: LoadedPair) -> None:
    """One short run of each path, so the first user's timings are steady-state, not allocator and kernel set-up."""
    settings = DecodeSettings(max_new_tokens=8, gamma=4)
    for mode in ("speculative", "autoregressive"):
        for _ in run(pair, "def main():\n    return", settings, mode=mode):
            pass


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
    }


def choice_label(name: str) -> str:
    pair = catalogue().get(name)
    where = "bundled, offline" if pair.bundled else "hub download"
    return f"{name} · {pair.description} ({where})"
