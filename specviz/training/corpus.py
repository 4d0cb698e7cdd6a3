"""The training corpus: the standard library's own `.py` sources, split by file into train and validation."""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

# Folders that are tests, demos, vendored copies or generated data rather than library code.
SKIPPED_FOLDERS = frozenset(
    {
        "test",
        "tests",
        "idlelib",
        "lib2to3",
        "turtledemo",
        "ensurepip",
        "site-packages",
        "pydoc_data",
        "__pycache__",
        "venv",
        "lib-dynload",
        "encodings",  # ~115 codec tables of hex literals: 14% of the bytes, and nothing about code
    }
)
VALIDATION_EVERY = 20  # one file in ~20, chosen by a hash of its path, is held out


@dataclass(frozen=True)
class CorpusSplit:
    train: list[Path]
    validation: list[Path]


def stdlib_root() -> Path:
    """The folder of this interpreter's standard library sources."""
    return Path(sysconfig.get_paths()["stdlib"])


def is_validation_file(relative_path: str) -> bool:
    """Hold a file out by a stable hash of its path, so the split never depends on file order."""
    digest = hashlib.sha1(relative_path.encode()).hexdigest()
    return int(digest, 16) % VALIDATION_EVERY == 0


def split_stdlib(root: Path | None = None) -> CorpusSplit:
    """Every library `.py` file under root, split into train and held-out validation files."""
    root = root or stdlib_root()
    train, validation = [], []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if set(relative.parts[:-1]) & SKIPPED_FOLDERS or relative.parts[0].startswith("config-"):
            continue
        (validation if is_validation_file(relative.as_posix()) else train).append(path)
    return CorpusSplit(train=train, validation=validation)


def read_sources(paths: list[Path]) -> list[str]:
    """File contents as text; undecodable files are skipped."""
    texts = []
    for path in paths:
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
    return texts
