"""specviz's own cache folder: the fetched models, built kernels, compiled packages and settings measured per machine."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """$SPECVIZ_CACHE, else ~/.cache/specviz."""
    return Path(os.environ.get("SPECVIZ_CACHE", Path.home() / ".cache" / "specviz"))
