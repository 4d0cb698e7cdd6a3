"""A Llama-family decoder over a static KV cache: gpt-fast's forward, reading the weights of a loaded transformers model.

The cache is preallocated once per model (layers, key/value heads, context, head dim) and rolled back by moving a
length, never by copying. A forward writes its rows' keys and values at their positions and attends over the first
`visible` positions only (a cheap slice), so a short request reads a short cache. Every shape but `visible` and the
number of new rows is fixed, which is what lets torch.compile turn the ~600 eager operations of a step into a few
fused kernels (specviz/engine/compiled.py).

Why our own forward and not transformers' StaticCache + compile: docs/performance.md gives the numbers. In short,
transformers' step still runs its generic masking, cache-update and output machinery, and its static cache attends
over the whole preallocated length every step; this one is ~60 lines, attends over what is filled, and hands back
the hidden states a feature head reads without materialising transformers' output objects.

The arithmetic is transformers' Llama, operation for operation (RMSNorm in float32 then back, rotary tables from the
model's own rotary embedding, eager attention with float32 softmax), and the linear layers are the model's own
modules: int4/int8 weight-only, bf16 or float32, whatever form the pair was loaded in.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from transformers import PreTrainedModel


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
        self.max_length = max_length
        device = self.embed_tokens.weight.device
        positions = torch.arange(max_length, device=device)[None]
        cos, sin = inner.rotary_emb(self.embed_tokens.weight[:1], positions)  # transformers' own tables, in its dtype
        self.register_buffer("cos", cos[0], persistent=False)  # (max_length, head_dim)
        self.register_buffer("sin", sin[0], persistent=False)

    def cache_shape(self, length: int) -> tuple[int, int, int, int]:
        return (self.n_layers, self.n_kv_heads, length, self.head_dim)

    def forward(
        self,
        token_ids: torch.Tensor,
        positions: torch.Tensor,
        visible: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        tree: TreeKeys | None = None,
    ) -> list[torch.Tensor]:
        """Rows `token_ids` at `positions` (consecutive): their keys and values are written into `keys`/`values` at those
        positions, and each row attends over the first `visible.shape[0]` positions it may see. A token tree's rows
        (`tree`) sit at positions by depth instead, are written at `tree.slots`, and each sees only its keys.

        Returns transformers' hidden_states: the embeddings, each layer's input after that, and the final normed
        state last (index −1)."""  # (n,), (n,), (visible,), 2 × (layers, kv_heads, length, head_dim) → [(n, hidden)] × (layers + 1)
        x = self.embed_tokens(token_ids)  # (n, hidden)
        mask = (
            visible[None, :] <= positions[:, None] if tree is None else tree
        )  # (n, visible) causal over what is filled, or the tree's
        cos, sin = self.cos[positions][None], self.sin[positions][None]  # (1, n, head_dim)
        states = [x]
        for index, layer in enumerate(self.layers):
            attended = self.attention(
                layer.self_attn, layer.input_layernorm(x), positions, mask, cos, sin, keys[index], values[index]
            )
            x = x + attended
            x = x + self.mlp(layer.mlp, layer.post_attention_layernorm(x))
            states.append(x)
        states[-1] = self.norm(x)
        return states

    def attention(self, module, x, positions, mask, cos, sin, layer_keys, layer_values):
        """One layer's attention; `mask` is a chain's causal mask over what is filled, or a tree's TreeKeys."""
        rows = x.shape[0]
        q = module.q_proj(x).view(rows, self.n_heads, self.head_dim).transpose(0, 1)  # (heads, n, head_dim)
        k = module.k_proj(x).view(rows, self.n_kv_heads, self.head_dim).transpose(0, 1)  # (kv_heads, n, head_dim)
        v = module.v_proj(x).view(rows, self.n_kv_heads, self.head_dim).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        slots = mask.slots if isinstance(mask, TreeKeys) else positions
        layer_keys.index_copy_(1, slots, k)  # write this step's rows at their positions (a tree's: after the context)
        layer_values.index_copy_(1, slots, v)
        length = mask.n_keys if isinstance(mask, TreeKeys) else mask.shape[1]
        keys = layer_keys[:, :length]  # (kv_heads, visible, head_dim): only the filled part is read
        values = layer_values[:, :length]
        group = self.n_heads // self.n_kv_heads
        keys = keys[:, None].expand(-1, group, -1, -1).reshape(self.n_heads, length, self.head_dim)  # repeat_kv
        values = values[:, None].expand(-1, group, -1, -1).reshape(self.n_heads, length, self.head_dim)
        scores = torch.matmul(q, keys.transpose(1, 2)) * self.scaling  # (heads, n, visible)
        if isinstance(mask, TreeKeys):
            out = self.attend_by_path(scores, layer_values, mask.groups)  # (heads, n, head_dim)
        else:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            out = torch.matmul(weights, values)  # (heads, n, head_dim)
        out = out.transpose(0, 1).reshape(rows, self.n_heads * self.head_dim)
        return module.o_proj(out)

    def attend_by_path(self, scores: torch.Tensor, layer_values: torch.Tensor, groups) -> torch.Tensor:
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

    @staticmethod
    def mlp(module, x):
        return module.down_proj(module.act_fn(module.gate_proj(x)) * module.up_proj(x))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
