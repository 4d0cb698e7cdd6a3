"""Putting a model's linear layers in a weight form (the forms themselves, one registry: specviz/kernels/forms.py).

Row independence also needs an attention that computes a row alike whatever the rows beside it. torch's fused CPU
attention (SDPA) splits its work by the number of query rows, and transformers' eager attention hands its bf16
products to oneDNN, which picks its kernel by the shape: with AMX it sends a one-row product to its AVX-512-BF16
kernel and a 5-row one to AMX tiles, which round differently (issue 43: |Δ logit| 0.312 on SmolLM2 in int4, greedy
speculation parted from plain decoding); without bf16 instructions its jit GEMM blocks by rows (0.625 here with
`ONEDNN_MAX_CPU_ISA=AVX512_CORE`). So the packed forms set the model's attention to the fast path's own
(models/row_attention.py: bf16 products summed in float32, no oneDNN), and transformers' forward, the fast path
(engine/static_cache.py), chains and trees keep a token's logits the same alone and in a pass on every CPU.
tests/test_weight_forms.py checks that a token's logits are the same alone and inside a 5-row pass, on the target's
own weights, and that speculative greedy output equals plain decoding in each form.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from specviz.kernels import choice, forms
from specviz.models import row_attention

log = logging.getLogger(__name__)

# A feature head beside a packed target drafts in int8 (benchmarks/head_forms.py, SmolLM2's head, AVX-512): a draft step
# took 0.37 ms against 0.78 in bf16 and kept 94–96 % of the head's argmaxes (two trainings of the head); int4 was no
# faster (0.38 ms) and kept 80 %. A head too big for the cache streams its weights, and halving them pays: the
# Qwen2.5-Coder-1.5B head (62M weights merged) drafts at τ 0.081 in w4a8 against 0.172 in int8
# (benchmarks/coder_drafters.py), so that pair names `head_weights: w4a8`. A low-rank head's fuse is not packed: it
# drafts as its factors (models/low_rank.py).
HEAD_FORM = "int8"


def head_form_beside(target_form: str | None, asked: str = "auto") -> str | None:
    """The form a feature head drafts in beside a target in `target_form`: beside a packed target the pair's
    `head_weights` (`auto`: HEAD_FORM; a form this CPU cannot run: HEAD_FORM); beside plain weights it stays as trained."""
    if target_form is None or not forms.get(target_form).quantised or not forms.get(target_form).packs:
        return None
    if asked == forms.AUTO or forms.get(asked).why_not() is not None:
        return HEAD_FORM
    return forms.canonical(asked)


def choose_form(requested: str | None, device: torch.device, model: nn.Module | None = None) -> str | None:
    """The form to load a model in: None leaves the dtype alone (a GPU, or no request); "auto" is the fastest exact
    form this CPU runs, timed on the model's own layer shapes (kernels/choice.py), or, before the model is at hand,
    w4a8 where its kernel runs here, else int4."""
    if requested is None or device.type != "cpu":
        return None
    if requested != forms.AUTO:
        form = forms.get(requested)
        why_not = form.why_not() if form.fallback else None
        if why_not is not None:  # e.g. fp32rows off x86: the pair still loads, exact only up to rounding, and says so
            if form.name not in _fell_back:  # once a process: a pair loads its target and its draft in it
                _fell_back.add(form.name)
                log.warning("weight form %s: %s, so %s serves instead", form.name, why_not, form.fallback)
            return form.fallback
        return form.name
    if model is not None:
        return measured_choice(model).form
    return "w4a8" if forms.FORMS["w4a8"].why_not() is None else choice.FALLBACK


_fell_back: set[str] = set()  # forms this process replaced by their fallback, already said in the log


def measured_choice(model: nn.Module) -> choice.FormChoice:
    chosen = choice.fastest_exact(model)
    log.info("weight form auto: %s", chosen.reason)
    return chosen


def apply_form(model: nn.Module, form: str) -> nn.Module:
    """Put the model's linear layers (its LM head included, GPT-2's Conv1D too) in `form`, in place; bf16 and fp32 cast
    the whole model. "auto" is measured on the model first (kernels/choice.py). The form taken is kept as
    `model.weight_form`, and which kernel computes it and why as `model.weight_kernel`."""
    measured = measured_choice(model) if form == forms.AUTO else None
    chosen = forms.get(measured.form if measured else form)
    why = measured.reason if measured else "as asked"
    if not chosen.packs:
        model = model.to(chosen.dtype)
        model.weight_form, model.weight_kernel = chosen.name, f"{chosen.kernel()}; {why}"
        return model
    why_not = chosen.why_not()
    if why_not is not None:
        raise ValueError(f"the {chosen.name} weight form cannot run here: {why_not}")
    model.to(chosen.dtype)  # what the kernels take as activations; norms and the embedding stay bf16
    if hasattr(model, "config"):
        model.config.tie_word_embeddings = False  # the head becomes its own quantised copy; the embedding stays
    if hasattr(model, "set_attn_implementation"):
        # the fast path's attention (models/row_attention.py): SDPA and eager's oneDNN products pick kernels by the
        # number of query rows, so one token's output changed with the tokens beside it (SDPA: |Δ logit| up to 0.78 on
        # SmolLM2; eager on an AMX Xeon: 0.312); a model whose attention soft-caps or has sinks keeps eager attention
        model.set_attn_implementation(row_attention.row_exact() if row_attention.fits(model) else "eager")
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            linear = as_linear(child)
            if linear is not None and chosen.supports(linear):
                setattr(parent, name, chosen.layer(linear))
                release_file_pages(child.weight)  # read once: its pages of the weights file leave this process
    own_memory(model)
    model.weight_form, model.weight_kernel = chosen.name, f"{chosen.kernel()}; {why}"
    return model


def supports(form: str, linear: nn.Linear) -> bool:
    """Whether `form`'s layer takes this linear layer's shape."""
    return forms.get(form).supports(linear)


def as_linear(module: nn.Module) -> nn.Linear | None:
    """The module as a linear layer: itself, or GPT-2's Conv1D (y = x·W + b with W stored (in, out)) as the nn.Linear
    it computes, so that GPT-2's projections take the form too (left in float, their GEMMs would see the other rows)."""
    if isinstance(module, nn.Linear):
        return module
    if type(module).__name__ != "Conv1D" or getattr(module, "weight", None) is None or module.weight.dim() != 2:
        return None
    n_in, n_out = module.weight.shape
    linear = nn.Linear(n_in, n_out, bias=module.bias is not None, device="meta")
    linear.weight = nn.Parameter(module.weight.detach().t().contiguous(), requires_grad=False)  # (out, in)
    if module.bias is not None:
        linear.bias = nn.Parameter(module.bias.detach(), requires_grad=False)
    return linear


MADV_PAGEOUT = 21  # Linux 5.4+: reclaim these pages now; a clean page is dropped, a changed one kept; no data is lost


def release_file_pages(tensor: torch.Tensor) -> None:
    """Let go of a weight's pages of the mapped safetensors file once it has been quantised: the load's peak then stays
    near the quantised size (Qwen2.5-Coder-1.5B: a 3.5 GB file). Only pages of a mapping of a real file are advised,
    and MADV_PAGEOUT never loses data (a later read fetches a page from the file again); elsewhere nothing happens."""
    import ctypes
    import mmap

    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    if not file_backed(start, end):
        return
    page = mmap.PAGESIZE
    first, last = -(-start // page) * page, end // page * page  # whole pages inside the tensor only
    if last > first:
        ctypes.CDLL(None, use_errno=True).madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), MADV_PAGEOUT)


def file_backed(start: int, end: int) -> bool:
    """Whether [start, end) lies inside one mapping of a file (read from /proc/self/maps; False where there is none)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                low, high = (int(part, 16) for part in fields[0].split("-"))
                if low <= start and end <= high:
                    path = fields[5] if len(fields) >= 6 else ""
                    return path.startswith("/") and not path.startswith(("/dev/", "/memfd:")) and not path.endswith("(deleted)")
    except OSError:
        pass
    return False


def own_memory(model: nn.Module) -> None:
    """Give the tensors that stay (embedding, norms, biases) memory of their own. Loaded weights are views of the
    mapped safetensors file, and while one view lives the whole mapping stays resident: Qwen2.5-Coder-1.5B's int4
    form held 4.3 GB instead of 1.8 GB until they were copied."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.data = parameter.data.clone()
        for module in model.modules():
            for name, buffer in list(module.named_buffers(recurse=False)):
                if buffer is not None and buffer.is_floating_point():
                    setattr(module, name, buffer.clone())


def weight_bytes(model: nn.Module) -> int:
    """Bytes of every parameter and buffer: what the form keeps in memory."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)
