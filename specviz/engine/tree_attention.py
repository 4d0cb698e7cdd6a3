"""Attention for a token tree's verify pass that gives every row the very products a one-token step runs.

A tree's node sees the context and its ancestors, which in the verify pass are not side by side: its cousins' keys
sit between them, masked. Masked keys add exact zeros, but the kernels sum a row's terms in blocks whose boundaries
fall by key index, so moving a key changes the rounding: on SmolLM2 in int4 (eager attention, AVX-512) a held-out
answer parted from plain decoding at a three-way bf16 tie after 31 tokens. Here each row attends over exactly its
visible keys, gathered in order (the context, then its path), as plain decoding of that path will see them: with
row-independent weights (int8, int4) every node's logits are then bit-identical to plain decoding's.

`exact_tree_rows` switches a model to it for one forward when its attention is eager or the row-by-row kind (the
paths of the row-independent forms); fused attention (SDPA: float32 and bf16) is not row-independent even for a
chain, and keeps its kernel; so does a model whose attention is not Llama's (GPT-2, GPT-NeoX: no grouped key/value
heads), whose tree rows are then equal to a chain's within rounding only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask
from transformers.models.llama.modeling_llama import eager_attention_forward

TREE_EXACT = "specviz_tree_exact"
ROW_INDEPENDENT_ATTENTION = ("eager", "specviz_row_exact")


def tree_exact_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Eager attention, one row at a time over the keys its mask leaves visible (0 in the additive mask)."""
    visible = attention_mask[0, 0, :, : key.shape[2]] == 0  # (rows, keys): the mask is the same for every head
    outputs = []
    for row in range(query.shape[2]):
        seen = visible[row].nonzero().squeeze(-1)
        attended, _ = eager_attention_forward(
            module,
            query[:, :, row : row + 1],
            key.index_select(2, seen),
            value.index_select(2, seen),
            None,
            scaling,
            dropout,
            **kwargs,
        )
        outputs.append(attended)  # (batch, 1, heads, head_dim)
    return torch.cat(outputs, dim=1), None


AttentionInterface.register(TREE_EXACT, tree_exact_attention)
AttentionMaskInterface.register(TREE_EXACT, eager_mask)


@contextmanager
def exact_tree_rows(model) -> Iterator[None]:
    """For the forwards inside: tree rows attend as one-token steps, where the model's attention keeps rows independent."""
    config = model.config
    previous = config._attn_implementation
    llama_like = any(hasattr(module, "num_key_value_groups") for module in model.modules())  # what eager_attention_forward reads
    if previous not in ROW_INDEPENDENT_ATTENTION or not llama_like:
        yield
        return
    config._attn_implementation = TREE_EXACT
    try:
        yield
    finally:
        config._attn_implementation = previous
