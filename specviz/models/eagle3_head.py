"""A feature head in EAGLE-3's exact form (Li et al. 2025): the checkpoint SpecForge, vLLM, SGLang and llama.cpp read.

At head position i the head reads the target's raw residual stream entering three of its layers (low, mid, high) at
position i-1, and the embedding of token x_i:

    h    = fc(cat(low, mid, high))                                   (the first draft; later ones feed back h)
    a    = attention(cat(input_layernorm(embed(x_i)), hidden_norm(h)))   q, k, v read 2·hidden
    h'   = h + o_proj(a)
    out  = h' + mlp(post_attention_layernorm(h'))                    → fed back as the next draft's h
    logits over the draft vocabulary = lm_head(norm(out));  draft id d is target id d + d2t[d]

The state-dict names are SpecForge's `LlamaForCausalLMEagle3` (vLLM's `Eagle3LlamaForCausalLM`): `fc`,
`midlayer.{input_layernorm, hidden_norm, self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj}`,
`norm`, `lm_head`, buffers `d2t` and `t2d`. The embedding is the target's (borrowed, never shipped).

It offers the drafting interface of `FeatureHead` (`step`, `fed_back`, `layer_input`, `fused_input`, `attention_input`,
`qkv_projections`, `finish`, `logits`), so the feature drafters (chain and tree) and the fast path draft with it through
the same step (models/head_step.py): q comes from its logits widened to the target's vocabulary with −∞ outside the
draft vocabulary, and the acceptance test keeps it exact.
`layer_input` returns cat(embedding, h): the fused input of FeatureHead, here the two halves attention norms apart.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn import functional as F

from specviz.models.eagle3_format import (
    ARCHITECTURE,
    LM_HEAD_FROM_EMBEDDING,
    LM_HEAD_FROM_TARGET_HEAD,
    default_aux_layers,
    standard_config,
)
from specviz.models.feature_head import FeatureHead, check_form
from specviz.models.head_shape import TargetLayerShape, target_layer_shape
from specviz.models.stored import weights_file
from specviz.models.target_tensors import readout_rows, target_tensor
from specviz.models.weight_forms import apply_form, supports

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True)
class Eagle3Shape(TargetLayerShape):
    """The target's layer shape (the head's layer copies it), its vocabulary, the draft's, and the aux layers."""

    draft_vocab_size: int
    # the residual stream entering these decoder layers (= transformers' hidden_states[i]; vLLM's default (2, N//2, N-3))
    aux_layers: tuple[int, ...] = (2, 15, 27)

    @property
    def feature_layers(self) -> tuple[int, ...]:
        """What the target hands the drafter (indices into transformers' hidden_states), as FeatureHeadShape names it."""
        return self.aux_layers

    @property
    def target_hidden(self) -> int:
        """The target's width: the head's own, as it borrows the target's embedding."""
        return self.hidden

    @classmethod
    def of_target(cls, config, draft_vocab_size: int, aux_layers: tuple[int, ...] | None = None) -> Eagle3Shape:
        layers = tuple(aux_layers) if aux_layers else default_aux_layers(config.num_hidden_layers)
        return cls(**target_layer_shape(config), draft_vocab_size=draft_vocab_size, aux_layers=layers)


class Attention(nn.Module):
    def __init__(self, shape: Eagle3Shape) -> None:
        super().__init__()
        kv_width = shape.kv_heads * shape.head_dim
        self.q_proj = nn.Linear(2 * shape.hidden, shape.hidden, bias=False)
        self.k_proj = nn.Linear(2 * shape.hidden, kv_width, bias=False)
        self.v_proj = nn.Linear(2 * shape.hidden, kv_width, bias=False)
        self.o_proj = nn.Linear(shape.hidden, shape.hidden, bias=False)


class Mlp(nn.Module):
    def __init__(self, shape: Eagle3Shape) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(shape.hidden, shape.ffn, bias=False)
        self.up_proj = nn.Linear(shape.hidden, shape.ffn, bias=False)
        self.down_proj = nn.Linear(shape.ffn, shape.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MidLayer(nn.Module):
    def __init__(self, shape: Eagle3Shape) -> None:
        super().__init__()
        eps = shape.rms_norm_eps
        self.input_layernorm = nn.RMSNorm(shape.hidden, eps=eps)
        self.hidden_norm = nn.RMSNorm(shape.hidden, eps=eps)
        self.self_attn = Attention(shape)
        self.post_attention_layernorm = nn.RMSNorm(shape.hidden, eps=eps)
        self.mlp = Mlp(shape)


class Eagle3Head(nn.Module):
    """(aux states at i−1 or the fed-back h, x_i) → the fed-back state and the logits of x_{i+1} over the draft vocabulary."""

    def __init__(self, shape: Eagle3Shape, embedding: torch.Tensor, kept_ids: list[int]) -> None:
        super().__init__()
        if len(kept_ids) != shape.draft_vocab_size or sorted(kept_ids) != list(kept_ids):
            raise ValueError(f"the draft vocabulary must be {shape.draft_vocab_size} increasing target ids")
        self.shape = shape
        self.fc = nn.Linear(shape.feature_width, shape.hidden, bias=False)
        self.midlayer = MidLayer(shape)
        self.norm = nn.RMSNorm(shape.hidden, eps=shape.rms_norm_eps)
        self.lm_head = nn.Linear(shape.hidden, shape.draft_vocab_size, bias=False)
        kept = torch.tensor(kept_ids, dtype=torch.long, device=embedding.device)
        t2d = torch.zeros(shape.vocab_size, dtype=torch.bool, device=embedding.device)
        t2d[kept] = True
        self.register_buffer("d2t", kept - torch.arange(len(kept), device=embedding.device))  # draft id → target − draft
        self.register_buffer("t2d", t2d)
        self.register_buffer("kept_ids", kept, persistent=False)  # draft id → target id (= arange + d2t)
        self.embedding = embedding  # the target's (vocab, hidden): borrowed, not a parameter of the head
        self.form = "as trained"
        self.readout = None  # FeatureHead's slot for a weight-only readout; this head reads out through lm_head
        self.lm_head_from_embedding = False  # whether lm_head is the target's embedding rows (then not shipped)
        self.lm_head_from_target_head = False  # whether lm_head is the target's own LM head rows (then not shipped)
        self.rope_inverse = 1.0 / shape.rope_theta ** (torch.arange(0, shape.head_dim, 2, dtype=torch.float32) / shape.head_dim)

    @property
    def lm_head_borrowed(self) -> bool:
        """Whether lm_head is rows of the target's (frozen in training, rebuilt at load, never shipped)."""
        return self.lm_head_from_embedding or self.lm_head_from_target_head

    @property
    def input_norm(self) -> nn.RMSNorm:
        """The norm whose weight's dtype is the head's (the drafters cast their inputs to it)."""
        return self.midlayer.input_layernorm

    # -- the pieces (FeatureHead's interface) ------------------------------------------------------------------

    def hidden_in(self, features: torch.Tensor) -> torch.Tensor:
        """The residual entering the layer: fc over the target's aux states, or a fed-back state as it is."""  # (..., 3·hidden | hidden) → (..., hidden)
        features = features.to(self.input_norm.weight.dtype)
        return self.fc(features) if features.shape[-1] == self.shape.feature_width else features

    def layer_input(self, token_ids: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """cat(embedding of x_i, h): the layer's two inputs side by side."""  # (..., n), (..., n, 3·hidden | hidden) → (..., n, 2·hidden)
        return self.fused_input(F.embedding(token_ids, self.embedding), self.hidden_in(features))

    def fused_input(self, embedded: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """`layer_input` from the tokens' embeddings and h (the fast path runs `hidden_in` and the lookup outside)."""
        return torch.cat([embedded.to(h.dtype), h], dim=-1)

    def fed_back(self, predicted: torch.Tensor) -> torch.Tensor:
        """The layer's output (before `norm`) is the next draft's h as it is."""
        return predicted

    def attention_input(self, x: torch.Tensor) -> torch.Tensor:
        embedded, h = x.split(self.shape.hidden, dim=-1)
        layer = self.midlayer
        return torch.cat([layer.input_layernorm(embedded), layer.hidden_norm(h)], dim=-1)

    @property
    def qkv_projections(self) -> tuple[nn.Module, nn.Module, nn.Module]:
        attention = self.midlayer.self_attn
        return attention.q_proj, attention.k_proj, attention.v_proj

    # cat(embedding, h) → rotated q (b, heads, n, d), k and v (b, kv_heads, n, d); positions (n,) or per row (b, n)
    queries_keys_values = FeatureHead.queries_keys_values

    def finish(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """Attention output (…, heads, n, d) → residual over h, MLP → the layer's output (…, n, hidden), before `norm`."""
        layer = self.midlayer
        h = x[..., self.shape.hidden :] + layer.self_attn.o_proj(attended.transpose(-3, -2).flatten(-2))
        return h + layer.mlp(layer.post_attention_layernorm(h))

    def kept_logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary."""  # (..., hidden) → (..., draft_vocab)
        return self.lm_head(self.norm(predicted))

    def logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Full-width logits: −∞ outside the draft vocabulary, so q is 0 there (exactness is kept)."""
        return self.widen(self.kept_logits(predicted))

    def widen(self, kept_logits: torch.Tensor) -> torch.Tensor:
        full = kept_logits.new_full((*kept_logits.shape[:-1], self.shape.vocab_size), float("-inf"))
        return full.index_copy_(-1, self.kept_ids, kept_logits)

    # -- training: whole sequences, unrolled (the training-time test) ------------------------------------------

    # teacher forcing, the first draft at every position: its output and its keys/values (for `unrolled_step`); the
    # arithmetic is FeatureHead's, through this head's pieces
    forward = FeatureHead.forward

    def unrolled_step(self, token_ids, fed, first_kv, own_kv: list, step: int, attention_mask=None):
        """Draft step `step` + 1 (step ≥ 1) of the training-time test (SpecForge's TTT), at every base position i at once.

        Base position i drafted its first token from true states; its draft `step`+1 sits at position i + step, reads
        the token there (`token_ids`, already shifted by the caller) and `fed` (the previous step's output at i), and
        attends to the true keys of positions ≤ i and to the keys its own earlier steps made (`own_kv`, appended to
        here), exactly as drafting's cache holds them. Returns the output at every i."""  # (b, n), (b, n, hidden)
        x = self.layer_input(token_ids, fed)
        positions = torch.arange(token_ids.shape[1], device=token_ids.device) + step
        q, k_new, v_new = self.queries_keys_values(x, positions)
        own_kv.append((k_new, v_new))
        groups = self.shape.heads // self.shape.kv_heads
        expand = lambda t: t.repeat_interleave(groups, 1)  # noqa: E731
        k_true, v_true = expand(first_kv[0]), expand(first_kv[1])
        scale = self.shape.head_dim**-0.5
        length = token_ids.shape[1]
        earlier = (q @ k_true.transpose(-1, -2)) * scale  # (b, heads, n, n)
        allowed = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()  # positions ≤ i
        if attention_mask is not None:
            allowed = allowed & attention_mask[:, None, None, :].bool()
        earlier = earlier.masked_fill(~allowed, float("-inf"))
        own = [(q * expand(k)).sum(-1, keepdim=True) * scale for k, _ in own_kv]  # (b, heads, n, 1) each
        weights = torch.softmax(torch.cat([earlier, *own], dim=-1).float(), dim=-1).to(q.dtype)
        attended = weights[..., :length] @ v_true
        for index, (_, v) in enumerate(own_kv):
            attended = attended + weights[..., length + index : length + index + 1] * expand(v)
        return self.finish(x, attended)

    # -- drafting: one position at a time through a KV cache (FeatureHead's step, through this head's pieces:
    # models/head_step.py) ------------------------------------------------------------------------------------

    step = FeatureHead.step


# -- building, saving, loading --------------------------------------------------------------------------------


def is_eagle3_head(folder: str | Path) -> bool:
    path = Path(folder) / CONFIG_FILE
    return path.is_file() and ARCHITECTURE in json.loads(path.read_text()).get("architectures", [])


def draft_vocabulary(folder: str | Path) -> list[int]:
    """The target ids of a saved head's draft vocabulary, in draft order (draft id + d2t)."""
    d2t = load_file(weights_file(folder, WEIGHTS_FILE))["d2t"]
    return (torch.arange(len(d2t)) + d2t).tolist()


def eagle3_config(head: Eagle3Head) -> dict:
    """The standard config (what llama.cpp's converter, vLLM and SGLang read), plus specviz's own keys."""
    standard = standard_config(head.shape, dtype="bfloat16")
    borrowed = {LM_HEAD_FROM_EMBEDDING: head.lm_head_from_embedding, LM_HEAD_FROM_TARGET_HEAD: head.lm_head_from_target_head}
    return {**standard, **borrowed, "specviz_shape": asdict(head.shape)}


def save_head(head: Eagle3Head, folder: Path, dtype: torch.dtype = torch.bfloat16) -> None:
    """config.json + model.safetensors; lm_head is left out when it is the target's rows (rebuilt at load)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {name: value.detach().contiguous() for name, value in head.state_dict().items()}
    if head.lm_head_borrowed:
        del state["lm_head.weight"]
    save_file(
        {name: value if not value.is_floating_point() else value.to(dtype) for name, value in state.items()},
        folder / WEIGHTS_FILE,
    )
    (folder / CONFIG_FILE).write_text(json.dumps(eagle3_config(head), indent=2))


def load_head(folder: str | Path, target, dtype: torch.dtype | None = None) -> Eagle3Head:
    """The saved head on the target's device, borrowing the target's embedding (and lm_head rows where not shipped)."""
    folder = Path(folder)
    config = json.loads((folder / CONFIG_FILE).read_text())
    saved = config["specviz_shape"]
    shape = Eagle3Shape(**{**saved, "aux_layers": tuple(saved["aux_layers"])})
    embedding = target.get_input_embeddings().weight.detach()
    if embedding.shape != (shape.vocab_size, shape.hidden):
        raise ValueError(f"the EAGLE-3 head in {folder} was made for another target (embedding {tuple(embedding.shape)})")
    weights = load_file(weights_file(folder, WEIGHTS_FILE))  # packed or not (specviz/models/stored.py)
    head = Eagle3Head(shape, embedding, (torch.arange(shape.draft_vocab_size) + weights["d2t"]).tolist())
    if config.get(LM_HEAD_FROM_EMBEDDING):
        weights["lm_head.weight"] = embedding[head.kept_ids].detach().float()
        head.lm_head_from_embedding = True
    elif config.get(LM_HEAD_FROM_TARGET_HEAD):
        rows = target_tensor(target, readout_rows(target))  # the LM head where untied (read from the file if packed)
        weights["lm_head.weight"] = rows[head.kept_ids.to(rows.device)].detach().float()
        head.lm_head_from_target_head = True
    head.load_state_dict({name: value.to(head.t2d.device) for name, value in weights.items()}, strict=True)
    dtype = dtype or embedding.dtype
    return head.to(device=embedding.device, dtype=dtype).eval()  # the bool/int buffers keep their dtypes


def head_in_form(head: Eagle3Head, form: str) -> Eagle3Head:
    """Its linear layers (fc, the layer's, lm_head) in a weight-only form (int8 or int4), in place, for drafting: only
    the draft changes, so speculation stays exact (FeatureHead's head_in_form says what moves)."""
    form = check_form(form, "an EAGLE-3 head")
    if not all(supports(form, module) for module in head.modules() if isinstance(module, nn.Linear)):
        raise ValueError(f"{form} packs rows and columns in blocks this head's shapes do not fill: draft it in int8")
    apply_form(head, form)
    head.form = form
    return head
