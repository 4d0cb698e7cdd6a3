"""The standard library's `.py` files split into training and held-out validation files, by a stable hash of each path.

The held-out files are where the bundled pair's held-out code prompts come from (specviz.prompts.sets), and
the training corpus (specviz.training.corpus) reads the rest: one split, below both.
"""

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
        "testing",
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
        "_vendor",
        "vendor",
        "vendored",
        "_vendored",
        "extern",
        "externals",
        "third_party",
        "_distutils",  # setuptools' copy of the standard library's distutils
        "benchmarks",
        "generated",
        "_generated",
    }
)
VALIDATION_EVERY = 20  # one standard-library file in ~20, chosen by a hash of its path, is held out


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


def is_skipped(relative: Path) -> bool:
    name = relative.name
    return (
        bool(set(relative.parts[:-1]) & SKIPPED_FOLDERS)
        or relative.parts[0].startswith("config-")
        or name.startswith("test_")
        or name.endswith(("_test.py", "_pb2.py"))
        or name == "conftest.py"
    )


def split_stdlib(root: Path | None = None) -> CorpusSplit:
    """Every library `.py` file under root, split into train and held-out validation files."""
    root = root or stdlib_root()
    train, validation = [], []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if is_skipped(relative):
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
