"""transformers' forward with the fast path's attention, so a token's output does not depend on the rows beside it.

A model in a weight-only form (models/weight_forms.py) runs every matrix product of its layers on kernels that give
each row its own accumulator (int4, int8, w4a8). What remains is attention. transformers' eager attention multiplies
q·kᵀ and weights·v as bf16 matrix products, and on a CPU torch hands those to oneDNN, which picks its kernel by the
shape, the number of query rows included:

- with AMX, oneDNN's brgemm matmul sends "small shapes" to its AVX-512-BF16 (VNNI) kernel and larger ones to AMX
  tiles (`is_small_shapes` in its brgemm_matmul_utils.cpp: a bf16 product whose A block is at most 126 bytes, which a
  single query row is and five are not), and the two add a dot product's pairs in another order; so one token alone
  takes one kernel and the same token in a 5-row verify pass the other (issue 43, an Intel Xeon with AMX: |Δ logit|
  0.312 on SmolLM2 in int4, and greedy speculation parted from plain decoding);
- with AVX-512 but no bf16 instructions (`ONEDNN_MAX_CPU_ISA=AVX512_CORE` reproduces it), oneDNN's `gemm:jit:bf16`
  blocks by rows: |Δ logit| up to 0.625 on SmolLM2 in int4 here (docs/testing.md gives the command).

This attention is engine/static_cache.py's `reduced_attention`, the fast path's own: bf16 products summed in float32
with torch's elementwise and reduction kernels, which compute a row the same way whatever the rows beside it and call
no oneDNN or MKL product, so nothing in it changes with the CPU's matrix units. Each row attends over exactly the
keys its mask lets it see, in order, with masked pads after them, as a one-token step of its path holds them: a chain's
rows share the context's keys, a token tree's node (CachedDecoder.forward_tree) gets its context then its ancestors,
gathered, so a node's logits are its path's one-token steps to the bit here too.

It is registered into transformers' table of attentions under one name (`ROW_EXACT`) when a weight form first asks
for it, never at import, and a model is set to it once, when its weights are put in the form. Models whose attention
adds what this one does not compute (Gemma 2's soft cap, gpt-oss's sinks) keep eager attention (`fits`).
"""

from __future__ import annotations

import torch
from torch import nn

from specviz.engine.row_exactness import ROW_EXACT_ATTENTION
from specviz.engine.static_cache import EAGER_PRODUCTS, Shape, reduced_attention

ROW_EXACT = ROW_EXACT_ATTENTION  # the name engine/row_exactness.py checks a model's config for


def row_exact_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention interface: (batch, heads, rows, head_dim) queries over (batch, kv_heads, keys, head_dim)
    keys and values → ((batch, rows, heads, head_dim), None). `attention_mask` is additive (0 where a key is seen,
    the dtype's minimum where not; eager_mask and CachedDecoder.forward_tree make it so) or None (every key seen)."""
    for name in ("softcap", "s_aux"):
        if kwargs.get(name) is not None:
            raise ValueError(f"the row-exact attention does not compute {name}; this model must keep eager attention")
    batch, heads, rows, head_dim = query.shape
    scale = scaling if scaling is not None else head_dim**-0.5
    shape = Shape(heads, key.shape[1], head_dim, scale)
    keys = key.shape[2]
    out = torch.stack([attend_one(shape, query[b], key[b], value[b], seen(attention_mask, b, rows, keys)) for b in range(batch)])
    return out.transpose(1, 2).contiguous(), None  # (batch, rows, heads, head_dim)


def seen(attention_mask: torch.Tensor | None, b: int, rows: int, keys: int) -> torch.Tensor:
    """Which keys each row sees, (rows, keys) bool, from an additive or boolean mask (None: all)."""
    if attention_mask is None:
        return torch.ones(rows, keys, dtype=torch.bool, device="cpu")
    mask = attention_mask[b, 0, -rows:, -keys:] if attention_mask.dim() == 4 else attention_mask[b, -rows:, -keys:]
    return (mask if mask.dtype == torch.bool else mask == 0).cpu()


def attend_one(shape: Shape, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """One sequence's rows: each over its seen keys in order, padded at the end to the widest row and masked. A long
    forward (a prefill) goes in parts of rows, so that the float32 products fit in memory, as the fast path's does."""  # (heads, rows, d) → same
    rows = query.shape[1]
    step = max(1, EAGER_PRODUCTS // max(1, shape.n_heads * visible.shape[1] * shape.head_dim))
    parts = [
        attend_rows(shape, query[:, first : first + step].contiguous(), key, value, visible[first : first + step])
        for first in range(0, rows, step)
    ]
    return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]


def attend_rows(shape: Shape, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    counts = visible.sum(-1)  # (rows,)
    width = int(counts.max())
    order = torch.argsort((~visible).to(torch.uint8), dim=-1, stable=True)[:, :width]  # seen keys first, in order
    unseen = torch.arange(width)[None, :] >= counts[:, None]  # (rows, width): the pads after a row's own keys
    if torch.equal(order, torch.arange(width).expand_as(order)):  # every row sees a prefix (a chain, a step): one slice
        keys, values = key[:, None, :width], value[:, None, :width]  # (kv_heads, 1, width, d)
    else:  # a tree's node or a window: its own keys gathered, its path's order kept
        index = order.to(key.device)
        keys, values = key[:, index], value[:, index]  # (kv_heads, rows, width, d)
    return reduced_attention(shape, query, keys, values, unseen.to(query.device) if bool(unseen.any()) else None)


def fits(model: nn.Module) -> bool:
    """Whether this attention computes what the model's own does: not where it soft-caps its scores (Gemma 2) or
    adds attention sinks (gpt-oss)."""
    config = getattr(model, "config", None)
    if config is not None and getattr(config, "attn_logit_softcapping", None):
        return False
    return not any(hasattr(module, "sinks") for module in model.modules())


def row_exact() -> str:
    """The attention's name, told to transformers on the first call (never at import), with eager attention's mask."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ROW_EXACT, row_exact_attention)
    AttentionMaskInterface.register(ROW_EXACT, eager_mask)  # additive: 0 where a key is seen
    return ROW_EXACT
