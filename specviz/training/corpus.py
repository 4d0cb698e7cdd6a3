"""The training corpus: the standard library's `.py` sources plus a fixed list of permissively licensed packages.

Validation is always a hash-chosen ~5% of the standard library's files (specviz/prompts/stdlib.py), so the
held-out prompts (`specviz.prompts.sets.heldout_code_prompts`) never depend on which packages a machine has installed.
The package part is whatever of `PACKAGES` this machine has: on another machine it may differ,
and `describe_packages` records what was actually used.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from specviz.prompts.stdlib import CorpusSplit, is_skipped, read_sources, split_stdlib

# Import name -> licence (as the package's metadata declares it). Only permissive licences; chosen for
# ordinary, readable library code. Tests, vendored and generated files are skipped inside each.
PACKAGES: dict[str, str] = {
    "anyio": "MIT",
    "attr": "MIT",
    "click": "BSD-3-Clause",
    "cryptography": "Apache-2.0 OR BSD-3-Clause",
    "dateutil": "Apache-2.0 OR BSD-3-Clause (dual)",
    "fastapi": "MIT",
    "flask": "BSD-3-Clause",
    "fsspec": "BSD-3-Clause",
    "httpcore": "BSD-3-Clause",
    "httpx": "BSD-3-Clause",
    "huggingface_hub": "Apache-2.0",
    "idna": "BSD-3-Clause",
    "IPython": "BSD-3-Clause",
    "jedi": "MIT",
    "jinja2": "BSD-3-Clause",
    "markdown_it": "MIT",
    "networkx": "BSD-3-Clause",
    "numpy": "BSD-3-Clause",
    "packaging": "Apache-2.0 OR BSD-2-Clause",
    "pandas": "BSD-3-Clause",
    "pip": "MIT",
    "pluggy": "MIT",
    "prompt_toolkit": "BSD-3-Clause",
    "pydantic": "MIT",
    "pygments": "BSD-2-Clause",
    "pyparsing": "MIT",
    "_pytest": "MIT",
    "requests": "Apache-2.0",
    "rich": "MIT",
    "setuptools": "MIT",
    "starlette": "BSD-3-Clause",
    "tomlkit": "MIT",
    "traitlets": "BSD-3-Clause",
    "trio": "MIT OR Apache-2.0",
    "typer": "MIT",
    "urllib3": "MIT",
    "uvicorn": "BSD-3-Clause",
    "werkzeug": "BSD-3-Clause",
    "yaml": "MIT",
}
PACKAGE_BYTES_CAP = 1_200_000  # per package, so that a few large packages do not dominate
MAX_FILE_BYTES = 150_000  # larger files are mostly generated tables
MAX_MEAN_LINE_LENGTH = 80
MAX_SHARED_LINES = 0.2  # a file sharing more of its lines with the validation files is a copy of one


@dataclass(frozen=True)
class PackageUse:
    name: str
    distribution: str
    version: str
    licence: str
    files: int
    bytes: int


def site_packages_root() -> Path:
    """The folder of this interpreter's installed packages."""
    return Path(sysconfig.get_paths()["purelib"])


def _long_lines(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines() if len(line.strip()) >= 24}


def _looks_like_code(text: str) -> bool:
    lines = text.splitlines()
    return bool(lines) and 200 <= len(text) <= MAX_FILE_BYTES and len(text) / len(lines) <= MAX_MEAN_LINE_LENGTH


def _distribution(package: str) -> tuple[str, str]:
    try:
        name = importlib.metadata.packages_distributions().get(package, [package])[0]
        return name, importlib.metadata.version(name)
    except (importlib.metadata.PackageNotFoundError, IndexError):
        return package, "?"


def package_sources(
    validation_texts: list[str], seen_hashes: set[str], root: Path | None = None
) -> tuple[list[str], list[PackageUse]]:
    """Library files of the installed `PACKAGES`, deduplicated by content and kept clear of the validation files.

    Within a package, files are taken in the order of a hash of their path until the byte cap,
    so the choice is deterministic and spread over the whole package.
    """
    root = root or site_packages_root()
    validation_lines = set().union(*(_long_lines(t) for t in validation_texts))
    texts: list[str] = []
    used: list[PackageUse] = []
    for package, licence in sorted(PACKAGES.items(), key=lambda item: item[0].lower()):
        folder = root / package
        if not folder.is_dir():
            continue
        paths = [p for p in folder.rglob("*.py") if not is_skipped(p.relative_to(root))]
        paths.sort(key=lambda p: hashlib.sha1(p.relative_to(root).as_posix().encode()).hexdigest())
        n_files = n_bytes = 0
        for text in read_sources(paths):
            if n_bytes >= PACKAGE_BYTES_CAP:
                break
            digest = hashlib.sha1(text.encode()).hexdigest()
            if digest in seen_hashes or not _looks_like_code(text):
                continue
            lines = _long_lines(text)
            if lines and len(lines & validation_lines) / len(lines) > MAX_SHARED_LINES:
                continue
            seen_hashes.add(digest)
            texts.append(text)
            n_files, n_bytes = n_files + 1, n_bytes + len(text)
        distribution, version = _distribution(package)
        used.append(PackageUse(package, distribution, version, licence, n_files, n_bytes))
    return texts, used


def build_corpus() -> tuple[list[str], list[str], CorpusSplit, list[PackageUse]]:
    """Train texts (standard library, then packages), validation texts, the stdlib split and the packages used."""
    split = split_stdlib()
    validation_texts = read_sources(split.validation)
    seen = {hashlib.sha1(t.encode()).hexdigest() for t in validation_texts}
    stdlib_texts = []
    for text in read_sources(split.train):
        digest = hashlib.sha1(text.encode()).hexdigest()
        if digest not in seen:
            seen.add(digest)
            stdlib_texts.append(text)
    extra_texts, packages = package_sources(validation_texts, seen)
    return stdlib_texts + extra_texts, validation_texts, split, packages
