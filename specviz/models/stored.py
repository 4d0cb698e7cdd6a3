"""A model folder as the bundle stores it, read into a model: weights packed with xz, a draft without its embedding.

Two things keep the repository small without changing what any model computes:

- A folder may ship its weights as `model.safetensors.xz` (or any weights file as `NAME.xz`, like a feature head's
  `feature_head.safetensors.xz`; xz is lossless: the unpacked file is byte for byte the one that was packed). It is
  read from a copy in specviz's cache (`unpacked/<sha256 of the packed file>/`: the weights unpacked once, the
  folder's other files linked), so a read-only checkout (a container image, a packaged Space) runs as well as a clone;
  a changed packed file has another hash, hence another copy. `weights_file` is where any reader finds the file.
- A draft that borrows its target's embedding (`shares_target_embeddings.json`) ships only its own layers. It is built
  from its config and its own weights with a zero placeholder where the embedding goes, which the loader then replaces
  with the target's tensor (`reduced_head.borrow_embeddings`): transformers finds every weight it expects, so it has
  nothing missing to warn about.

A draft folder with no tokenizer files of its own reads text with its target's tokenizer (the bundled drafts were
trained on their target's tokens, so they ship none).
"""

from __future__ import annotations

import hashlib
import lzma
import os
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, AutoConfig, AutoModelForCausalLM, GenerationConfig, PreTrainedModel

from specviz.models.reduced_head import shares_target_embeddings

WEIGHTS = "model.safetensors"
PACKED = "model.safetensors.xz"
UNPACKED_FROM = "model.safetensors.unpacked-from"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pack_weights(folder: Path, name: str = WEIGHTS) -> None:
    """Write `NAME.xz`, the file git keeps, beside the weights file `NAME` (which stays, marked as unpacked from it)."""
    folder = Path(folder)
    packed = folder / f"{name}.xz"
    with lzma.open(packed, "wb", preset=9) as out:
        out.write((folder / name).read_bytes())
    (folder / f"{name}.unpacked-from").write_text(_sha256(packed) + "\n")


def unpack_weights(folder: Path) -> None:
    """Make `model.safetensors` from `model.safetensors.xz` where the folder has a packed file and the unpacked one is
    missing or came from another packed file. Written to a temporary name first, so a reader never sees half a file."""
    folder = Path(folder)
    packed = folder / PACKED
    if not packed.is_file():
        return
    digest = _sha256(packed)
    stamp = folder / UNPACKED_FROM
    if (folder / WEIGHTS).is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
        return
    partial = folder / f"{WEIGHTS}.{os.getpid()}.partial"
    with lzma.open(packed, "rb") as source, partial.open("wb") as out:
        for block in iter(lambda: source.read(1 << 20), b""):
            out.write(block)
    os.replace(partial, folder / WEIGHTS)
    stamp.write_text(digest + "\n")


def weights_file(folder: Path, name: str = WEIGHTS) -> Path:
    """Where to read the folder's weights file `name` from: the file itself, or where the folder ships it packed
    (`name.xz`), its copy in specviz's cache, unpacked there once under a temporary name first, so a reader never sees
    half a file. (Where neither is there, the path it would have, for the caller's own check.)"""
    from specviz.models.sources import cache_root

    folder = Path(folder)
    packed = folder / f"{name}.xz"
    if not packed.is_file():
        return folder / name
    copy = cache_root() / "unpacked" / _sha256(packed)[:16]
    if not (copy / name).is_file():
        copy.mkdir(parents=True, exist_ok=True)
        partial = copy / f"{name}.{os.getpid()}.partial"
        with lzma.open(packed, "rb") as source, partial.open("wb") as out:
            for block in iter(lambda: source.read(1 << 20), b""):
                out.write(block)
        os.replace(partial, copy / name)
    return copy / name


def readable_folder(folder: Path) -> Path:
    """Where to read the folder's model from: the folder itself, or where it ships packed weights, their unpacked copy
    in specviz's cache (`weights_file`), the folder's other files linked beside them first. The copy is shared by every
    checkout with the same packed file, so each read links the files of the folder it reads: a link into a checkout
    that was moved or deleted since (a clone in a temporary folder) is made again, never followed."""
    from specviz.models.sources import cache_root

    folder = Path(folder)
    packed = folder / PACKED
    if not packed.is_file():
        return folder
    copy = cache_root() / "unpacked" / _sha256(packed)[:16]
    copy.mkdir(parents=True, exist_ok=True)
    for item in folder.iterdir():
        if item.is_file() and item.name not in (PACKED, WEIGHTS, UNPACKED_FROM):
            _link(copy / item.name, item.resolve())
    return weights_file(folder).parent


def _link(link: Path, target: Path) -> None:
    """`link` pointing at `target`, replaced in one step where it points anywhere else (a reader never finds it missing)."""
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return
    partial = link.with_name(f"{link.name}.{os.getpid()}.link")
    partial.unlink(missing_ok=True)
    partial.symlink_to(target)
    os.replace(partial, link)


def has_own_tokenizer(reference: str) -> bool:
    """A hub id always has; a folder has when it holds tokenizer files (else it reads with its target's tokenizer)."""
    folder = Path(reference)
    return not folder.is_dir() or any((folder / name).is_file() for name in TOKENIZER_FILES)


def read_model(reference: str, dtype: torch.dtype) -> PreTrainedModel:
    """`from_pretrained` for a hub id or a folder, with the folder's packed weights unpacked first. A draft that
    borrows its target's embedding comes with a zero placeholder there, for the caller to replace."""
    folder = Path(reference)
    if not folder.is_dir():
        return AutoModelForCausalLM.from_pretrained(reference, dtype=dtype)
    readable = readable_folder(folder)
    if not shares_target_embeddings(folder):
        return AutoModelForCausalLM.from_pretrained(readable, dtype=dtype)
    model = _read_without_embedding(readable, dtype)
    model.config.name_or_path = str(folder)
    return model


def _read_without_embedding(folder: Path, dtype: torch.dtype) -> PreTrainedModel:
    config = AutoConfig.from_pretrained(folder)
    model_class = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    with torch.device("meta"):  # only to learn the embedding's name and shape; nothing is allocated
        skeleton = model_class(config)
    embedding = skeleton.get_input_embeddings().weight
    name = next(name for name, parameter in skeleton.named_parameters() if parameter is embedding)
    weights = {}
    for path in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(path))
    weights[name] = torch.zeros(embedding.shape, dtype=dtype)
    model = model_class.from_pretrained(None, config=config, state_dict=weights, dtype=dtype)
    model.config.name_or_path = str(folder)
    if (folder / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(folder)
    return model
