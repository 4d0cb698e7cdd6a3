"""A feature-level draft (EAGLE, Li et al. 2024): one decoder layer that reads the target's own last hidden state.

At token position i the head takes f_{i-1}, the target's last-layer (post-norm) feature at the previous
position, and the embedding of token x_i, and predicts f_i; the target's LM head, cut to the kept ids,
reads x_{i+1} out of the prediction. To draft further it feeds its own predicted feature back in. It is just
another drafter: q comes from its logits, and the acceptance test, hence exactness, is unchanged.

The layer is written out here (RMSNorm, grouped-query attention with RoPE, SwiGLU; the target's own layer
shapes) rather than borrowed from transformers, for two reasons: training unrolls a second drafting step
whose attention mixes true and predicted keys (`second_step`, EAGLE-3's "training-time test"), which no
library mask expresses; and a draft step must cost a fraction of a millisecond, so its KV cache is two
plain tensors cropped by slicing. The embedding and the LM head rows are the target's, borrowed at load
time (never shipped); the folder holds the head's own 4.3M weights.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn import functional as F

from specviz.kernels import forms
from specviz.models import head_step
from specviz.models.head_shape import TargetLayerShape, target_layer_shape
from specviz.models.low_rank import LowRankLinear, PassThroughLowRank, merged_weight
from specviz.models.stored import weights_file
from specviz.models.target_tensors import readout_rows, target_tensor
from specviz.models.weight_forms import apply_form, supports

CONFIG_FILE = "feature_head.json"
WEIGHTS_FILE = "feature_head.safetensors"


@dataclass(frozen=True)
class FeatureHeadShape(TargetLayerShape):
    """The target's layer shape, which the head copies (and starts from), and the hidden states it reads."""

    # which of the target's hidden states the head reads (indices into transformers' hidden_states): the last (after
    # the final norm) first, then lower layers fused beside it (EAGLE-3's low/mid/high features)
    feature_layers: tuple[int, ...] = (-1,)

    @classmethod
    def of_target(cls, config, feature_layers: tuple[int, ...] = (-1,)) -> FeatureHeadShape:
        return cls(**target_layer_shape(config), feature_layers=tuple(feature_layers))


class FeatureHead(nn.Module):
    """(f_{i-1}, x_i) → f̂_i → logits of x_{i+1} over the kept ids."""

    def __init__(
        self, shape: FeatureHeadShape, embedding: torch.Tensor, kept_ids: list[int], readout: torch.Tensor | None = None
    ) -> None:
        super().__init__()
        self.shape = shape
        hidden, kv_width = shape.hidden, shape.kv_heads * shape.head_dim
        self.fuse = nn.Linear(hidden + shape.feature_width, hidden, bias=False)  # cat(embedding of x_i, f_{i-1}) → input
        # lower layers' residual streams are far wider than the final normed feature: each is normed before fusing
        self.lower_norms = nn.ModuleList(nn.RMSNorm(hidden, eps=shape.rms_norm_eps) for _ in shape.feature_layers[1:])
        self.input_norm = nn.RMSNorm(hidden, eps=shape.rms_norm_eps)
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, kv_width, bias=False)
        self.v_proj = nn.Linear(hidden, kv_width, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.post_attention_norm = nn.RMSNorm(hidden, eps=shape.rms_norm_eps)
        self.gate_proj = nn.Linear(hidden, shape.ffn, bias=False)
        self.up_proj = nn.Linear(hidden, shape.ffn, bias=False)
        self.down_proj = nn.Linear(shape.ffn, hidden, bias=False)
        self.embedding = embedding  # the target's (vocab, hidden): borrowed, not a parameter of the head
        kept = torch.tensor(kept_ids, dtype=torch.long, device=embedding.device)
        self.register_buffer("kept_ids", kept, persistent=False)
        # the target's LM head rows of the kept ids (kept, hidden): its embedding's where the two are tied
        rows = (readout if readout is not None else embedding)[kept.to((readout if readout is not None else embedding).device)]
        self.register_buffer("head_weight", rows.detach().to(embedding.dtype).clone(), persistent=False)
        self.readout: nn.Module | None = None  # set by head_in_form: the kept rows as a weight-only matrix
        self.form = "as trained"  # or the weight-only form head_in_form put it in
        # float32 whatever the head's dtype (a plain attribute, so .to(dtype) leaves it alone): bf16 angles drift
        self.rope_inverse = 1.0 / shape.rope_theta ** (torch.arange(0, shape.head_dim, 2, dtype=torch.float32) / shape.head_dim)

    # -- the pieces -------------------------------------------------------------------------------------------

    def layer_input(self, token_ids: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """The fused input: embedding of x_i beside f_{i-1} (and the lower layers' states, normed)."""  # (..., n), (..., n, width) → (..., n, hidden)
        return self.fused_input(F.embedding(token_ids, self.embedding), features)

    def fused_input(self, embedded: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """`layer_input` from the tokens' embeddings (the fast path looks them up outside its compiled step)."""
        embedded = embedded.to(features.dtype)
        last, *lower = features.split(self.shape.hidden, dim=-1)
        lower = [norm(state) for norm, state in zip(self.lower_norms, lower)]
        return self.fuse(torch.cat([embedded, last, *lower], dim=-1))

    def fed_back(self, predicted: torch.Tensor) -> torch.Tensor:
        """A predicted feature as the next position's input: it stands in for the last layer; lower layers are unknown."""  # (..., hidden) → (..., width)
        missing = self.shape.feature_width - self.shape.hidden
        return torch.cat([predicted, predicted.new_zeros(*predicted.shape[:-1], missing)], dim=-1) if missing else predicted

    def attention_input(self, x: torch.Tensor) -> torch.Tensor:
        """The fused input as q, k and v read it."""
        return self.input_norm(x)

    @property
    def qkv_projections(self) -> tuple[nn.Module, nn.Module, nn.Module]:
        return self.q_proj, self.k_proj, self.v_proj

    def queries_keys_values(self, x: torch.Tensor, positions: torch.Tensor):
        """The fused input → rotated q (b, heads, n, d), k and v (b, kv_heads, n, d) (models/head_step.py)."""
        return head_step.queries_keys_values(self, x, positions, self.rope_inverse.to(positions.device))

    def finish(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """Attention output (…, heads, n, d) → residual, MLP → the predicted feature (…, n, hidden)."""
        h = x + self.o_proj(attended.transpose(-3, -2).flatten(-2))
        normed = self.post_attention_norm(h)
        return h + self.down_proj(F.silu(self.gate_proj(normed)) * self.up_proj(normed))

    def kept_logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Logits over the kept ids only."""  # (..., hidden) → (..., kept)
        if self.readout is not None:  # the kept rows in a weight-only form (head_in_form)
            return self.readout(predicted)
        return predicted @ self.head_weight.T.to(predicted.dtype)

    def logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Full-width logits: −∞ outside the kept ids, so q is 0 there (exactness is kept)."""  # (n, hidden) → (n, vocab)
        return self.widen(self.kept_logits(predicted))

    def widen(self, kept_logits: torch.Tensor) -> torch.Tensor:
        """Logits over the kept ids → full width, −∞ elsewhere."""  # (n, kept) → (n, vocab)
        full = kept_logits.new_full((*kept_logits.shape[:-1], self.shape.vocab_size), float("-inf"))
        return full.index_copy_(-1, self.kept_ids, kept_logits)

    # -- training: whole sequences ---------------------------------------------------------------------------

    def forward(self, token_ids: torch.Tensor, features: torch.Tensor, attention_mask: torch.Tensor | None = None):
        """Teacher forcing over sequences: f̂ at every position, and the keys/values (for `second_step`)."""  # (b, n), (b, n, hidden)
        x = self.layer_input(token_ids, features)
        positions = torch.arange(token_ids.shape[1], device=token_ids.device)
        q, k, v = self.queries_keys_values(x, positions)
        groups = self.shape.heads // self.shape.kv_heads
        mask = _causal_mask(token_ids.shape[1], attention_mask, token_ids.device)
        attended = F.scaled_dot_product_attention(
            q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1), attn_mask=mask
        )
        return self.finish(x, attended), (k, v)

    def second_step(self, token_ids: torch.Tensor, predicted: torch.Tensor, first_kv, attention_mask=None) -> torch.Tensor:
        """The second draft, as drafting runs it: position i reads its own predicted f̂_{i-1} and x_i, and attends to
        the true-feature keys of positions < i plus its own key (EAGLE-3's training-time test)."""  # (b, n), (b, n, hidden)
        x = self.layer_input(token_ids, predicted)
        positions = torch.arange(token_ids.shape[1], device=token_ids.device)
        q, k_self, v_self = self.queries_keys_values(x, positions)
        k_true, v_true = first_kv
        groups = self.shape.heads // self.shape.kv_heads
        k_true, v_true = k_true.repeat_interleave(groups, 1), v_true.repeat_interleave(groups, 1)
        k_self, v_self = k_self.repeat_interleave(groups, 1), v_self.repeat_interleave(groups, 1)
        scale = self.shape.head_dim**-0.5
        earlier = (q @ k_true.transpose(-1, -2)) * scale  # (b, heads, n, n)
        length = token_ids.shape[1]
        allowed = torch.ones(length, length, dtype=torch.bool, device=q.device).tril(-1)  # strictly earlier positions
        if attention_mask is not None:
            allowed = allowed & attention_mask[:, None, None, :].bool()
        earlier = earlier.masked_fill(~allowed, float("-inf"))
        own = (q * k_self).sum(-1, keepdim=True) * scale  # (b, heads, n, 1)
        weights = torch.softmax(torch.cat([earlier, own], dim=-1).float(), dim=-1).to(q.dtype)
        attended = weights[..., :length] @ v_true + weights[..., length:] * v_self
        return self.finish(x, attended)

    # -- drafting: one position at a time through a KV cache -------------------------------------------------

    def step(self, token_ids: torch.Tensor, features: torch.Tensor, cache: FeatureCache) -> torch.Tensor:
        """Feed positions that follow the cache; return f̂ at each (models/head_step.py)."""  # (n,), (n, width) → (n, hidden)
        start, rows, device = cache.length, token_ids.numel(), self.kept_ids.device
        positions = torch.arange(start, start + rows, device=device)
        mask = None  # one new position sees every key
        if rows > 1:  # several: each sees the cache and the new ones up to itself
            mask = torch.ones(rows, start + rows, dtype=torch.bool, device=device).tril(start)
        return head_step.cached_step(self, token_ids, features, cache, positions, mask)


class FeatureCache:
    """The head's keys and values: two tensors, grown by concatenation and rolled back by slicing."""

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None  # (1, kv_heads, length, head_dim)
        self.values: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys = keys if self.keys is None else torch.cat([self.keys, keys], dim=2)
        self.values = values if self.values is None else torch.cat([self.values, values], dim=2)
        return self.keys, self.values

    def truncate(self, length: int) -> None:
        """Forget positions from `length` on."""
        if self.keys is not None and self.keys.shape[2] > length:
            self.keys, self.values = self.keys[:, :, :length], self.values[:, :, :length]


def _causal_mask(length: int, attention_mask: torch.Tensor | None, device: torch.device) -> torch.Tensor:
    mask = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    if attention_mask is None:
        return mask
    mask = mask[None, None] & attention_mask[:, None, None, :].bool()  # (b, 1, n, n)
    return mask | torch.eye(length, dtype=torch.bool, device=device)  # a padded row still sees itself: no NaN


# -- building, saving, loading --------------------------------------------------------------------------------


LOW_RANK = ("fuse", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SILENT_AT_START = ("o_proj", "down_proj")  # the residual branches start silent (see head_from_target)


@torch.no_grad()
def head_from_target(
    target, kept_ids: list[int], feature_layers: tuple[int, ...] = (-1,), rank: int | None = None, mlp_rank: int | None = None
) -> FeatureHead:
    """A new head in float32 that starts from the target's last decoder layer (same shapes).

    With `rank`, each matrix is the target's own (frozen, read back at load, never shipped) times a trained scale plus
    a trained rank-`rank` change (models/low_rank.py; the MLP's three at `mlp_rank`, default `rank`): the head ships as
    a few MB however wide its target is."""
    shape = FeatureHeadShape.of_target(target.config, feature_layers)
    embedding = target.get_input_embeddings().weight.detach().float()
    head = FeatureHead(shape, embedding, kept_ids, target_tensor(target, readout_rows(target)))
    last = target.model.layers[-1]
    for name, module in (
        ("q_proj", last.self_attn.q_proj),
        ("k_proj", last.self_attn.k_proj),
        ("v_proj", last.self_attn.v_proj),
        ("o_proj", last.self_attn.o_proj),
        ("gate_proj", last.mlp.gate_proj),
        ("up_proj", last.mlp.up_proj),
        ("down_proj", last.mlp.down_proj),
    ):
        getattr(head, name).weight.copy_(module.weight.float())
    # the residual branches start silent, so at first the head passes the target's feature through: started as they
    # are, the last layer's attention and MLP (made for the target's own residual stream, not a post-norm feature)
    # swamp it (logits 7× too wide; initial loss 367 against 35 on the real answers)
    head.o_proj.weight.zero_()
    head.down_proj.weight.zero_()
    head.input_norm.weight.copy_(last.input_layernorm.weight.float())
    head.post_attention_norm.weight.copy_(last.post_attention_layernorm.weight.float())
    hidden = shape.hidden
    head.fuse.weight.zero_()  # lower layers start unread
    head.fuse.weight[:, hidden : 2 * hidden] = torch.eye(hidden)  # starts by passing the target's last feature through
    if rank is None:
        head.fuse.weight[:, :hidden] = torch.randn(hidden, hidden) * hidden**-0.5 * 0.1
        return head
    layer = len(target.model.layers) - 1
    for index, name in enumerate(LOW_RANK):
        if name == "fuse":
            base = head.fuse.weight.detach().clone()  # [0 | I | 0…]: the fixed pass-through, rebuilt at load
        else:
            base = target_tensor(target, low_rank_base(layer, name))
        module_rank = mlp_rank if mlp_rank is not None and name in ("gate_proj", "up_proj", "down_proj") else rank
        scale = 0.0 if name in SILENT_AT_START else 1.0
        setattr(head, name, LowRankLinear(base, module_rank, base_scale=scale, seed=index))
    head.low_rank_layer = layer
    return head


def low_rank_base(layer: int, name: str) -> str:
    """The state-dict name of the target's matrix a low-rank head module starts from."""
    block = "self_attn" if name in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
    return f"model.layers.{layer}.{block}.{name}.weight"


def fuse_base(shape: FeatureHeadShape) -> torch.Tensor:
    """The fuse's fixed base: the target's last feature passed through, the embedding and lower layers unread."""
    base = torch.zeros(shape.hidden, shape.hidden + shape.feature_width)
    base[:, shape.hidden : 2 * shape.hidden] = torch.eye(shape.hidden)
    return base


def own_state(head: FeatureHead) -> dict[str, torch.Tensor]:
    """The head's own weights: the borrowed embedding and head rows are the target's, not shipped."""
    return {name: value.detach().contiguous() for name, value in head.state_dict().items()}


def save_head(head: FeatureHead, folder: Path, dtype: torch.dtype = torch.bfloat16) -> None:
    """The head's own weights and shape; a low-rank head (head_from_target's `rank`) ships its scales and factors only."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {"kind": "feature head (EAGLE-style)", "shape": asdict(head.shape), "kept_token_ids": head.kept_ids.tolist()}
    low_rank = {name: module for name, module in head.named_children() if isinstance(module, LowRankLinear)}
    state = own_state(head)
    if low_rank:
        config["low_rank"] = {
            "layer": head.low_rank_layer,
            "ranks": {name: module.rank for name, module in low_rank.items()},
            "what": "each matrix is scale · (the target's matrix of that layer; for fuse, the pass-through of the last "
            "feature) + lora_b @ lora_a (models/low_rank.py)",
        }
        state = {key: value for key, value in state.items() if key.split(".")[0] not in low_rank}
        for name, module in low_rank.items():
            state |= {f"{name}.{part}": value.contiguous() for part, value in module.own_state().items()}
    save_file({name: value.to(dtype) for name, value in state.items()}, folder / WEIGHTS_FILE)
    (folder / CONFIG_FILE).write_text(json.dumps(config))


def is_feature_head(folder: str | Path) -> bool:
    return (Path(folder) / CONFIG_FILE).is_file()


def load_head(folder: str | Path, target, dtype: torch.dtype | None = None, trainable: bool = False) -> FeatureHead:
    """The saved head on the target's device, borrowing the target's embedding and LM head rows; in `dtype` (default the
    target's). A low-rank head's matrices are rebuilt from the target's own (read before any weight form packed them):
    merged for drafting (but the fuse, whose base passes the feature through: PassThroughLowRank runs its factors), or
    with `trainable` kept as base, scale and factors, so that continuing its training
    (`distill --init-head`) trains and saves only its change, as the run that made it did."""
    folder = Path(folder)
    config = json.loads((folder / CONFIG_FILE).read_text())
    shape = FeatureHeadShape(**{**config["shape"], "feature_layers": tuple(config["shape"].get("feature_layers", (-1,)))})
    embedding = target.get_input_embeddings().weight.detach()
    if embedding.shape != (shape.vocab_size, shape.hidden):
        raise ValueError(f"the feature head in {folder} was made for another target (embedding {tuple(embedding.shape)})")
    readout = None if target.config.tie_word_embeddings else target_tensor(target, readout_rows(target))
    head = FeatureHead(shape, embedding, config["kept_token_ids"], readout)
    stored = load_file(weights_file(folder, WEIGHTS_FILE))  # packed or not (models/stored.py)
    low_rank = config.get("low_rank")
    if low_rank:
        for name, rank in low_rank["ranks"].items():
            base = fuse_base(shape) if name == "fuse" else target_tensor(target, low_rank_base(low_rank["layer"], name))
            parts = [stored.pop(f"{name}.{part}") for part in ("scale", "lora_a", "lora_b")]
            if trainable:  # the module as distill made it: frozen base, its own s, A, B
                module = LowRankLinear(base, rank)
                with torch.no_grad():
                    for parameter, value in zip((module.scale, module.lora_a, module.lora_b), parts):
                        parameter.copy_(value.reshape(parameter.shape))
                setattr(head, name, module)
                stored.update({f"{name}.{part}": getattr(module, part).detach() for part in ("scale", "lora_a", "lora_b")})
            elif name == "fuse":  # its base passes the last feature through: kept as factors (PassThroughLowRank)
                module = PassThroughLowRank(*parts, start=shape.hidden)
                setattr(head, name, module)
                stored.update({f"{name}.{part}": getattr(module, part).detach() for part in ("scale", "lora_a", "lora_b")})
            else:
                stored[f"{name}.weight"] = merged_weight(base, *parts)
        if trainable:
            head.low_rank_layer = low_rank["layer"]
    head.load_state_dict(stored, strict=True)
    dtype = dtype or embedding.dtype
    return head.to(device=embedding.device, dtype=dtype).eval()


def check_form(form: str, what: str) -> str:
    """The packed form `form` names (an alias resolved), or a ValueError naming those a head can draft in."""
    if forms.canonical(form) not in forms.packed_names():
        raise ValueError(f"{what} drafts in {', '.join(forms.packed_names())}, not {form!r}")
    return forms.canonical(form)


def head_in_form(head: FeatureHead, form: str) -> FeatureHead:
    """The head's linear layers and kept head rows in a weight-only form (int8 or int4), in place, for drafting.

    Only the draft changes, so speculation stays exact; what moves is how often the head's argmax is the target's
    token (benchmarks/head_forms.py measures both: on SmolLM2's head, int8 halved a draft step and kept 94–96 % of its
    argmaxes, int4 kept 80 %)."""
    form = check_form(form, "a feature head")
    rows = nn.Linear(head.shape.hidden, len(head.kept_ids), bias=False, device=head.kept_ids.device)
    rows.weight.data = head.head_weight.detach().float()
    if not supports(form, rows):
        raise ValueError(f"{form} packs rows in blocks: this head keeps {len(head.kept_ids)} rows; draft in int8")
    apply_form(head, form)  # every nn.Linear of the layer; norms stay bf16
    head.readout = forms.get(form).layer(rows)
    head.head_weight = None
    head.form = form
    return head


def own_weight_bytes(head: nn.Module) -> tuple[int, int]:
    """(parameters, bytes) of what a head (FeatureHead or Eagle3Head) adds to memory: its own layers, and its copy of
    the kept head rows, as stored."""
    return own_parameters(head), stored_bytes(head)


def own_parameters(head: nn.Module) -> int:
    """A head's own parameters as trained, whatever form they are stored in now: a linear layer counts its matrix (and
    bias) also when a weight-only form packed it; every other module its parameters (norms, a low-rank change); and
    FeatureHead's copy of the target's kept head rows counts until head_in_form makes it a layer (`readout`)."""
    count = 0
    for module in head.modules():
        if hasattr(module, "in_features"):  # nn.Linear or its weight-only form (models/weight_forms.py)
            count += module.in_features * module.out_features + (module.out_features if module.bias is not None else 0)
        else:
            count += sum(parameter.numel() for parameter in module.parameters(recurse=False))
    kept_rows = getattr(head, "head_weight", None)
    return count + (kept_rows.numel() if kept_rows is not None else 0)


def stored_bytes(head: nn.Module) -> int:
    """What a head's weights take in memory as they are stored now (a weight-only form's packed bytes included)."""
    stored = [*head.parameters(), *(buffer for name, buffer in head.named_buffers() if name != "kept_ids")]
    return sum(t.numel() * t.element_size() for t in stored)
