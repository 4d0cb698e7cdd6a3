"""A Llama-family decoder over a static KV cache: gpt-fast's forward, reading the weights of a loaded transformers model.

The cache is preallocated per request (one tensor per layer: key and value heads, length, head dim) and rolled back by
moving a length, never by copying. A forward writes its rows' keys and values at their positions and attends over the first
`visible` positions only (a cheap slice), so a short request reads a short cache. Every shape but `visible` and the
number of new rows is fixed, which is what lets torch.compile turn a layer's ~45 eager operations into a few fused
kernels (specviz/engine/compiled.py). q/k/v and gate/up each take one weight-only call where that changes no bit
(engine/fused_projections.py).

Why our own forward and not transformers' StaticCache + compile: docs/performance.md gives the numbers. In short,
transformers' step still runs its generic masking, cache-update and output machinery, and its static cache attends
over the whole preallocated length every step; this one is ~100 lines, attends over what is filled, and hands back
the hidden states a feature head reads without materialising transformers' output objects.

The arithmetic is transformers' Llama, operation for operation (RMSNorm in float32 then back, rotary tables from the
model's own rotary embedding, eager attention with float32 softmax), and the linear layers are the model's own
modules: int4/int8 weight-only, bf16 or float32, whatever form the pair was loaded in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn
from transformers import PreTrainedModel

from specviz.engine.fused_projections import fuse


class TreeKeys(NamedTuple):
    """A token tree's rows (specviz/engine/tree_rows.py): where each row's key and value go, and which keys it sees."""

    slots: torch.Tensor  # (rows,) cache slots the rows are written to (their rotary positions are by depth)
    groups: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]  # per group of rows that see as many keys: the rows,
    # each row's keys in its path's order (rows, width), and the same as row · n_keys + key (rows · width,)
    n_keys: int  # slots filled once the rows are written


def is_supported(model: PreTrainedModel) -> bool:
    """A decoder-only model laid out as transformers' Llama (Llama, SmolLM, Qwen2 without biases, Mistral…)."""
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
        # q/k/v and gate/up each in one weight-only call where that is bit-identical (engine/fused_projections.py)
        self.qkv = nn.ModuleList(
            fuse([layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj]) or nn.Identity()
            for layer in self.layers
        )
        self.gate_up = nn.ModuleList(fuse([layer.mlp.gate_proj, layer.mlp.up_proj]) or nn.Identity() for layer in self.layers)
        device = self.embed_tokens.weight.device
        positions = torch.arange(max_length, device=device)[None]
        cos, sin = inner.rotary_emb(self.embed_tokens.weight[:1], positions)  # transformers' own tables, in its dtype
        self.register_buffer("cos", cos[0], persistent=False)  # (max_length, head_dim)
        self.register_buffer("sin", sin[0], persistent=False)

    def new_cache(self, length: int, dtype: torch.dtype) -> list[torch.Tensor]:
        """One tensor per layer, (2 · kv_heads, length, head_dim): the keys' heads, then the values' heads. Separate
        tensors, so a compiled step writes each in place (one stacked tensor made Inductor copy it whole per layer)."""
        device = self.embed_tokens.weight.device
        shape = (2 * self.n_kv_heads, length, self.head_dim)
        with torch.inference_mode():  # what every step runs in: a compiled step then sees one kind of tensor
            return [torch.empty(shape, dtype=dtype, device=device) for _ in range(self.n_layers)]

    def forward(
        self,
        token_ids: torch.Tensor,
        positions: torch.Tensor,
        visible: torch.Tensor,
        cache: list[torch.Tensor],
        tree: TreeKeys | None = None,
    ) -> list[torch.Tensor]:
        """Rows `token_ids` at `positions` (consecutive), eager: their keys and values are written into `cache` at
        those positions, and each row attends over the first `visible.shape[0]` positions it may see. A token tree's
        rows (`tree`) sit at positions by depth instead, are written at `tree.slots`, and each sees only its keys.
        (The compiled step is engine/aot_step.py's export of compiled_layer over the same modules.)

        Returns transformers' hidden_states: the embeddings, each layer's input after that, and the final normed
        state last (index −1)."""  # (n,), (n,), (visible,), [(2 · kv_heads, length, head_dim)] × layers → [(n, hidden)] × (layers + 1)
        x = self.embed_tokens(token_ids)  # (n, hidden)
        unseen = None  # one row sees every visible position: nothing to mask
        if tree is not None:
            unseen = tree  # each row sees its own keys (attention reads the tree's groups)
        elif token_ids.shape[0] > 1:
            unseen = visible[None, :] > positions[:, None]  # (n, visible): causal, over what is filled
        cos, sin = self.cos[positions][None], self.sin[positions][None]  # (1, n, head_dim)
        states = [x]
        for layer, qkv, gate_up, layer_cache in zip(self.layers, self.qkv, self.gate_up, cache):
            x = decoder_layer(self.shape, layer, qkv, gate_up, x, positions, visible, unseen, cos, sin, layer_cache)
            states.append(x)
        states[-1] = self.norm(x)
        return states


@dataclass(frozen=True)
class Shape:
    """The attention's sizes, constants to the compiler."""

    n_heads: int
    n_kv_heads: int
    head_dim: int
    scaling: float


def compiled_layer(shape, layer, qkv, gate_up, x, positions, visible, cos_table, sin_table, layer_cache):
    """decoder_layer as the compiler takes it (engine/aot_step.py): one graph for every number of rows, one included,
    so a token's arithmetic is the same alone (a decode step) and inside a verify pass. Its mask and rotary angles
    are made inside from the positions, and the mask is applied even to one row (where it hides nothing)."""
    torch._check(x.shape[0] == positions.shape[0])  # the rows' count is one symbol for every input
    unseen = visible[None, :] > positions[:, None]  # (n, visible)
    cos, sin = cos_table[positions][None], sin_table[positions][None]  # (1, n, head_dim)
    return decoder_layer(shape, layer, qkv, gate_up, x, positions, visible, unseen, cos, sin, layer_cache)


def decoder_layer(shape, layer, qkv, gate_up, x, positions, visible, unseen, cos, sin, layer_cache):
    """One decoder layer over the static cache: transformers' LlamaDecoderLayer, operation for operation.

    A free function of the layer's modules, called for every layer by the eager forward and the compiled export alike."""
    x = x + attention(shape, layer.self_attn, qkv, layer.input_layernorm(x), positions, visible, unseen, cos, sin, layer_cache)
    return x + mlp(layer.mlp, gate_up, layer.post_attention_layernorm(x))


def attention(shape, module, qkv, x, positions, visible, unseen, cos, sin, layer_cache):
    rows, heads, kv_heads, head_dim = x.shape[0], shape.n_heads, shape.n_kv_heads, shape.head_dim
    qkv = project(qkv, (module.q_proj, module.k_proj, module.v_proj), x)  # (n, (heads + 2 kv) · head_dim)
    qkv = qkv.view(rows, heads + 2 * kv_heads, head_dim).transpose(0, 1)  # (heads + 2 kv, n, head_dim)
    qk, v = qkv[: heads + kv_heads], qkv[heads + kv_heads :]
    qk = qk * cos + rotate_half(qk) * sin  # rotary on q and k at once: elementwise, so the same bits
    q = qk[:heads]
    slots = unseen.slots if isinstance(unseen, TreeKeys) else positions  # a tree's rows are written after the context
    layer_cache.index_copy_(1, slots, torch.cat([qk[heads:], v]))  # write this step's keys and values
    keys = layer_cache[:kv_heads, : visible.shape[0]]  # (kv_heads, visible, head_dim): only the filled part is read
    values = layer_cache[kv_heads:, : visible.shape[0]]
    if isinstance(unseen, TreeKeys):
        out = tree_attention(shape, q, keys, values, unseen)
    elif torch.compiler.is_compiling():  # the compiler's own reductions, the same loop for any number of rows
        out = reduced_attention(shape, q, keys, values, unseen)
    else:
        out = grouped_attention(shape, q, keys, values, unseen)
    return module.o_proj(out.transpose(0, 1).reshape(rows, heads * head_dim))


def grouped_attention(shape, q, keys, values, unseen):
    """transformers' eager attention, each key/value head serving its group of query heads in one product of
    (group · n) rows: the rows of transformers' repeat_kv products, bit for bit, without copying the keys and
    values group times (about 6 % of a decode step's CPU time on the real pair)."""  # (heads, n, head_dim) → same
    heads, rows, head_dim = q.shape
    kv_heads = keys.shape[0]
    group = heads // kv_heads
    q = q.reshape(kv_heads, group * rows, head_dim)
    scores = torch.matmul(q, keys.transpose(1, 2)) * shape.scaling  # (kv_heads, group · n, visible)
    if unseen is not None:
        scores = scores.masked_fill(unseen.repeat(group, 1), torch.finfo(scores.dtype).min)  # each row's mask, per head
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(weights, values).view(heads, rows, head_dim)


def reduced_attention(shape, q, keys, values, unseen):
    """transformers' eager attention for the compiler: each key/value head broadcast over its group of query heads,
    and both products written as multiply-and-sum in float32, rounded to bf16 where eager's bmm rounds its output.

    Inductor fuses them into its own reduction loops, which reduce every row the same way whatever the rows' count
    (the count is one unbacked symbol, engine/compiled.py), so a token's attention is bit-identical alone and inside
    a verify pass. In float32 a product of two bf16 numbers is exact, so only the order of the sums differs from
    eager's kernel. Eager's bf16 bmm through an opaque op cost ~40 µs a call (two a layer, 2.5 ms of a 13.5 ms step
    on 2 threads); the fused loops replaced it and the layer's own kernels got no slower (docs/performance.md)."""  # (heads, n, head_dim) → same
    heads, rows, head_dim = q.shape
    kv_heads = keys.shape[0]
    group = heads // kv_heads
    grouped = q.view(kv_heads, group, rows, 1, head_dim).float()
    scores = (grouped * keys[:, None, None].float()).sum(-1).to(q.dtype) * shape.scaling  # (kv_heads, group, n, visible)
    if unseen is not None:
        scores = scores.masked_fill(unseen, torch.finfo(scores.dtype).min)
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = (weights.float()[..., None] * values[:, None, None].float()).sum(-2).to(q.dtype)  # (kv_heads, group, n, head_dim)
    return out.view(heads, rows, head_dim)


def tree_attention(shape, q, keys, values, tree: TreeKeys):
    """A token tree's attention (eager): the scores as a step's repeat_kv product makes them, then each row's softmax
    and product with the values over exactly its keys, in its path's order (attend_by_path)."""  # (heads, n, head_dim) → same
    heads, length, head_dim = q.shape[0], keys.shape[1], q.shape[2]
    group = heads // keys.shape[0]
    keys = keys[:, None].expand(-1, group, -1, -1).reshape(heads, length, head_dim)  # repeat_kv
    scores = torch.matmul(q, keys.transpose(1, 2)) * shape.scaling  # (heads, n, visible)
    return attend_by_path(scores, values, tree.groups)


def attend_by_path(scores: torch.Tensor, layer_values: torch.Tensor, groups) -> torch.Tensor:
    """A token tree's attention, each row over exactly its keys, gathered in its path's order: the softmax and the
    product with the values then reduce the very terms, in the very order, of its path's one-token step.

    Both reductions depend on where a term sits, not only on its value: torch's float32 softmax sums in vector
    lanes and unrolled blocks (measured: 5 in 500 rows change in the last bit when masked keys follow them), and
    the bf16 product with the values adds key pairs in one instruction, so a masked cousin between two ancestors
    changes which terms are added together (on SmolLM2 in int4 a node's keys differed from its step's from layer
    13 on, and a held-out answer parted at a tie). Gathering costs one copy of each row's values per layer (about
    what a step's own repeat of the keys and values costs), the scores are shared."""  # (heads, n, keys), (kv_heads, length, head_dim) → (heads, n, head_dim)
    heads, rows, length = scores.shape
    kv_heads, _, head_dim = layer_values.shape
    group = heads // kv_heads
    flat = scores.reshape(heads, rows * length)
    out = scores.new_empty(heads, rows, head_dim)
    for row_index, key_index, flat_index in groups:
        n_rows, width = key_index.shape
        ordered = flat.index_select(1, flat_index).view(heads, n_rows, width)  # each row's keys, in its path's order
        weights = nn.functional.softmax(ordered, dim=-1, dtype=torch.float32).to(scores.dtype)
        weights = weights.view(kv_heads, group, n_rows, width).transpose(1, 2)  # (kv_heads, n_rows, group, width)
        values = layer_values.index_select(1, key_index.view(-1)).view(kv_heads, n_rows, width, head_dim)
        attended = torch.matmul(weights, values)  # (kv_heads, n_rows, group, head_dim)
        out.index_copy_(1, row_index, attended.transpose(1, 2).reshape(heads, n_rows, head_dim))
    return out


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
