"""A draft head over part of the vocabulary (EAGLE-3, FR-Spec): cheaper steps, and exactness kept.

A small draft spends most of a step in its LM head (hidden × vocabulary). A distilled draft may ship
`draft_vocabulary.json`, the ids the target actually writes; the head then multiplies by those rows only
and gives every other token a logit of −∞. So q is 0 outside the kept ids: such tokens are never drafted,
min(1, p/q) is only taken where q > 0, and the residual norm(max(0, p − q)) still spans the target's whole
vocabulary, which is what keeps the output distribution exactly the target's. The model still returns
full-width logits, so the engine, transformers' assisted generation and every view need no special case.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel

VOCABULARY_FILE = "draft_vocabulary.json"


class ReducedHead(nn.Module):
    """hidden → full-vocabulary logits, computed on the kept rows only (−∞ elsewhere)."""

    def __init__(self, weight: torch.Tensor, kept_ids: list[int], vocab_size: int) -> None:
        super().__init__()
        kept = torch.tensor(kept_ids, dtype=torch.long, device=weight.device)
        self.register_buffer("kept_ids", kept, persistent=False)
        self.register_buffer("weight", weight[kept].detach().clone(), persistent=False)  # (kept, hidden)
        self.vocab_size = vocab_size

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # (..., hidden) → (..., vocab)
        kept_logits = hidden @ self.weight.T  # (..., kept)
        logits = kept_logits.new_full((*kept_logits.shape[:-1], self.vocab_size), float("-inf"))
        return logits.index_copy_(-1, self.kept_ids, kept_logits)


class KeptRowsHead(nn.Module):
    """ReducedHead's arithmetic with the kept rows as a linear layer (`rows`), so a weight form (models/weight_forms.py)
    can quantise it like the model's other layers: an independent draft in int4 keeps its head in int4 too."""

    def __init__(self, weight: torch.Tensor, kept_ids: list[int], vocab_size: int) -> None:
        super().__init__()
        kept = torch.tensor(kept_ids, dtype=torch.long, device=weight.device)
        self.register_buffer("kept_ids", kept, persistent=False)
        self.rows = nn.Linear(weight.shape[1], len(kept_ids), bias=False, device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            self.rows.weight.copy_(weight[kept])
        self.vocab_size = vocab_size

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # (..., hidden) → (..., vocab)
        kept_logits = self.rows(hidden)  # (..., kept)
        logits = kept_logits.new_full((*kept_logits.shape[:-1], self.vocab_size), float("-inf"))
        return logits.index_copy_(-1, self.kept_ids, kept_logits)


def keep_rows(model: PreTrainedModel, kept_ids: list[int]) -> PreTrainedModel:
    """Give an independent draft a head over `kept_ids` only, as a linear layer a weight form can take (in place)."""
    vocab_size = model.config.vocab_size
    if not kept_ids or max(kept_ids) >= vocab_size or min(kept_ids) < 0:
        raise ValueError(f"draft vocabulary ids must lie in [0, {vocab_size})")
    model.set_output_embeddings(KeptRowsHead(model.get_output_embeddings().weight, kept_ids, vocab_size))
    if hasattr(model.config, "tie_word_embeddings"):
        model.config.tie_word_embeddings = False  # the embedding stays whole; only the head is cut
    return model


def read_vocabulary_file(path: Path) -> list[int]:
    """The kept ids in a vocabulary file (the format `save_vocabulary` writes)."""
    return json.loads(Path(path).read_text())["kept_token_ids"]


def reduce_head(model: PreTrainedModel, kept_ids: list[int]) -> PreTrainedModel:
    """Give the model a head over `kept_ids` only (in place); its logits keep their full width."""
    vocab_size = model.config.vocab_size
    if not kept_ids or max(kept_ids) >= vocab_size or min(kept_ids) < 0:
        raise ValueError(f"draft vocabulary ids must lie in [0, {vocab_size})")
    model.set_output_embeddings(ReducedHead(model.get_output_embeddings().weight, kept_ids, vocab_size))
    return model


def save_vocabulary(folder: Path, kept_ids: list[int], vocab_size: int) -> None:
    """Write the head's kept ids beside the weights."""
    (Path(folder) / VOCABULARY_FILE).write_text(json.dumps({"vocab_size": vocab_size, "kept_token_ids": kept_ids}))


SHARING_FILE = "shares_target_embeddings.json"


def mark_sharing(folder: Path) -> None:
    """Record that this draft borrows the target's embedding (and tied head) at load time."""
    (Path(folder) / SHARING_FILE).write_text(json.dumps({"embedding": "the target's input embedding, shared at load time"}))


def shares_target_embeddings(folder: Path) -> bool:
    return (Path(folder) / SHARING_FILE).is_file()


def borrow_embeddings(draft: PreTrainedModel, target: PreTrainedModel) -> None:
    """Give a sharing draft the target's embedding (the same tensor, no copy) and tie its head to it."""
    if draft.get_input_embeddings().weight.shape != target.get_input_embeddings().weight.shape:
        raise ValueError("the draft shares the target's embedding, but their shapes differ")
    draft.get_input_embeddings().weight = target.get_input_embeddings().weight
    draft.get_output_embeddings().weight = target.get_input_embeddings().weight


def read_vocabulary(folder: Path) -> list[int] | None:
    """The kept ids of a draft folder, or None when its head covers the whole vocabulary."""
    path = Path(folder) / VOCABULARY_FILE
    if not path.is_file():
        return None
    return read_vocabulary_file(path)
