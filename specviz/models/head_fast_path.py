"""The feature head's draft step on the fast path: a preallocated cache and one compiled call per draft step.

Once the target's step is one compiled call (engine/aot_step.py, ~6 ms on SmolLM2-135M and 2 threads), the head's
eager step (some fifty small operations, ~1.4 ms, and its readout, ~0.5 ms) cost a third of a target step: τ ≈ 0.3,
enough to make speculation slower than plain decoding. Here one draft step (fuse the inputs, the layer, the readout
of the kept ids for the last row) is exported and compiled like the target, over a cache rolled back by moving a
length. Only the draft changes, so exactness is untouched: q is still the distribution the draft token was drawn
from, and what is accepted is judged against the target's p as before.
"""

from __future__ import annotations

import threading

import torch
from torch import nn
from torch.nn import functional as F

from specviz.engine import static_cache
from specviz.engine.aot_step import CompiledModule, load_or_compile_module, package_path
from specviz.engine.compiled import ATTRIBUTE, CACHE_CHUNK, CompileReport, compiler_missing, timed_build
from specviz.engine.static_cache import Shape, reduced_attention
from specviz.models import feature_head
from specviz.models.feature_head import FeatureHead, _rotate


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
    cache) → (f̂ at each position, the kept ids' logits of the last one). FeatureHead.step's arithmetic, with the attention written as
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
        self.input_width = shape.feature_width  # what the compiled step reads (an EAGLE-3 step reads h: eagle3_fast_path)
        self.sources = (static_cache, feature_head)  # what the package's key hashes

    def inputs(self, features: torch.Tensor) -> torch.Tensor:
        """What runs eager before the compiled step: nothing here."""
        return features

    def forward(
        self, embedded, features, positions, visible, cache
    ):  # (n, hidden), (n, width), (n,), (visible,), (2 kv, length, d)
        head, shape = self.head, self.head.shape
        torch._check(embedded.shape[0] == positions.shape[0])
        rows, heads, kv_heads, head_dim = embedded.shape[0], shape.heads, shape.kv_heads, shape.head_dim
        embedded = embedded.to(features.dtype)
        last, *lower = features.split(shape.hidden, dim=-1)
        lower = [norm(state) for norm, state in zip(head.lower_norms, lower)]
        x = head.fuse(torch.cat([embedded, last, *lower], dim=-1))  # (n, hidden)
        normed = head.input_norm(x)
        q = head.q_proj(normed).view(rows, heads, head_dim).transpose(0, 1)  # (heads, n, d)
        k = head.k_proj(normed).view(rows, kv_heads, head_dim).transpose(0, 1)
        v = head.v_proj(normed).view(rows, kv_heads, head_dim).transpose(0, 1)
        angles = positions.float()[:, None] * self.rope_inverse[None, :]  # (n, d/2), float32 as FeatureHead.rotary
        angles = torch.cat([angles, angles], dim=-1)
        cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        cache.index_copy_(1, positions, torch.cat([k, v]))
        keys, values = cache[:kv_heads, : visible.shape[0]], cache[kv_heads:, : visible.shape[0]]
        unseen = visible[None, :] > positions[:, None]  # (n, visible): causal
        attended = reduced_attention(self.attention_shape, q, keys[:, None], values[:, None], unseen)  # (heads, n, d)
        predicted = head.finish(x[None], attended[None])[0]  # (n, hidden)
        return predicted, head.kept_logits(predicted[-1:])


class FastHead:
    """A feature head's compiled draft step (built or loaded once, as engine/compiled.FastModel builds a model's),
    with the same report and warm-up; until it is loaded, the same step runs eager."""

    def __init__(self, head: FeatureHead) -> None:
        self.head = head
        self.step_module = draft_step_for(head)
        self.report = CompileReport(compiled=True)
        self._compiled: CompiledModule | None = None
        self._building = threading.Lock()

    @property
    def engine(self) -> str:
        return "compiled" if self._compiled is not None else "eager"

    def new_cache(self) -> StaticFeatureCache:
        """A request's cache, with the draft step it runs from start to end (the package loaded now, else eager)."""
        return StaticFeatureCache(self.head, compiled=self._compiled)

    @torch.inference_mode()
    def draft_step(self, token_ids: torch.Tensor, features: torch.Tensor, cache: StaticFeatureCache):
        """Feed positions after the cache: (f̂ of the last one (1, hidden), its full-width logits (1, vocab))."""
        rows, start = token_ids.shape[0], cache.length
        cache.make_room(self.head, rows)
        device = cache.tensor.device
        positions = torch.arange(start, start + rows, device=device)
        visible = torch.arange(start + rows, device=device)
        features = self.step_module.inputs(features.view(rows, -1).to(self.head.input_norm.weight.dtype))
        compiled = cache.compiled if start + rows >= 2 else None  # the export's floor: two positions seen
        step = compiled if compiled is not None else self.step_module
        embedded = F.embedding(token_ids, self.head.embedding)
        predicted, kept = step(embedded, features, positions, visible, cache.tensor)
        cache.length = start + rows
        return predicted[-1:], self.head.widen(kept)

    def build(self) -> CompiledModule | None:
        """Load the head's package from the cache, or export and compile it here (timed); on failure, eager from then
        on. Only a process that runs no request meanwhile compiles (engine/compiled.FastModel.build says why)."""
        with self._building:
            if self._compiled is None and self.report.compiled:
                make = lambda: load_or_compile_module(*_step_export(self.step_module))  # noqa: E731
                self._compiled = timed_build(self.report, "the head's step", make)
            return self._compiled

    def is_cached(self) -> bool:
        """Whether building means loading a cached package, not compiling one."""
        module, _example, _shapes, described, sources = _step_export(self.step_module)
        return package_path(module, described, sources).is_file()

    def load_cached(self) -> bool:
        """Load the package if the cache holds it (never compiles): whether the head now drafts compiled."""
        if self._compiled is None and self.report.compiled and self.is_cached():
            self.build()
        return self._compiled is not None

    def warm_up(self) -> CompileReport:
        self.build()
        return self.report


def enable_fast_head(head: FeatureHead) -> FastHead | None:
    """Give a loaded head its compiled draft step (once), where compiling can work here; None where it cannot."""
    existing = getattr(head, ATTRIBUTE, None)
    if existing is not None:
        return existing
    if compiler_missing(head.embedding.device) is not None:
        return None  # the target's FastModel already said why, in one line
    fast = FastHead(head)
    object.__setattr__(head, ATTRIBUTE, fast)  # not a submodule: the head's state dict stays as it was
    return fast


def draft_step_for(head) -> nn.Module:
    """The head's draft step: FeatureHead's here, an EAGLE-3 head's in models/eagle3_fast_path.py."""
    from specviz.models.eagle3_head import Eagle3Head

    if isinstance(head, Eagle3Head):
        from specviz.models.eagle3_fast_path import Eagle3DraftStep

        return Eagle3DraftStep(head)
    return DraftStep(head)


def fast_head(head: FeatureHead) -> FastHead | None:
    return getattr(head, ATTRIBUTE, None)


def _step_export(step: DraftStep):
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
    with torch.inference_mode():  # what every draft step runs in
        return torch.empty(
            2 * shape.kv_heads, capacity, shape.head_dim, dtype=head.input_norm.weight.dtype, device=head.embedding.device
        )
