"""Building a C++ kernel once per machine, like a dependency: one line on the log when it builds (and how long it
took), the build kept in specviz's cache under a key of its source, flags, torch and CPU, and one sentence that names
what to install where it cannot build. Nothing is printed on stdout (a command's --json output stays JSON)."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from pathlib import Path

import torch

from specviz.cache import cache_root
from specviz.kernels import cpu
from specviz.process import pause_gate

log = logging.getLogger(__name__)

STALE_LOCK_S = 600  # a build takes under a minute on 2 cores: a lock this old was left by a killed build
INSTALL_HINT = (
    "install a C++ compiler (Debian/Ubuntu: apt-get install g++; macOS: xcode-select --install) and ninja (pip install ninja)"
)


def cxx_compiler() -> str | None:
    """The C++ compiler torch's builders will call ($CXX, else g++, c++ or clang++), or None where there is none."""
    chosen = os.environ.get("CXX") or next((name for name in ("g++", "c++", "clang++") if shutil.which(name)), None)
    return chosen if chosen and shutil.which(chosen) else None


def missing_tools() -> str | None:
    """Why no kernel can be built here, in one sentence naming what to install; None when one can."""
    if cxx_compiler() is None:
        return f"no C++ compiler was found: {INSTALL_HINT}"
    if shutil.which("ninja") is None:
        try:
            import ninja  # noqa: F401  (the pip package puts its binary on torch's path)
        except ImportError:
            return f"ninja was not found: {INSTALL_HINT}"
    return None


def build_folder(library: str, source: Path, flags: list[str]) -> Path:
    """Where a build is kept: specviz's cache, under a key of its source, flags, torch and this CPU."""
    key = hashlib.sha256("\n".join([source.read_text(), *flags, torch.__version__, cpu.model_name()]).encode()).hexdigest()
    return cache_root() / "kernels" / f"{library}-{key[:16]}"


def load_library(library: str, source: Path, flags: list[str], what: str, expected_s: int = 25) -> None:
    """Build `source` into the op library `library` (first use on this machine: one log line says so) or load the
    kept build; raises with one sentence where it cannot."""
    missing = missing_tools()
    if missing:
        raise RuntimeError(missing)
    from torch.utils.cpp_extension import load

    folder = build_folder(library, source, flags)
    folder.mkdir(parents=True, exist_ok=True)
    clear_stale_lock(folder)
    fresh = not (folder / f"{library}.so").exists()
    if fresh:
        log.warning("building %s for this CPU, once: ~%d s", what, expected_s)
    started = time.perf_counter()
    with pause_gate.critical_section():  # the build's lock file: never stopped while holding it (process/pause_gate.py)
        load(
            library,
            [str(source)],
            extra_cflags=flags,
            build_directory=str(folder),
            is_python_module=False,
            verbose=os.environ.get("SPECVIZ_VERBOSE_BUILD") == "1",
        )
    if fresh:
        log.warning("built %s in %.0f s (kept in %s)", what, time.perf_counter() - started, folder)


def clear_stale_lock(folder: Path) -> None:
    """Remove a build's lock file that a killed build left (torch's loader would wait on it forever)."""
    lock = folder / "lock"
    try:
        if time.time() - lock.stat().st_mtime > STALE_LOCK_S:
            lock.unlink()
    except FileNotFoundError:
        pass
