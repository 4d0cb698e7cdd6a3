"""The forms a target's weights can take on a CPU, and why the verify pass cares which.

Speculation pays when verifying γ + 1 tokens costs about one step (ν ≈ 1): the weights are read once for all
rows. How close a CPU gets depends on the kernel behind each matrix product:

- `bf16`: torch's linear. With AVX-512 bf16 (or AMX) it goes through oneDNN, which multiplies a few rows for
  little more than one; on AVX2 torch computes bf16 row by row, so k rows cost k steps.
- `int8`: weight-only int8 (`torch.ops.aten._weight_int8pack_mm`): one scale per output channel, bf16
  activations, each row with its own accumulator. Half the bytes of bf16 to read, and vectorised on AVX2 too.
- `int4`: weight-only int4 in groups of 32 (`_weight_int4pack_mm_for_cpu`). The real pair's source is Q4_1
  (groups of 32, a scale and a minimum each), so its weights fit this form almost as they were.
- `vnni4`: int4 weights in groups of 32 × int8 activations quantised per row, integer dot products on AVX-512 VNNI
  (models/vnni4.py: torchao's kernel, patched to run without AMX). Where the CPU has VNNI it is the fastest form
  measured: on an AMD EPYC (Zen 4) 48–60 G params/s streaming from memory against int4's 34, and 2–5 rows cost
  1.00–1.14 rows against int4's 1.2–3.1 (benchmarks/verify_cost_by_size.py).
- `fp32`: MKL's float32 GEMM: twice bf16's bytes, but a real matrix kernel on any x86 CPU.

Row independence also needs an attention that computes a row alike whatever the rows beside it. torch's fused CPU
attention (SDPA) splits its work by the number of query rows, and transformers' eager attention hands its bf16
products to oneDNN, which picks its kernel by the shape: with AMX it sends a one-row product to its AVX-512-BF16
kernel and a 5-row one to AMX tiles, which round differently (issue 43: |Δ logit| 0.312 on SmolLM2 in int4, greedy
speculation parted from plain decoding); without bf16 instructions its jit GEMM blocks by rows (0.625 here with
`ONEDNN_MAX_CPU_ISA=AVX512_CORE`). So the weight-only forms set the model's attention to the fast path's own
(models/row_attention.py: bf16 products summed in float32, no oneDNN), and transformers' forward, the fast path
(engine/static_cache.py), chains and trees keep a token's logits the same alone and in a pass on every CPU.

Exact forms (`ROW_EXACT_FORMS`): int8, int4 and vnni4, whose kernels give each row its own accumulator in a fixed
order (torch 2.13's `_weight_int8pack_mm` and `_weight_int4pack_mm_for_cpu` run the same per-row micro-kernel for 1 to
4 rows at a time on AVX-512, AVX2 and the scalar build, and call no oneDNN; vnni4 takes at most 8 rows a call through
one VNNI micro-kernel). bf16 and fp32 are not: their linear layers are oneDNN's and MKL's GEMMs, which choose kernels by
the number of rows (bf16 here, 2 threads: a 1536 → 576 product differed in the last bit between one row and five), so
a run in them is exact only up to rounding, and greedy speculation may part from plain decoding at a near-tie.

Not `quantize_dynamic`: it quantises activations with one scale shared by all rows of a forward, so a token's
logits would depend on which other tokens share the verify pass, and greedy speculation would stop being exact.
Whatever the form, tests/test_weight_forms.py checks that a token's logits are the same alone and inside a
5-row pass, on the target's own weights, and that speculative greedy output equals plain decoding in that form.
"""

from __future__ import annotations

import torch
from torch import nn

from specviz.models import row_attention, vnni4

FORMS = ("bf16", "int8", "int4", "vnni4", "fp32")
ROW_EXACT_FORMS = ("int8", "int4", "vnni4")  # a token's logits do not depend on the rows beside it, on every CPU
INT4_GROUP = 32
# "auto": what benchmarks/verify_rows.py measured best for speculation (docs/pairs.md, "A real model"). With AVX-512 bf16,
# int4 was the fastest step (10.2 ms, bf16 20.2) with ν 1.03–1.15 at k = 2–4; with the AVX2 settings int4 had the
# flattest ν (1.04–1.26; bf16 1.37–2.25 row by row). Both weight-only forms are row-independent; bf16 is not.
# Where the CPU has AVX-512 VNNI (and its kernel builds), "auto" takes vnni4 instead (choose_form): faster per step
# and flat in rows on the machines measured; AUTO_FORM is what every other CPU runs.
AUTO_FORM = "int4"
# A feature head beside a weight-only target drafts in int8 (benchmarks/head_forms.py, SmolLM2's head, AVX-512): a
# draft step took 0.37 ms against 0.78 in bf16 and kept 94–96 % of the head's argmaxes (two trainings of the head); int4 was no faster (0.38 ms)
# and kept 80 %. A head too big for the cache streams its weights, and halving them pays: the Qwen2.5-Coder-1.5B
# head (62M weights merged) drafts at τ 0.081 in vnni4 against 0.172 in int8 (benchmarks/coder_drafters.py), so that
# pair names `head_weights: vnni4`. A low-rank head's fuse is not packed: it drafts as its factors (models/low_rank.py).
HEAD_FORM = "int8"


def rows_independent(form: str | None) -> bool:
    """Whether a target in `form` keeps a token's logits the same alone and inside a verify pass on every CPU, so that
    greedy speculation equals plain decoding to the token (bf16, fp32 and plain weights: only up to rounding)."""
    return form in ROW_EXACT_FORMS


def head_form_beside(target_form: str | None, asked: str = "auto") -> str | None:
    """The form a feature head drafts in beside a target in `target_form`: beside a weight-only target the pair's
    `head_weights` (`auto`: HEAD_FORM; vnni4 only where its kernel runs here, else HEAD_FORM); beside plain weights it
    stays as trained."""
    if target_form not in ("int8", "int4", "vnni4"):
        return None
    if asked == "auto" or (asked == "vnni4" and not vnni4.available()):
        return HEAD_FORM
    return asked


class Int8WeightOnly(nn.Module):
    """y = x Wᵀ (+ b) with W stored as int8 and one bf16 scale per output channel; x in bf16."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        keep_bias(self, linear)
        weight = linear.weight.detach().float()  # (out, in)
        scales = (weight.abs().amax(dim=1) / 127).clamp(min=1e-12)
        self.register_buffer("weight_int8", torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scales", scales.to(torch.bfloat16))
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        out = torch.ops.aten._weight_int8pack_mm(rows, self.weight_int8, self.scales)  # (rows, out)
        return with_bias(out, self.bias).view(*x.shape[:-1], self.out_features)


class Int4WeightOnly(nn.Module):
    """y = x Wᵀ (+ b) with W stored as 4-bit codes in groups of 32 along the input, each with a bf16 scale and offset."""

    def __init__(self, linear: nn.Linear, group: int = INT4_GROUP) -> None:
        super().__init__()
        keep_bias(self, linear)
        weight = linear.weight.detach().float()  # (out, in)
        n_out, n_in = weight.shape
        grouped = weight.view(n_out, n_in // group, group)
        low, high = grouped.amin(dim=-1), grouped.amax(dim=-1)
        scale = ((high - low) / 15).clamp(min=1e-12)  # (out, groups)
        codes = torch.round((grouped - low[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).view(n_out, n_in)
        # the kernel computes (code − 8) · scale + zero, so zero = low + 8 · scale
        zero = low + 8 * scale
        self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1))
        self.register_buffer(
            "scales_and_zeros", torch.stack([scale, zero], dim=-1).transpose(0, 1).contiguous().to(torch.bfloat16)
        )
        self.group = group
        self.in_features, self.out_features = n_in, n_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.packed, self.group, self.scales_and_zeros)
        return with_bias(out, self.bias).view(*x.shape[:-1], self.out_features)


def keep_bias(module: nn.Module, linear: nn.Linear) -> None:
    """The linear layer's bias (Qwen2's q, k and v have one), kept in bf16 beside the quantised weight; None if it has none."""
    bias = linear.bias.detach().to(torch.bfloat16) if linear.bias is not None else None
    module.register_buffer("bias", bias)


def with_bias(out: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The product plus the bias, added to each row alone (elementwise: a row's values do not depend on the others)."""
    return out if bias is None else out + bias


def supports(form: str, linear: nn.Linear) -> bool:
    if form == "int4":
        return linear.in_features % INT4_GROUP == 0 and linear.out_features % 16 == 0
    if form == "vnni4":
        return vnni4.supports(linear)
    return True


def vnni4_module() -> type[nn.Module]:
    """The vnni4 form's module, where this process can run it (models/vnni4.py); else why not, in one sentence."""
    if not vnni4.available():
        raise ValueError(f"the vnni4 weight form cannot run here: {vnni4.why_not()}")
    return vnni4.Vnni4WeightOnly


def apply_form(model: nn.Module, form: str) -> nn.Module:
    """Put the model's linear layers (its LM head included, GPT-2's Conv1D too) in `form`, in place; bf16 and fp32 cast
    the whole model."""
    if form not in FORMS:
        raise ValueError(f"unknown weight form {form!r}: choose one of {', '.join(FORMS)}")
    if form in ("bf16", "fp32"):
        return model.to(torch.bfloat16 if form == "bf16" else torch.float32)
    model.to(torch.bfloat16)  # what the kernels take as activations; norms and the embedding stay bf16
    make = {"int8": Int8WeightOnly, "int4": Int4WeightOnly}.get(form) or vnni4_module()
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
            if linear is not None and supports(form, linear):
                setattr(parent, name, make(linear))
                release_file_pages(child.weight)  # read once: its pages of the weights file leave this process
    own_memory(model)
    return model


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


def choose_form(requested: str | None, device: torch.device) -> str | None:
    """The form to load a model in: None leaves the dtype alone (a GPU, or no request); "auto" is the measured best:
    vnni4 where the CPU has AVX-512 VNNI and its kernel builds, else int4."""
    if requested is None or device.type != "cpu":
        return None
    if requested != "auto":
        return requested
    return "vnni4" if vnni4.available() else AUTO_FORM


def weight_bytes(model: nn.Module) -> int:
    """Bytes of every parameter and buffer: what the form keeps in memory."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)
