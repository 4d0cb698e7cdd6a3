"""One drafting step of a feature head's layer: the arithmetic every drafting path shares.

A head (FeatureHead, or Eagle3Head in EAGLE-3's form) drafts through one decoder layer. A step over new positions:

    1. q, k, v from the layer's input x (the head's attention norm, then its projections); q and k rotated at the
       positions (float32 angles, as the heads are trained)
    2. the new keys and values join the head's cache, and each new row attends over what it may see
    3. the residual and the MLP (`head.finish`) give the predicted feature

`layer_step` is that step. Its callers differ only in step 2, the `attend` they pass (which cache holds the keys,
which kernel sums the attention, which mask): `cached_step` over the eager cache (FeatureCache, torch's attention),
for a chain (`FeatureHead.step`, also the EAGLE-3 head's) and for a tree's nodes at their positions and mask
(`FeatureDrafter` in drafting/drafters.py); and the fast path's `DraftStep` over the static cache
(models/head_fast_path.py, for both kinds of head), whose attention is the compiler's reductions
(engine/static_cache.reduced_attention). Training (`FeatureHead.forward`, `second_step`, `Eagle3Head.unrolled_step`)
builds its q, k and v with the same `queries_keys_values`.

Both kinds of head give what this needs: `shape`, `rope_inverse`, `attention_input(x)` (x normed as the projections
read it), `qkv_projections` and `finish`; the eager steps also `layer_input`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn import functional as F

from specviz.engine.static_cache import rotate_half

# (q (…, heads, n, d), k and v (…, kv_heads, n, d), the new rows') → the attention's output (…, heads, n, d)
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def rotary(positions: torch.Tensor, rope_inverse: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles at `positions`, computed in float32 and then cast (bf16 angles drift)."""  # (…, n) → (…, n, d)
    angles = positions.float()[..., None] * rope_inverse  # (…, n, head_dim/2)
    angles = torch.cat([angles, angles], dim=-1)  # (…, n, head_dim)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + rotate_half(x) * sin


def queries_keys_values(head, x: torch.Tensor, positions: torch.Tensor, rope_inverse: torch.Tensor):
    """The layer's input → q (…, heads, n, d) and k (…, kv_heads, n, d), rotated at `positions`, and v."""  # x (…, n, width)
    *batch, rows, _ = x.shape
    shape = head.shape
    normed = head.attention_input(x)
    q_proj, k_proj, v_proj = head.qkv_projections
    q = q_proj(normed).view(*batch, rows, shape.heads, shape.head_dim).transpose(-3, -2)
    k = k_proj(normed).view(*batch, rows, shape.kv_heads, shape.head_dim).transpose(-3, -2)
    v = v_proj(normed).view(*batch, rows, shape.kv_heads, shape.head_dim).transpose(-3, -2)
    cos, sin = rotary(positions, rope_inverse, q.dtype)
    if positions.dim() > 1:  # each sequence its own positions (b, n): one angle per row, shared by the heads
        cos, sin = cos.unsqueeze(-3), sin.unsqueeze(-3)
    return rotate(q, cos, sin), rotate(k, cos, sin), v


def layer_step(head, x: torch.Tensor, positions: torch.Tensor, rope_inverse: torch.Tensor, attend: Attend) -> torch.Tensor:
    """One draft step of the head's layer over new rows: the predicted feature at each."""  # (…, n, width) → (…, n, hidden)
    q, k, v = queries_keys_values(head, x, positions, rope_inverse)  # 1. the new rows' queries, keys and values
    attended = attend(q, k, v)  # 2. into the cache, and attended over it
    return head.finish(x, attended)  # 3. residual and MLP


def cached_step(head, token_ids: torch.Tensor, features: torch.Tensor, cache, positions: torch.Tensor, mask) -> torch.Tensor:
    """The eager drafting step over a FeatureCache: new rows at `positions` that see the cache and one another as
    `mask` says (None: every key, as for one new row)."""  # (n,), (n, width), …, (n, keys) → (n, hidden)
    rows = token_ids.numel()
    x = head.layer_input(token_ids.view(1, -1), features.view(1, rows, -1).to(head.input_norm.weight.dtype))
    groups = head.shape.heads // head.shape.kv_heads

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k, v = cache.append(k, v)
        return F.scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1), attn_mask=mask)

    return layer_step(head, x, positions, head.rope_inverse.to(positions.device), attend)[0]
