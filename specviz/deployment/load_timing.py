"""How long a pair takes to load: each model cold (a fresh Python process, or this process's first load) and warm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from specviz.deployment.memory import LoadTimes, PairLoadTimes
from specviz.models.loading import LoadedPair, load_model

COLD_SOURCE = "a fresh Python process, from disk: the target, then the draft (imports not counted)"
FIRST_LOAD_SOURCE = "the first load in this process (--cold-start times a fresh process)"
APP_LOAD_SOURCE = "the first load in the app's process"
PACKAGE_PARENT = Path(__file__).resolve().parents[2]  # where the fresh process finds specviz, wherever it runs from


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def cold_load(
    references: Sequence[str], device: torch.device, dtype: torch.dtype, timeout_s: float = 900
) -> tuple[list[float], float]:
    """Each model's load seconds in a fresh Python process, loaded in this order, and the seconds of the imports."""
    with tempfile.TemporaryDirectory(prefix="specviz-cold-load-") as folder:
        out = Path(folder) / "seconds.json"
        result = subprocess.run(
            [sys.executable, "-m", "specviz.deployment.cold_load", str(out), str(device), dtype_name(dtype), *references],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_PARENT), os.environ.get("PYTHONPATH")]))},
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        said = (result.stderr.strip().splitlines() or result.stdout.strip().splitlines() or ["no output"])[-1]
        if result.returncode != 0:
            raise RuntimeError(f"loading {', '.join(references)} in a fresh process failed: {said}")
        try:
            timed = json.loads(out.read_text())
            return [float(seconds) for seconds in timed["load_s"]], float(timed["import_s"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise RuntimeError(
                f"loading {', '.join(references)} in a fresh process wrote no timings ({type(error).__name__}); its last line: {said!r}"
            ) from None


def warm_load_s(reference: str, device: torch.device, dtype: torch.dtype) -> float:
    """Seconds to load a model again in this process (files in the page cache, code warm); the copy is freed at once."""
    loaded = load_model(reference, device, dtype)
    seconds = loaded.load_s
    del loaded
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return seconds


def first_load_times(pair: LoadedPair) -> dict:
    """Each model's first load in this process, as it was loaded (nothing is read again: no warm time)."""
    return PairLoadTimes(LoadTimes(pair.target.load_s), LoadTimes(pair.draft.load_s)).to_json()


def load_times(pair: LoadedPair, cold_start: bool) -> tuple[PairLoadTimes, dict]:
    """Each model's cold and warm load, and how cold was measured (a fresh process, or this process's first load)."""
    models = (pair.target, pair.draft)
    if cold_start:
        cold, import_s = cold_load([m.reference for m in models], pair.device, pair.dtype)
        extra = {"cold_source": COLD_SOURCE, "import_s": import_s}
    else:
        cold, extra = [m.load_s for m in models], {"cold_source": FIRST_LOAD_SOURCE}
    warm = [warm_load_s(m.reference, pair.device, pair.dtype) for m in models]
    times = PairLoadTimes(LoadTimes(cold[0], warm[0]), LoadTimes(cold[1], warm[1]))
    return times, {**times.to_json(), **extra}
