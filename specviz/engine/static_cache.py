"""A Llama-family decoder over a static KV cache: gpt-fast's forward, reading the weights of a loaded transformers model.

The cache is preallocated per request (one tensor per layer: key and value heads, length, head dim) and rolled back by
moving a length, never by copying. A forward's rows (`Rows`) say where each row's key and value are written and which
cache slots it attends over, in order: plain decoding's row at position p sees slots 0 … p, a token tree's node the
context's slots then its path's. So a decode step, a chain's verify pass and a tree's verify pass are one forward
with other inputs, and one compiled package serves all three (engine/aot_step.py). Every shape but the rows' count,
their keys' width and the cache's length is fixed, which is what lets the compiler turn a layer's ~45 eager
operations into a few fused kernels. q/k/v and gate/up each take one weight-only call where that changes no bit
(kernels/forms.concatenated).

Why our own forward and not transformers' StaticCache + compile: docs/performance.md gives the numbers. In short,
transformers' step still runs its generic masking, cache-update and output machinery, and its static cache attends
over the whole preallocated length every step; this one is ~100 lines, attends over what is filled, and hands back
the hidden states a feature head reads without materialising transformers' output objects.

The arithmetic is transformers' Llama (RMSNorm in float32 then back, rotary tables from the model's own rotary
embedding, float32 softmax), and the linear layers are the model's own modules: int4/int8 weight-only, bf16 or
float32, whatever form the pair was loaded in. The attention is one function eager and compiled (`reduced_attention`:
bf16 products summed in float32), so the two decide alike; transformers' own attention is the reference in tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn
from transformers import PreTrainedModel

from specviz.kernels.forms import concatenated


class Rows(NamedTuple):
    """A forward's rows, as the eager forward and the compiled package both take them (engine/tree_rows.py makes them).

    Row r is written at cache slot `slots[r]`, takes its rotary angle at `positions[r]`, and attends over the cache
    slots 0 … prefix[r] − 1 (the context), then the slots tail[r, 0], tail[r, 1], … up to its first −1, in that order:
    the order in which a one-token step of its path holds them. Plain decoding's rows are the special case slots =
    positions, prefix = positions + 1 and an empty tail (one −1); a token tree's node sees the context, then its path.
    Every row's context keys sit at the same indices 0 … visible − 1 and its path's right after (each node of a tree
    has the same prefix), so a key's place in a row's reduction is its place in the path's own step."""

    positions: torch.Tensor  # (n,) long
    slots: torch.Tensor  # (n,) long
    visible: torch.Tensor  # (visible,): its length is the context every row's prefix fits in (prefix ≤ visible)
    prefix: torch.Tensor  # (n,) long
    tail: torch.Tensor  # (n, depth) long, −1 pads (after a row's slots only)


def is_supported(model: PreTrainedModel) -> bool:
    """A decoder-only model laid out as transformers' Llama (Llama, SmolLM, Qwen2 with its q/k/v biases, Mistral…)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or not hasattr(inner, "rotary_emb") or not hasattr(inner, "norm"):
        return False
    first = layers[0]
    attention, mlp = getattr(first, "self_attn", None), getattr(first, "mlp", None)
    needed = ("q_proj", "k_proj", "v_proj", "o_proj")
    if attention is None or mlp is None or not all(hasattr(attention, name) for name in needed):
        return False
    if getattr(model.config, "sliding_window", None) or getattr(attention, "q_norm", None) is not None:
        return False  # windowed attention and per-head norms (Qwen3, Gemma) are other forwards
    rope = getattr(model.config, "rope_parameters", None) or getattr(model.config, "rope_scaling", None) or {}
    if rope.get("rope_type", "default") not in ("default", None):
        return False  # dynamic rope rescales with the length: its tables are not fixed
    return all(hasattr(mlp, name) for name in ("gate_proj", "up_proj", "down_proj"))


class StaticLlama(nn.Module):
    """The model's decoder stack over a preallocated cache handed in by the caller (one per request)."""

    def __init__(self, model: PreTrainedModel, max_length: int) -> None:
        super().__init__()
        inner, config = model.model, model.config
        self.embed_tokens = inner.embed_tokens
        self.layers = inner.layers
        self.norm = inner.norm
        self.n_layers = len(inner.layers)
        attention = inner.layers[0].self_attn
        self.head_dim = attention.head_dim
        self.n_heads = config.num_attention_heads
        self.n_kv_heads = config.num_key_value_heads
        self.scaling = attention.scaling
        self.shape = Shape(self.n_heads, self.n_kv_heads, self.head_dim, self.scaling)
        self.max_length = max_length
        # q/k/v and gate/up each in one kernel call where that is bit-identical (kernels/forms.concatenated)
        self.qkv = nn.ModuleList(
            concatenated([layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj]) or nn.Identity()
            for layer in self.layers
        )
        self.gate_up = nn.ModuleList(
            concatenated([layer.mlp.gate_proj, layer.mlp.up_proj]) or nn.Identity() for layer in self.layers
        )
        device = self.embed_tokens.weight.device
        positions = torch.arange(max_length, device=device)[None]
        cos, sin = inner.rotary_emb(self.embed_tokens.weight[:1], positions)  # transformers' own tables, in its dtype
        self.register_buffer("cos", cos[0], persistent=False)  # (max_length, head_dim)
        self.register_buffer("sin", sin[0], persistent=False)

    def new_cache(self, length: int, dtype: torch.dtype) -> list[torch.Tensor]:
        """One tensor per layer, (2 · kv_heads, length, head_dim): the keys' heads, then the values' heads. Separate
        tensors, so a compiled step writes each in place (one stacked tensor made Inductor copy it whole per layer).
        Zeros, not garbage: a masked slot's weight is an exact zero, and zero times a finite value adds nothing."""
        device = self.embed_tokens.weight.device
        shape = (2 * self.n_kv_heads, length, self.head_dim)
        with torch.inference_mode():  # what every step runs in: a compiled step then sees one kind of tensor
            return [torch.zeros(shape, dtype=dtype, device=device) for _ in range(self.n_layers)]

    def forward(self, token_ids: torch.Tensor, rows: Rows, cache: list[torch.Tensor]) -> list[torch.Tensor]:
        """The rows' tokens through the stack, eager (engine/aot_step.py compiles `layers_forward`, the same code): each
        row's key and value are written into `cache` at its slot, and it attends over its keys only. A long forward (a
        prefill) goes through in parts of rows, in order, so that eager's attention products fit in memory (compiled,
        they are fused): a row attends only to rows before it, so each part finds their keys written.

        Returns transformers' hidden_states: the embeddings, each layer's input after that, and the final normed
        state last (index −1)."""  # (n,), Rows, [(2 · kv_heads, length, head_dim)] × layers → [(n, hidden)] × (layers + 1)
        x = self.embed_tokens(token_ids)  # (n, hidden)
        width = rows.visible.shape[0] + rows.tail.shape[1]
        step = max(1, EAGER_PRODUCTS // (self.n_heads * width * self.head_dim))
        if x.shape[0] <= step:
            return [x, *self.layers_forward(x, rows, cache)]
        parts = [
            self.layers_forward(x[first : first + step], rows_part(rows, first, step), cache) for first in range(0, len(x), step)
        ]
        return [x, *(torch.cat(states) for states in zip(*parts))]

    def layers_forward(self, x: torch.Tensor, rows: Rows, cache: list[torch.Tensor]) -> list[torch.Tensor]:
        """Every layer after the embedding, then the final norm: the one stack loop, run eager by `forward` and exported
        by engine/aot_step.py. The mask and the rotary angles are made here from the rows, for one row too."""
        torch._check(x.shape[0] == rows.positions.shape[0])  # the rows' count is one symbol for every input
        unseen = torch.cat([rows.visible[None, :] >= rows.prefix[:, None], rows.tail < 0], dim=1)  # (n, visible + depth)
        cos, sin = self.cos[rows.positions][None], self.sin[rows.positions][None]  # (1, n, head_dim)
        states = []
        for layer, qkv, gate_up, layer_cache in zip(self.layers, self.qkv, self.gate_up, cache):
            x = decoder_layer(self.shape, layer, qkv, gate_up, x, rows, unseen, cos, sin, layer_cache)
            states.append(x)
        states[-1] = self.norm(x)
        return states


EAGER_PRODUCTS = 2**25  # an eager forward's attention products, at most (float32: 128 MiB); longer ones go in parts


def rows_part(rows: Rows, first: int, count: int) -> Rows:
    """Rows first … first + count − 1 of `rows`, their context cut to what they see."""
    part = slice(first, first + count)
    prefix = rows.prefix[part]
    visible = rows.visible[: max(2, int(prefix.max()))]
    return Rows(rows.positions[part], rows.slots[part], visible, prefix, rows.tail[part])


@dataclass(frozen=True)
class Shape:
    """The attention's sizes, constants to the compiler."""

    n_heads: int
    n_kv_heads: int
    head_dim: int
    scaling: float


def decoder_layer(shape, layer, qkv, gate_up, x, rows, unseen, cos, sin, layer_cache):
    """One decoder layer over the static cache: transformers' LlamaDecoderLayer, operation for operation."""
    x = x + attention(shape, layer.self_attn, qkv, layer.input_layernorm(x), rows, unseen, cos, sin, layer_cache)
    return x + mlp(layer.mlp, gate_up, layer.post_attention_layernorm(x))


def attention(shape, module, qkv, x, rows: Rows, unseen, cos, sin, layer_cache):
    """The layer's attention block, eager and compiled alike: every row attends over the context's slots then its tail's,
    padded to one width and masked (`unseen`). The masked keys add exact zeros after a row's own keys, which leave its
    sums as they were, so a token's output is the same alone, in a verify pass and as a tree node (docs/trees.md)."""
    n, heads, kv_heads, head_dim = x.shape[0], shape.n_heads, shape.n_kv_heads, shape.head_dim
    qkv = project(qkv, (module.q_proj, module.k_proj, module.v_proj), x)  # (n, (heads + 2 kv) · head_dim)
    qkv = qkv.view(n, heads + 2 * kv_heads, head_dim).transpose(0, 1)  # (heads + 2 kv, n, head_dim)
    qk, v = qkv[: heads + kv_heads], qkv[heads + kv_heads :]
    qk = qk * cos + rotate_half(qk) * sin  # rotary on q and k at once: elementwise, so the same bits
    layer_cache.index_copy_(1, rows.slots, torch.cat([qk[heads:], v]))  # write this step's keys and values
    context = layer_cache[:, : rows.visible.shape[0]]  # (2 · kv_heads, visible, head_dim): a slice, shared by every row
    tail = layer_cache[:, rows.tail.clamp(min=0)]  # (2 · kv_heads, n, depth, head_dim): a few gathered slots
    both = torch.cat([context[:, None].expand(-1, n, -1, -1), tail], dim=2)  # (2 · kv_heads, n, visible + depth, head_dim)
    out = reduced_attention(shape, qk[:heads], both[:kv_heads], both[kv_heads:], unseen)
    return module.o_proj(out.transpose(0, 1).reshape(n, heads * head_dim))


def reduced_attention(shape, q, keys, values, unseen):
    """transformers' eager attention written as reductions: each key/value head broadcast over its group of query heads,
    both products as multiply-and-sum in float32, rounded to bf16 where eager's bmm rounds its output. `keys` and
    `values` are each row's own, (kv_heads, n, width, head_dim), or shared by every row, (kv_heads, 1, width, head_dim);
    `unseen` (n, width) masks the pads.

    The fast path's one attention, eager and compiled. Compiled, Inductor fuses it into its own reduction loops,
    which reduce every row the same way whatever the rows' count and wherever its keys sit in the cache (the count
    is one symbol, engine/aot_step.py), so a token's attention is bit-identical alone, inside a verify pass, and as a
    tree node over its path's keys. In float32 a product of two bf16 numbers is exact, so only the order of the sums
    differs from eager's kernel. Eager's bf16 bmm through an opaque op cost ~40 µs a call (two a layer, 2.5 ms of a
    13.5 ms step on 2 threads); the fused loops replaced it and the layer's own kernels got no slower
    (docs/performance.md)."""  # (heads, n, head_dim) → same
    heads, n, head_dim = q.shape
    kv_heads = keys.shape[0]
    group = heads // kv_heads
    grouped = q.view(kv_heads, group, n, 1, head_dim).float()
    scores = (grouped * keys[:, None].float()).sum(-1).to(q.dtype) * shape.scaling  # (kv_heads, group, n, width)
    if unseen is not None:
        scores = scores.masked_fill(unseen, torch.finfo(scores.dtype).min)
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = (weights.float()[..., None] * values[:, None].float()).sum(-2).to(q.dtype)  # (kv_heads, group, n, head_dim)
    return out.view(heads, n, head_dim)


def mlp(module, gate_up, x):
    gate, up = project(gate_up, (module.gate_proj, module.up_proj), x).chunk(2, dim=-1)  # (n, intermediate) × 2
    return module.down_proj(module.act_fn(gate) * up)


def project(fused: nn.Module, parts: tuple[nn.Module, ...], x: torch.Tensor) -> torch.Tensor:
    """The parts' outputs side by side: one call where they were fused, else one call each."""
    if isinstance(fused, nn.Identity):
        return torch.cat([part(x) for part in parts], dim=-1)
    return fused(x)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
