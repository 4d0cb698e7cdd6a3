"""Saved `hardware` measurements, and the one line the app shows from them: light (no torch at import).

`python -m specviz hardware --pair NAME --save` writes an entry; the app only reads them, so showing the
line never builds or times a model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def cache_path() -> Path:
    """Where `hardware --save` keeps measurements for the app: $SPECVIZ_CACHE, else ~/.cache/specviz."""
    return Path(os.environ.get("SPECVIZ_CACHE", Path.home() / ".cache" / "specviz")) / "hardware.json"


def save(result: dict, path: Path | None = None) -> Path:
    """Keep a measurement for the app, keyed by pair, device and dtype (newest wins)."""
    path = path or cache_path()
    entries = load_saved(path)
    entries[f"{result['pair']}|{result['device']}|{result['dtype']}"] = result
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries, indent=1))
    return path


def load_saved(path: Path | None = None) -> dict:
    try:
        entries = json.loads((path or cache_path()).read_text())
        return entries if isinstance(entries, dict) else {}
    except (OSError, ValueError):
        return {}


def hardware_sentence(pair_name: str, path: Path | None = None, device: str | None = None) -> str | None:
    """One line for the verdict and theory tab, from a measurement saved by `hardware --save` on this device type; None if none.

    It only reads a small JSON file: it never builds or times a model.
    """
    if device is None:
        from specviz.models.loading import choose_device  # torch is loaded by the time the app shows a verdict

        device = choose_device().type
    entries = [e for e in load_saved(path).values() if e.get("pair") == pair_name and str(e.get("device", "")).startswith(device)]
    if not entries:
        return None
    e = max(entries, key=lambda entry: entry.get("measured_at", ""))
    try:
        sizes = f"{_short(e['draft'])} ({_size(e['draft_parameters'])}) → {_short(e['target'])} ({_size(e['target_parameters'])})"
        threads = f", {e['threads']} thread{'s' if e['threads'] != 1 else ''}" if e.get("threads") else ""
        threads += f", {e['engine']}" if e.get("engine") else ", an earlier engine: measure again with `hardware --save`"
        sentence = (
            f"On this machine ({e['device_name']}{threads}, {e['dtype']}, {_weights(e)}), "
            f"{sizes} costs τ = {e['tau']:.3f} per draft step and ν = {e['verify_cost']:.2f} target steps per verify pass "
            f"over γ + 1 = {e['gamma'] + 1} tokens"
        )
        if e.get("alpha") is not None:
            return (
                sentence + f"; at α = {e['alpha']:.2f} that predicts {e['best_speedup']:.2f}× at the best γ = {e['best_gamma']}."
            )
        at = {round(p["alpha"], 2): p for p in e["predictions"]}
        low, high = at.get(0.6), at.get(0.8)
        if low and high:
            return sentence + (
                f"; that predicts {low['best_speedup']:.2f}× at α = 0.6 and {high['best_speedup']:.2f}× at α = 0.8 (best γ)."
            )
        return sentence + "."
    except (KeyError, TypeError, ValueError):
        return None


def _weights(entry: dict) -> str:
    weights = entry.get("weights", "random (real architectures)")
    return "the models' own weights" if weights.startswith("real (") else "random weights of the real architectures"


def saved_batch_curve(pair_name: str, device: str, path: Path | None = None) -> dict | None:
    """The newest `hardware --batch --save` measurement of this pair on this device type, or None (never times anything)."""
    entries = [
        e
        for e in load_saved(path).values()
        if e.get("pair") == pair_name and str(e.get("device", "")).startswith(device) and e.get("batches")
    ]
    return max(entries, key=lambda entry: entry.get("measured_at", "")) if entries else None


def saved_verify_curve(pair_name: str, path: Path | None = None) -> dict | None:
    """The newest `hardware --rows N --save` measurement of this pair (any device), or None (never times anything).

    Its `verify_curve` maps k (as a string: JSON) to ν(k); `device_name`, `dtype` and `measured_at` say where and when.
    """
    entries = [e for e in load_saved(path).values() if e.get("pair") == pair_name and e.get("verify_curve")]
    return max(entries, key=lambda entry: entry.get("measured_at", "")) if entries else None


def _size(parameters: int) -> str:
    return f"{parameters / 1e9:.2f}B" if parameters >= 1e9 else f"{parameters / 1e6:.0f}M"


def _short(reference: str) -> str:
    return reference.rstrip("/").split("/")[-1]
