"""Stage 2: the draft's shape, its vocabulary, and a start from the target's own embeddings.

The draft is a plain Llama with the target's tokenizer and tied embeddings, so transformers loads it
anywhere. Its *head* may be cut to the tokens the target actually writes (EAGLE-3's and FR-Spec's trick):
a small draft spends most of its step in the head, and the kept ids are saved beside the weights in
`draft_vocabulary.json`. specviz then gives the draft a head over those rows only, and q is 0 outside
them, which keeps speculative decoding exact (docs/ALGORITHM.md, "Drafts with a smaller vocabulary").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel


@dataclass(frozen=True)
class DraftShape:
    """Width, depth and head size of a distilled draft."""

    hidden: int = 256
    layers: int = 2
    ffn: int = 768
    heads: int = 4
    head_vocabulary: int = 8192  # 0: the target's whole vocabulary
    share_embeddings: bool = False  # EAGLE's way: the target's width, its first layers to start from, and its
    # embedding and head borrowed at load time (not shipped: the folder holds only the draft's own layers)


def draft_config(target: PreTrainedModel, shape: DraftShape) -> LlamaConfig:
    """A Llama config with the target's vocabulary, special tokens and context length."""
    config = target.config
    return LlamaConfig(
        vocab_size=config.vocab_size,
        hidden_size=shape.hidden,
        intermediate_size=shape.ffn,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads,
        max_position_embeddings=config.max_position_embeddings,
        rope_parameters=getattr(config, "rope_parameters", None),
        rms_norm_eps=config.rms_norm_eps,
        tie_word_embeddings=True,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )


def kept_token_ids(token_weights: torch.Tensor, size: int, always: Iterable[int]) -> list[int]:
    """The `size` ids with the most weight (the target's probability mass on its own answers), plus `always`."""  # (vocab,) → ids
    always = sorted(set(always))
    ranked = torch.argsort(token_weights, descending=True).tolist()
    kept = set(always)
    for token in ranked:
        if len(kept) >= size:
            break
        kept.add(token)
    return sorted(kept)


@torch.no_grad()
def build_draft(target: PreTrainedModel, shape: DraftShape, seed: int = 0) -> LlamaForCausalLM:
    """A new draft whose embedding is the target's, projected onto its top principal directions.

    The target's head is its embedding (tied), so a draft that starts from the same token geometry
    starts with a head that already ranks tokens much as the target's does.
    """
    torch.manual_seed(seed)
    draft = LlamaForCausalLM(draft_config(target, shape)).float()
    embedding = target.get_input_embeddings().weight.float()  # (vocab, target hidden)
    centred = embedding - embedding.mean(0, keepdim=True)
    _, _, directions = torch.linalg.svd(centred[:: max(1, len(centred) // 16384)], full_matrices=False)
    projected = embedding @ directions[: shape.hidden].T  # (vocab, hidden)
    projected *= draft.get_input_embeddings().weight.std() / projected.std()
    draft.get_input_embeddings().weight.copy_(projected)
    return draft


@torch.no_grad()
def build_sharing_draft(target: PreTrainedModel, shape: DraftShape) -> LlamaForCausalLM:
    """A draft at the target's width that starts as the target's first layers and borrows its embedding and head.

    Only the draft's own layers and final norm are trained and saved; the embedding (also the head: tied)
    stays the target's, so the draft reads and writes tokens exactly as the target does.
    """
    config = target.config.to_dict()
    config.update(num_hidden_layers=shape.layers, tie_word_embeddings=True)
    config.pop("quantization_config", None)
    draft = LlamaForCausalLM(LlamaConfig(**config)).float()
    shared = torch.nn.Parameter(target.get_input_embeddings().weight.detach().float(), requires_grad=False)
    draft.model.embed_tokens.weight = shared  # the target's, frozen
    draft.lm_head.weight = shared  # tied, as in the target
    for own, theirs in zip(draft.model.layers, target.model.layers):
        own.load_state_dict({name: value.float() for name, value in theirs.state_dict().items()})
    draft.model.norm.load_state_dict({name: value.float() for name, value in target.model.norm.state_dict().items()})
    return draft
