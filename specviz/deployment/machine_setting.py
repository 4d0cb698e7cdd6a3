"""`gamma: auto`, measured once per machine and pair: the choice kept in specviz's cache and reused by later runs.

The page, `run`, `bench`, `report` and `export` all read the same entry, so they draft the same chain or tree. Its key
is everything the measurement depends on: the CPU (its model name, its flags, its last-level cache), torch's version,
kernel capability and thread count, the device, the pair (its models, dtype and weight forms), the engine its step
runs on (compiled or eager), the drafter and the sampling (greedy, or the temperature). Change any of them and the
next run measures again; a measurement that ran while other programs used the processor is kept for ten minutes
only, then measured again. The calibration runs on the pair's own prompts (its domain's first presets), never on the
prompt of the run that asked, so every entry point chooses alike. The entries live in one JSON file,
`$SPECVIZ_CACHE/settings.json` (else ~/.cache/specviz); deleting it measures everything again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from specviz.analysis.cache_fit import last_level_cache_bytes
from specviz.deployment import auto_setting
from specviz.engine import DecodeSettings, SamplingSettings
from specviz.models.loading import LoadedPair
from specviz.run.chosen_setting import ChosenSetting
from specviz.run.machine_load import LoadMeter

FORMAT = 1  # bump when what the measurement does changes: every kept entry is measured again
CPU_INFO = Path("/proc/cpuinfo")
CALIBRATION_PROMPTS = 2  # the pair's first presets of its domain (prompts/sets.py)
BUSY_KEPT_S = 600.0  # a choice measured beside other work serves this long, then the next run measures it again
_file_lock = threading.Lock()


def settings_path() -> Path:
    from specviz.models.sources import cache_root

    return cache_root() / "settings.json"


@functools.cache
def cpu_description(cpu_info: Path = CPU_INFO) -> dict:
    """The CPU as the measurement depends on it: its model name and a digest of its flags (Linux; empty elsewhere)."""
    try:
        text = cpu_info.read_text(errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "flags") and key not in fields:
            fields[key] = value.strip()
    flags = " ".join(sorted(fields.get("flags", "").split()))
    return {"model": fields.get("model name", ""), "flags": hashlib.sha256(flags.encode()).hexdigest()[:16]}


def conditions(pair: LoadedPair, drafter: str, sampling: SamplingSettings) -> dict:
    """Everything the choice depends on (module docstring), as plain JSON."""
    from specviz.engine.compiled import pair_engine

    device = pair.device
    return {
        "format": FORMAT,
        "cpu": cpu_description(),
        "last_level_cache_bytes": last_level_cache_bytes(),
        "kernels": torch.backends.cpu.get_cpu_capability(),
        "isa_limits": {name: os.environ.get(name, "") for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")},
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else device.type,
        "pair": pair.name,
        "models": [part.reference for part in (pair.target, pair.draft, pair.feature_head) if part is not None],
        "dtype": str(pair.dtype).removeprefix("torch."),
        "weights": {
            "target": pair.target.form,
            "draft": pair.draft.form if pair.draft is not None else None,
            "feature_head": pair.feature_head.head.form if pair.feature_head is not None else None,
        },
        "engine": pair_engine(pair),
        "drafter": drafter,
        "sampling": "greedy"
        if sampling.greedy
        else {"temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p},
    }


def key_of(described: dict) -> str:
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:24]


def _entries(path: Path) -> dict:
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def kept_setting(described: dict, path: Path | None = None) -> ChosenSetting | None:
    """The choice kept for exactly these conditions, or None (never measures); one measured beside other work only
    for BUSY_KEPT_S after it was taken."""
    entry = _entries(path or settings_path()).get(key_of(described))
    if not isinstance(entry, dict) or entry.get("conditions") != described:
        return None
    if entry.get("busy") and not 0 <= time.time() - float(entry.get("kept_at", 0)) < BUSY_KEPT_S:
        return None
    try:
        return replace(ChosenSetting.from_json(entry["setting"]), reused=True)
    except (KeyError, TypeError, ValueError):
        return None  # an entry from an older specviz: measured again


def keep_setting(described: dict, chosen: ChosenSetting, busy: bool = False, path: Path | None = None) -> Path:
    """Keep the choice under its conditions (written whole, by rename: a reader never sees half a file); `busy`: it
    was measured while other work used the processor, so it is kept for BUSY_KEPT_S only."""
    path = path or settings_path()
    with _file_lock:
        entries = _entries(path)
        entries[key_of(described)] = {
            "conditions": described,
            "setting": replace(chosen, reused=False, auto=False).to_json(),
            "busy": busy,
            "kept_at": time.time(),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        scratch.write_text(json.dumps(entries, indent=1))
        os.replace(scratch, path)
    return path


def calibration_prompts(pair: LoadedPair) -> list[str]:
    """The prompts `gamma: auto` calibrates on: the pair's domain's first presets (a chat coder pair: coding questions)."""
    from specviz.models.catalogue import CatalogueError, load_catalogue
    from specviz.prompts.sets import CODE_QUESTIONS, PROMPTS

    try:
        entry = load_catalogue().get(pair.name)
        domain = entry.domain
    except CatalogueError:  # a pair from --target and --draft
        domain = "prose"
    prompts = CODE_QUESTIONS if domain == "code" and pair.chat_template else PROMPTS[domain]
    return list(prompts[:CALIBRATION_PROMPTS])


def calibration_settings(sampling: SamplingSettings) -> DecodeSettings:
    """What the calibration run decodes with: the run's sampling, exact verification, the calibration's length."""
    return DecodeSettings(max_new_tokens=auto_setting.CALIBRATION_TOKENS, sampling=sampling)


def remembered_setting(
    pair: LoadedPair,
    drafter: str,
    sampling: SamplingSettings,
    on_measure: Callable[[], None] = lambda: None,
    own_work: Callable[[], str] = lambda: "",
) -> ChosenSetting:
    """The choice kept for this machine and pair, else measured now (ν(k) over 1–8 rows and one short calibration
    run: seconds on a small pair) and kept. Where other programs (our own compile worker among them) used the
    processor while it was measured, or this process did (`own_work`, as run/machine_load.LoadMeter asks it), it is
    kept for BUSY_KEPT_S only: the runs soon after reuse it, and a later one measures again."""
    described = conditions(pair, drafter, sampling)
    found = kept_setting(described)
    if found is not None:
        return found
    on_measure()
    with LoadMeter(own_work=own_work) as others:
        choice = auto_setting.choose_setting(pair, calibration_prompts(pair), calibration_settings(sampling), drafter)
    chosen = choice.chosen()
    keep_setting(described, chosen, busy=others.result.busy)
    return chosen
