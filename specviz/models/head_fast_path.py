"""The feature head's draft step on the fast path: a preallocated cache and one compiled call per draft step.

Once the target's step is one compiled call (engine/aot_step.py, ~6 ms on SmolLM2-135M and 2 threads), the head's
eager step (some fifty small operations, ~1.4 ms, and its readout, ~0.5 ms) cost a third of a target step: τ ≈ 0.3,
enough to make speculation slower than plain decoding. Here one draft step (fuse the inputs, the layer, the readout
of the kept ids for the last row) is exported and compiled like the target, over a cache rolled back by moving a
length. Only the draft changes, so exactness is untouched: q is still the distribution the draft token was drawn
from, and what is accepted is judged against the target's p as before.

An EAGLE-3 head (models/eagle3_head.py) drafts through the same step, the same static cache and the same compiled
package cache (Eagle3DraftStep). Its compiled step takes the layer's residual h, not the target's aux states: the
catch-up rows' fc (3·hidden → hidden) runs eager before it, so one package serves both the true rows and the fed-back
ones.
"""

from __future__ import annotations

import sys

import torch
from torch import nn
from torch.nn import functional as F

from specviz.engine import static_cache
from specviz.engine.aot_step import CompiledModule
from specviz.engine.compiled import ATTRIBUTE, CACHE_CHUNK, CompiledPart
from specviz.engine.static_cache import Shape, reduced_attention
from specviz.models import eagle3_head, feature_head, head_step
from specviz.models.eagle3_head import Eagle3Head
from specviz.models.feature_head import FeatureHead


class StaticFeatureCache:
    """The head's keys and values in one tensor (2 · kv_heads, capacity, head_dim): rollback moves `length`. A
    request's cache also holds the package its draft steps run (None: eager), chosen when the request starts."""

    def __init__(self, head: FeatureHead, capacity: int = CACHE_CHUNK, compiled: CompiledModule | None = None) -> None:
        self.tensor = _new_cache(head, capacity)
        self.length = 0
        self.compiled = compiled

    def truncate(self, length: int) -> None:
        self.length = min(self.length, length)

    def make_room(self, head: FeatureHead, rows: int) -> None:
        """Grow (rare: a long request) so that `rows` more positions fit; the filled ones move over once."""
        if self.length + rows <= self.tensor.shape[1]:
            return
        grown = _new_cache(head, -(-(self.length + rows) // CACHE_CHUNK) * CACHE_CHUNK)
        grown[:, : self.length] = self.tensor[:, : self.length]
        self.tensor = grown


class DraftStep(nn.Module):
    """One draft step over the static cache: (the tokens' embeddings, their input features, positions, visible,
    cache) → (f̂ at each position, the kept ids' logits of the last one). FeatureHead.step's arithmetic, the same
    function (models/head_step.layer_step), with the keys written into the static cache and the attention written as
    the compiler's reductions (engine/static_cache.reduced_attention)."""

    def __init__(self, head: FeatureHead) -> None:
        super().__init__()
        self.head = head
        # the rotary frequencies are a plain attribute of the head: as a buffer here they are read live
        # (engine/aot_step.load), not a constant frozen into the package; the borrowed embedding is looked up outside
        # (draft_step), so the package carries no copy of the target's embedding table
        self.register_buffer("rope_inverse", head.rope_inverse.to(head.embedding.device), persistent=False)
        shape = head.shape
        self.attention_shape = Shape(shape.heads, shape.kv_heads, shape.head_dim, shape.head_dim**-0.5)
        self.input_width = shape.feature_width  # what the compiled step reads (an EAGLE-3 step reads h)
        self.sources = (static_cache, feature_head, head_step, sys.modules[__name__])  # what the package's key hashes

    def inputs(self, features: torch.Tensor) -> torch.Tensor:
        """What runs eager before the compiled step: nothing here."""
        return features

    def forward(
        self, embedded, features, positions, visible, cache
    ):  # (n, hidden), (n, width), (n,), (visible,), (2 kv, length, d)
        head, kv_heads = self.head, self.head.shape.kv_heads
        torch._check(embedded.shape[0] == positions.shape[0])

        def attend(q, k, v):  # (1, heads, n, d), (1, kv_heads, n, d) × 2 → (1, heads, n, d)
            cache.index_copy_(1, positions, torch.cat([k[0], v[0]]))  # write this step's keys and values
            keys, values = cache[:kv_heads, : visible.shape[0]], cache[kv_heads:, : visible.shape[0]]
            unseen = visible[None, :] > positions[:, None]  # (n, visible): causal
            return reduced_attention(self.attention_shape, q[0], keys[:, None], values[:, None], unseen)[None]

        # one sequence, batched as the eager steps run it: compiled, a bf16 head's residual rounds as it always has
        x = head.fused_input(embedded, features)[None]  # (1, n, width)
        predicted = head_step.layer_step(head, x, positions, self.rope_inverse, attend)[0]  # (n, hidden)
        return predicted, head.kept_logits(predicted[-1:])


class Eagle3DraftStep(DraftStep):
    """(the tokens' embeddings, h, positions, visible, cache) → (the layer's output at each position, the draft
    vocabulary's logits of the last one): DraftStep through the EAGLE-3 head's pieces, reading h."""

    def __init__(self, head: Eagle3Head) -> None:
        super().__init__(head)
        self.input_width = head.shape.hidden  # what the compiled step reads: h
        self.sources = (*self.sources, eagle3_head)

    def inputs(self, features: torch.Tensor) -> torch.Tensor:
        """The target's aux states through fc (eager); a fed-back h as it is."""
        return self.head.hidden_in(features)


class FastHead(CompiledPart):
    """A feature head's draft step (DraftStep): its package built, cached, loaded and warmed up as a model's are
    (engine/compiled.CompiledPart); until it is loaded, or where compiling cannot work, the same step runs eager.
    Any head with FeatureHead's drafting interface (`shape`, `embedding`, `fuse`, `finish`, `kept_logits`, `widen`…)."""

    what = "the head's step"

    def __init__(self, head: FeatureHead, compile_step: bool = True) -> None:
        super().__init__(compile_step, head.embedding.device)
        self.head = head
        self.step_module = draft_step_for(head)

    def export(self) -> tuple:
        return step_export(self.step_module)

    def new_cache(self) -> StaticFeatureCache:
        """A request's cache, with the draft step it runs from start to end (the package loaded now, else eager)."""
        return StaticFeatureCache(self.head, compiled=self.package)

    @torch.inference_mode()
    def draft_step(self, token_ids: torch.Tensor, features: torch.Tensor, cache: StaticFeatureCache):
        """Feed positions after the cache: (f̂ of the last one (1, hidden), its full-width logits (1, vocab))."""
        rows, start = token_ids.shape[0], cache.length
        cache.make_room(self.head, rows)
        device = cache.tensor.device
        positions = torch.arange(start, start + rows, device=device)
        visible = torch.arange(max(2, start + rows), device=device)  # the export's floor: a lone first one's is masked
        features = self.step_module.inputs(features.view(rows, -1).to(self.head.input_norm.weight.dtype))
        step = cache.compiled if cache.compiled is not None else self.step_module
        embedded = F.embedding(token_ids, self.head.embedding)
        predicted, kept = step(embedded, features, positions, visible, cache.tensor)
        cache.length = start + rows
        return predicted[-1:], self.head.widen(kept)


def enable_fast_head(head: FeatureHead, compile_step: bool = True) -> FastHead:
    """Give a loaded head its draft step over a static cache (once), compiled where `compile_step` and compiling can
    work here, else the same step eager."""
    existing = getattr(head, ATTRIBUTE, None)
    if existing is not None:
        return existing
    fast = FastHead(head, compile_step)
    object.__setattr__(head, ATTRIBUTE, fast)  # not a submodule: the head's state dict stays as it was
    return fast


def draft_step_for(head) -> nn.Module:
    """The head's draft step: an EAGLE-3 head's reads h (Eagle3DraftStep), a feature head's its features."""
    return Eagle3DraftStep(head) if isinstance(head, Eagle3Head) else DraftStep(head)


def fast_head(head: FeatureHead) -> FastHead | None:
    return getattr(head, ATTRIBUTE, None)


def step_export(step: DraftStep):
    """What exporting the draft step takes: the module, example inputs, their symbolic sizes, what its key describes."""
    head = step.head
    device = head.embedding.device
    rows = torch.export.Dim("rows", min=1, max=4096)
    seen = torch.export.Dim("seen", min=2, max=65535)
    length = torch.export.Dim("length", min=3, max=65536)
    example = (
        torch.zeros(3, head.shape.hidden, dtype=head.embedding.dtype, device=device),
        torch.zeros(3, step.input_width, dtype=head.input_norm.weight.dtype, device=device),
        torch.arange(3, 6, device=device),
        torch.arange(6, device=device),
        _new_cache(head, 8),
    )
    shapes = ({0: rows}, {0: rows}, {0: rows}, {0: seen}, {1: length})
    described = {"device": device.type, "form": head.form, "shape": repr(head.shape)}
    return step, example, shapes, described, step.sources


def _new_cache(head: FeatureHead, capacity: int) -> torch.Tensor:
    shape = head.shape
    with torch.inference_mode():  # what every draft step runs in; zeros: a masked slot adds exact zeros
        return torch.zeros(
            2 * shape.kv_heads, capacity, shape.head_dim, dtype=head.input_norm.weight.dtype, device=head.embedding.device
        )
