"""A target's own tensors by name, as they were before any weight form packed them.

A head borrows rows and matrices from its target (the embedding, the LM head's kept rows, the last layer a low-rank
head starts from). By the time a head loads, the target's linear layers may be packed into int4/int8/w4a8 kernels'
layouts, so a matrix is read from memory only while it is still a plain tensor, else from the target's weights file
(a local folder, or the hub's cached snapshot), by the name the file stores it under.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import PreTrainedModel

SINGLE, INDEX = "model.safetensors", "model.safetensors.index.json"
# a model with tied embeddings stores its LM head once, as the embedding; a weight form unties it in memory (the head
# becomes its own packed copy, weight_forms.apply_form), so by the time a head loads the config no longer says so
STORED_AS = {"lm_head.weight": "model.embed_tokens.weight"}


def target_tensor(target: PreTrainedModel, name: str) -> torch.Tensor:
    """The tensor `name` (a state-dict key such as `model.layers.27.mlp.up_proj.weight`) of the target, in the dtype it is
    stored in (a caller takes the rows it needs before widening: the coder target's LM head is 467 MB in bf16)."""
    in_memory = dict(target.named_parameters()).get(name)
    if in_memory is None:
        in_memory = dict(target.named_buffers()).get(name)
    if in_memory is not None and in_memory.is_floating_point():
        return in_memory.detach()
    return _from_file(target, name)


def readout_rows(target: PreTrainedModel) -> str:
    """The name of the matrix the target's logits are read out with: its LM head, or the embedding where tied."""
    return "model.embed_tokens.weight" if target.config.tie_word_embeddings else "lm_head.weight"


def _weights_files(target: PreTrainedModel) -> tuple[Path, dict[str, str] | None]:
    from transformers.utils import cached_file

    source = target.config.name_or_path
    index = cached_file(source, INDEX, _raise_exceptions_for_missing_entries=False)
    if index:
        return Path(index).parent, json.loads(Path(index).read_text())["weight_map"]
    single = cached_file(source, SINGLE, _raise_exceptions_for_missing_entries=False)
    if single:
        return Path(single).parent, None
    from specviz.models.stored import weights_file  # a bundled folder: model.safetensors.xz, unpacked once

    return Path(weights_file(Path(source), SINGLE)).parent, None


def _from_file(target: PreTrainedModel, name: str) -> torch.Tensor:
    folder, weight_map = _weights_files(target)
    from specviz.models.stored import weights_file

    if weight_map is not None:
        name = name if name in weight_map else STORED_AS.get(name, name)
        if name not in weight_map:
            raise KeyError(f"{folder / INDEX} names no tensor {name}")
    path = folder / weight_map[name] if weight_map else Path(weights_file(folder, SINGLE))
    with safe_open(str(path), framework="pt") as stored:
        names = set(stored.keys())
        name = name if name in names else STORED_AS.get(name, name)  # a tied model's file: the LM head is the embedding
        if name not in names:
            raise KeyError(f"{path} holds no tensor {name}")
        return stored.get_tensor(name)
