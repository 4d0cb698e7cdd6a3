"""The EAGLE-3 head's draft step on the fast path (models/head_fast_path.py runs it: the same static cache, the same
compiled-package cache, the same warm-up): one draft step over the static cache, compiled like the target's.

The compiled step takes the layer's residual h, not the target's aux states: the catch-up rows' fc (3·hidden → hidden)
runs eager before it (`inputs`), so one package serves both the true rows and the fed-back ones. Only the draft
changes, so exactness is untouched.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from specviz.engine import static_cache
from specviz.engine.static_cache import Shape, reduced_attention
from specviz.models import eagle3_head
from specviz.models.eagle3_head import Eagle3Head
from specviz.models.feature_head import _rotate


class Eagle3DraftStep(nn.Module):
    """(the tokens' embeddings, h, positions, visible, cache) → (the layer's output at each position, the draft
    vocabulary's logits of the last one). Eagle3Head.step's arithmetic over the static cache."""

    def __init__(self, head: Eagle3Head) -> None:
        super().__init__()
        self.head = head
        self.register_buffer("rope_inverse", head.rope_inverse.to(head.embedding.device), persistent=False)
        shape = head.shape
        self.attention_shape = Shape(shape.heads, shape.kv_heads, shape.head_dim, shape.head_dim**-0.5)
        self.input_width = shape.hidden  # what the compiled step reads: h
        self.sources = (static_cache, eagle3_head, sys.modules[__name__])  # what the package's key hashes

    def inputs(self, features: torch.Tensor) -> torch.Tensor:
        """The target's aux states through fc (eager); a fed-back h as it is."""
        return self.head.hidden_in(features)

    def forward(self, embedded, h, positions, visible, cache):  # (n, hidden), (n, hidden), (n,), (visible,), (2 kv, length, d)
        head, shape = self.head, self.head.shape
        torch._check(embedded.shape[0] == positions.shape[0])
        rows, heads, kv_heads, head_dim = embedded.shape[0], shape.heads, shape.kv_heads, shape.head_dim
        x = torch.cat([embedded.to(h.dtype), h], dim=-1)  # (n, 2·hidden)
        normed = head.attention_input(x)
        attention = head.midlayer.self_attn
        q = attention.q_proj(normed).view(rows, heads, head_dim).transpose(0, 1)  # (heads, n, d)
        k = attention.k_proj(normed).view(rows, kv_heads, head_dim).transpose(0, 1)
        v = attention.v_proj(normed).view(rows, kv_heads, head_dim).transpose(0, 1)
        angles = positions.float()[:, None] * self.rope_inverse[None, :]
        angles = torch.cat([angles, angles], dim=-1)
        cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        cache.index_copy_(1, positions, torch.cat([k, v]))
        keys, values = cache[:kv_heads, : visible.shape[0]], cache[kv_heads:, : visible.shape[0]]
        unseen = visible[None, :] > positions[:, None]
        attended = reduced_attention(self.attention_shape, q, keys[:, None], values[:, None], unseen)  # (heads, n, d)
        predicted = head.finish(x[None], attended[None])[0]  # (n, hidden)
        return predicted, head.kept_logits(predicted[-1:])
