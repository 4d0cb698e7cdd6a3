"""A specviz EAGLE-3 head as the checkpoint llama.cpp, vLLM and SGLang load: `config.json` + `model.safetensors`.

The standard form (SpecForge's `LlamaForCausalLMEagle3`, which llama.cpp's `convert_hf_to_gguf.py`, vLLM's
`Eagle3LlamaForCausalLM` and SGLang's `LlamaForCausalLMEagle3` all read) is one Llama decoder layer:

  fc.weight                          (hidden, 3 · target_hidden)   low, mid, high residual streams → hidden
  midlayer.input_layernorm.weight    (hidden,)                     the token's embedding, normed
  midlayer.hidden_norm.weight        (hidden,)                     the fused (or fed-back) hidden state, normed
  midlayer.self_attn.{q,k,v}_proj    (heads · head_dim, 2 · hidden) over cat(embedding, hidden state)
  midlayer.self_attn.o_proj, midlayer.post_attention_layernorm, midlayer.mlp.{gate,up,down}_proj
  norm.weight, lm_head.weight        (draft_vocab, hidden)
  d2t (draft_vocab,) int64           target id = draft id + d2t[draft id] (offsets, as every engine reads them)
  t2d (vocab,) bool                  which target ids the draft vocabulary keeps (llama.cpp skips it)

The config must say `draft_vocab_size` and `num_hidden_layers: 1` (how llama.cpp's converter tells an EAGLE-3 head
from a Llama), `tie_word_embeddings: false` (else SGLang reads lm_head from the embedding), and which of the target's
hidden states the head reads. Two conventions exist for those ids:
  - llama.cpp and vLLM read top-level `eagle_aux_hidden_state_layer_ids`, id k = the input of target layer k, the
    un-normed residual stream (transformers' `hidden_states[k]`); default (2, L // 2, L - 3);
  - SGLang reads `eagle_config.eagle_aux_hidden_state_layer_ids` and adds 1 (SpecForge's "output of layer j");
    without it, it captures the same default as the others.
We write the first always and the second only where the ids are not the default, so no loader reads a shifted id.

The embedding is never shipped: every engine borrows the target's. `lm_head` is shipped even where specviz borrows
the target's rows for it (its tied embedding's, or an untied target's LM head's): llama.cpp only borrows a
full-vocabulary head, which d2t would not match.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specviz.models.eagle3_format import LAYER_IDS_KEY, LM_HEAD_FROM_TARGET_HEAD, default_aux_layers, standard_config
from specviz.models.head_shape import rope_theta

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
LAYER_NAMES = (
    "input_layernorm.weight",
    "hidden_norm.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
)
REQUIRED = ("fc.weight", *(f"midlayer.{name}" for name in LAYER_NAMES), "norm.weight")
DISTILL_HINT = "distill one with `python -m specviz distill --kind eagle3`"


class ExportError(ValueError):
    """The head cannot be exported; the message is one sentence (the CLI prints it, exit status 2)."""


def pair_head(pair_name: str, entry) -> Path:
    """A catalogue pair's head folder (its `eagle3_head` where the catalogue names one, else its feature head where that
    is in EAGLE-3's form), or one sentence saying it has none to export."""
    reference = getattr(entry, "eagle3_head_ref", None) or entry.feature_head_ref
    if reference is None:
        raise ExportError(f"the {pair_name} pair has no head to export: {DISTILL_HINT} and name it in models.yaml")
    if (Path(reference) / "feature_head.json").is_file():
        raise ExportError(
            f"the {pair_name} pair has no head to export in EAGLE-3's form: its head ({Path(reference).name}) is "
            f"specviz's EAGLE-style feature head, which runs only in specviz: {DISTILL_HINT} --init-head {getattr(entry, 'feature_head', None) or reference} "
            f"and give it with --head"
        )
    return Path(reference)


def exportable_head(pair_name: str, entry) -> Path | None:
    """The pair's head where it is in EAGLE-3's form (what the deployment report offers to run elsewhere), else None."""
    try:
        head = pair_head(pair_name, entry)
        refuse_unless_eagle3(head)
    except ExportError:
        return None
    return head


def target_gguf_path(entry) -> str | None:
    """Where the pair's target GGUF is (or will be, once fetched) for llama.cpp; None for a target with no GGUF."""
    if entry.target_offline is not None:
        from specviz.models.loading import packed_source

        return str(packed_source(entry.target_offline, entry.target_ref, entry.licence).path)
    return entry.target_ref if entry.target_ref.endswith(".gguf") else None


@dataclass(frozen=True)
class HeadShape:
    """What the config says about one head (eagle3_format.StandardShape), read from its tensors and its target."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    rms_norm_eps: float
    rope_theta: float
    vocab_size: int  # the target's
    draft_vocab_size: int
    target_hidden: int
    target_layers: int
    aux_layers: tuple[int, ...]


def exported_head_config(shape: HeadShape, target_config: dict[str, Any], dtype: str) -> dict[str, Any]:
    """The head's config.json: a one-layer Llama with EAGLE-3's keys (module docstring), the target's rope and tokens."""
    config = standard_config(shape, dtype)
    config.update(
        rope_parameters={"rope_theta": shape.rope_theta, "rope_type": "default"},
        max_position_embeddings=target_config.get("max_position_embeddings", 8192),
        attention_bias=False,
        mlp_bias=False,
        **{key: target_config[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id") if key in target_config},
    )
    if list(shape.aux_layers) != list(default_aux_layers(shape.target_layers)):
        # SGLang's key counts outputs of layers: one less than llama.cpp's and vLLM's inputs
        config["eagle_config"] = {LAYER_IDS_KEY: [k - 1 for k in shape.aux_layers], "use_aux_hidden_state": True}
    return config


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ExportError(f"cannot read {path}: {error}") from None


def refuse_unless_eagle3(head_dir: Path) -> dict[str, Any]:
    """The head folder's config, or one sentence saying why it is not a head in EAGLE-3's form."""
    if (head_dir / "feature_head.json").is_file():
        raise ExportError(
            f"{head_dir} is specviz's EAGLE-style feature head (it reads the post-norm last feature and borrows the "
            f"target's LM head rows), not EAGLE-3's form: {DISTILL_HINT}"
        )
    from specviz.models.stored import weights_file  # the file itself, or its unpacked copy where it ships packed

    if not (head_dir / CONFIG_FILE).is_file() or not weights_file(head_dir, WEIGHTS_FILE).is_file():
        raise ExportError(f"{head_dir} holds no {CONFIG_FILE} and {WEIGHTS_FILE}: {DISTILL_HINT}")
    from safetensors import safe_open

    with safe_open(weights_file(head_dir, WEIGHTS_FILE), framework="pt") as weights:
        names = set(weights.keys())
    missing = [name for name in REQUIRED if name not in names]
    if missing:
        raise ExportError(
            f"{head_dir} is not a head in EAGLE-3's form (no {', '.join(missing[:3])}{'…' if len(missing) > 3 else ''}): "
            f"{DISTILL_HINT}"
        )
    return read_json(head_dir / CONFIG_FILE)


def layer_ids_of(config: dict[str, Any], target_layers: int) -> tuple[int, ...]:
    """The target hidden states the head reads, as llama.cpp and vLLM number them (id k: the input of layer k)."""
    ids = config.get(LAYER_IDS_KEY)
    if ids is None:
        ids = list(default_aux_layers(target_layers))
    if len(ids) != 3 or not all(isinstance(k, int) and 0 < k < target_layers for k in ids):
        raise ExportError(
            f"an EAGLE-3 head reads exactly three of the target's {target_layers} layer inputs, ids 1 … "
            f"{target_layers - 1} (got {ids})"
        )
    return tuple(ids)


@dataclass(frozen=True)
class Export:
    """What `export_eagle3` wrote: the checkpoint, the target folder beside it, and the config it gave the head."""

    head: Path
    target: Path
    config: dict[str, Any]


def export_eagle3(head_dir: Path, target_dir: Path, out: Path) -> Export:
    """Write the head in the standard form to out/head and link the target's folder at out/target (module docstring)."""
    import torch
    from safetensors.torch import load_file, save_file

    from specviz.models.stored import weights_file

    config = refuse_unless_eagle3(head_dir)
    target_config = read_json(target_dir / CONFIG_FILE)
    tensors = load_file(weights_file(head_dir, WEIGHTS_FILE))
    vocab, target_hidden = target_config["vocab_size"], target_config["hidden_size"]
    d2t = tensors.get("d2t")
    if d2t is None:  # a head over the whole vocabulary: every draft id is its target id
        d2t = torch.zeros(tensors["lm_head.weight"].shape[0] if "lm_head.weight" in tensors else vocab, dtype=torch.long)
    d2t = d2t.to(torch.long)
    target_ids = torch.arange(d2t.numel()) + d2t
    if int(target_ids.min()) < 0 or int(target_ids.max()) >= vocab or target_ids.unique().numel() != target_ids.numel():
        raise ExportError(f"{head_dir}: d2t maps the draft vocabulary outside the target's {vocab} ids, or twice onto one")
    if "lm_head.weight" not in tensors:  # specviz borrowed the target's readout rows: ship them
        tied = target_config.get("tie_word_embeddings", True) and not config.get(LM_HEAD_FROM_TARGET_HEAD)
        tensors["lm_head.weight"] = readout_rows_of(target_dir, target_ids, tied).to(tensors["fc.weight"].dtype)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[target_ids] = True
    tensors = {name: tensor.contiguous() for name, tensor in tensors.items() if name in REQUIRED or name == "lm_head.weight"}
    tensors |= {"d2t": d2t, "t2d": t2d}

    q, k, gate = (
        tensors[f"midlayer.{name}"] for name in ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "mlp.gate_proj.weight")
    )
    hidden = tensors["norm.weight"].shape[0]
    head_dim = int(config.get("head_dim") or target_config.get("head_dim") or hidden // target_config["num_attention_heads"])
    shape = HeadShape(
        hidden=hidden,
        heads=q.shape[0] // head_dim,
        kv_heads=k.shape[0] // head_dim,
        head_dim=head_dim,
        ffn=gate.shape[0],
        rms_norm_eps=target_config["rms_norm_eps"],
        rope_theta=rope_theta(target_config),
        vocab_size=vocab,
        draft_vocab_size=d2t.numel(),
        target_hidden=target_hidden,
        target_layers=target_config["num_hidden_layers"],
        aux_layers=layer_ids_of(config, target_config["num_hidden_layers"]),
    )
    check_shapes(tensors, shape)
    dtype = str(tensors["fc.weight"].dtype).removeprefix("torch.")
    written = exported_head_config(shape, target_config, dtype)
    head_out = out / "head"
    head_out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, head_out / WEIGHTS_FILE, metadata={"format": "pt"})
    (head_out / CONFIG_FILE).write_text(json.dumps(written, indent=2) + "\n")
    target_link = out / "target"
    if target_link.is_symlink() or target_link.exists():
        if target_link.resolve() != target_dir.resolve():
            raise ExportError(f"{target_link} already exists and is not the target's folder {target_dir}")
    else:
        target_link.symlink_to(target_dir.resolve(), target_is_directory=True)
    return Export(head_out, target_link, written)


def readout_rows_of(target_dir: Path, ids, tied: bool = True):
    """The target's readout at these ids, read from its safetensors alone: its input embedding where the LM head is
    tied to it (SmolLM2), else its own LM head (Qwen2.5-Coder-1.5B)."""
    from safetensors import safe_open

    from specviz.models.stored import readable_folder  # a target that ships packed weights is read from their copy

    names = ("model.embed_tokens.weight", "embed_tokens.weight") if tied else ("lm_head.weight",)
    for path in sorted(readable_folder(target_dir).glob("*.safetensors")):
        with safe_open(path, framework="pt") as weights:
            for name in names:
                if name in weights.keys():
                    return weights.get_tensor(name)[ids]
    what = "embedding" if tied else "LM head"
    raise ExportError(f"the target folder {target_dir} has no {what} to take the head's LM head rows from")


def check_shapes(tensors: dict, shape: HeadShape) -> None:
    """Every tensor the shape the engines build for this config (a mismatch fails here, not in a server's loader)."""
    h, kv, attn = shape.hidden, shape.kv_heads * shape.head_dim, shape.heads * shape.head_dim
    if h != shape.target_hidden:
        raise ExportError(
            f"the head is {h} wide and its target {shape.target_hidden}: it could not borrow the target's embedding"
        )
    expected = {
        "fc.weight": (h, 3 * shape.target_hidden),
        "midlayer.input_layernorm.weight": (h,),
        "midlayer.hidden_norm.weight": (h,),
        "midlayer.self_attn.q_proj.weight": (attn, 2 * h),
        "midlayer.self_attn.k_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.v_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.o_proj.weight": (h, attn),
        "midlayer.post_attention_layernorm.weight": (h,),
        "midlayer.mlp.gate_proj.weight": (shape.ffn, h),
        "midlayer.mlp.up_proj.weight": (shape.ffn, h),
        "midlayer.mlp.down_proj.weight": (h, shape.ffn),
        "norm.weight": (h,),
        "lm_head.weight": (shape.draft_vocab_size, h),
    }
    for name, wanted in expected.items():
        if tuple(tensors[name].shape) != wanted:
            raise ExportError(f"{name} is {tuple(tensors[name].shape)}, where EAGLE-3's form over this target needs {wanted}")
