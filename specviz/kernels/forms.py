"""The weight forms: every way specviz can keep a model's linear layers on a CPU, declared once.

Speculation pays when verifying γ + 1 tokens costs about one step (ν ≈ 1): the weights are read once for all rows. How
close a CPU gets depends on the kernel behind each matrix product, and whether greedy speculation equals plain decoding
*to the token* depends on whether a token's logits are the same alone and inside a verify pass:

- `bf16`, `fp32`: torch's linear (oneDNN, MKL). Their GEMMs choose kernels by the number of rows (bf16 on a Zen 4,
  2 threads: a 1536 → 576 product differed in the last bit between one row and five), so a run in them is exact only up
  to rounding.
- `int8`, `int4`: weights only, on torch's own kernels (kernels/weight_only.py): bf16 activations, one accumulator per
  row. Row-independent on every CPU; torch's int4 kernel is bound by arithmetic (a k-row pass costs nearly k steps).
- `w4a8`: 4-bit weights × 8-bit activations, integer dot products (kernels/w4a8.py): row-independent and bit-identical on
  its AVX-512 VNNI and AVX2 paths; it streams its weights at memory speed where the CPU has either.
- `fp32rows`: the model's own float32 weights, nothing quantised, each output one fixed chain of fused multiply-adds
  (kernels/fp32rows.py): its products are row-independent and the same bits on every x86 CPU with AVX2, but a float32
  model's norms and attention sums are torch's float32 reductions, which may follow the number of rows (6.7e-6 apart
  under AVX2 kernels, compiled), so a model in it is exact only up to rounding, like `fp32`, and faster: the bundled
  pairs' form.

Not `quantize_dynamic`: it quantises activations with one scale shared by all rows of a forward, so a token's logits
would depend on which other tokens share the verify pass. Every list of forms, choice, fusion and exactness question
in specviz asks this module (tests/test_weight_forms.py holds the rest of the code to it).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the page imports this registry before torch loads: torch is imported where it is used
    import torch
    from torch import nn


def _torch_kernels() -> str:
    import torch

    return f"torch's kernels ({torch.backends.cpu.get_cpu_capability()})"


def _w4a8_why_not() -> str | None:
    from specviz.kernels import w4a8

    return w4a8.why_not()


def _w4a8_kernel() -> str:
    from specviz.kernels import w4a8

    return f"specviz's w4a8 kernel, {w4a8.describe()}"


def _fp32rows_why_not() -> str | None:
    from specviz.kernels import fp32rows

    return fp32rows.why_not()


def _fp32rows_kernel() -> str:
    from specviz.kernels import fp32rows

    return fp32rows.describe()


@dataclass(frozen=True)
class WeightForm:
    """One form: its name, what it does, the layer that packs a linear layer into it ("module:Class"; None: a cast of
    the whole model to `dtype`), whether a row's output is independent of the rows beside it, and the bytes it streams
    per weight."""

    name: str
    summary: str
    layer_path: str | None
    dtype_name: str
    rows_independent: bool
    bytes_per_weight: float
    why_not_here: Callable[[], str | None] = lambda: None  # why this process cannot run it (None: it can)
    kernel_here: Callable[[], str] = _torch_kernels
    quantises_activations: bool = False  # w4a8 multiplies 8-bit activations; the others keep them in bf16 or fp32
    quantised: bool = True  # a packed form's weights are quantised (int8, int4, w4a8); fp32rows keeps them (casts: n/a)
    fallback: str | None = None  # the form a pair asking for this one loads in where this one cannot run here

    @property
    def packs(self) -> bool:
        """Whether the form replaces linear layers with a layer of its own (int8, int4, w4a8, fp32rows), not a dtype
        cast; `quantised` says whether that layer quantises the weights."""
        return self.layer_path is not None

    @property
    def weight_only(self) -> bool:
        """A packed form whose activations stay in bf16 (int8, int4): only the weights are quantised."""
        return self.packs and self.quantised and not self.quantises_activations

    @property
    def layer(self) -> type[nn.Module] | None:
        """The layer class that packs a linear layer into the form (imported on first use: it needs torch)."""
        if self.layer_path is None:
            return None
        module, name = self.layer_path.split(":")
        return getattr(importlib.import_module(module), name)

    @property
    def dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, self.dtype_name)

    def why_not(self) -> str | None:
        """Why this process cannot run the form, in one sentence; None where it can."""
        return self.why_not_here()

    def kernel(self) -> str:
        """Which kernel computes the form in this process, and why that one (for a run's details)."""
        return self.kernel_here()

    def supports(self, linear: nn.Linear) -> bool:
        """Whether the form's layer takes this linear layer's shape (a cast takes every shape)."""
        return self.layer is None or self.layer.supports(linear)


FORMS: dict[str, WeightForm] = {
    form.name: form
    for form in (
        WeightForm("bf16", "torch's bf16 linear (oneDNN): exact only up to rounding", None, "bfloat16", False, 2.0),
        WeightForm(
            "int8",
            "int8 weights, bf16 activations (torch's kernel)",
            "specviz.kernels.weight_only:Int8WeightOnly",
            "bfloat16",
            True,
            1.0,
        ),
        WeightForm(
            "int4",
            "4-bit weights in groups of 32, bf16 activations (torch's kernel)",
            "specviz.kernels.weight_only:Int4WeightOnly",
            "bfloat16",
            True,
            0.625,
        ),
        WeightForm(
            "w4a8",
            "4-bit weights × 8-bit activations, integer dot products (specviz's kernel: AVX-512 VNNI or AVX2)",
            "specviz.kernels.w4a8:W4A8Linear",
            "bfloat16",
            True,
            0.59375,
            _w4a8_why_not,
            _w4a8_kernel,
        ),
        WeightForm("fp32", "torch's float32 linear (MKL): exact only up to rounding", None, "float32", False, 4.0),
        WeightForm(
            "fp32rows",
            "float32 weights as they are, one fixed chain of products per output (specviz's kernel: AVX2 and FMA): "
            "exact only up to rounding",
            "specviz.kernels.fp32rows:Fp32RowsLinear",
            "float32",
            False,  # its products are row-independent; a float32 model's reductions are not always (see above)
            4.0,
            _fp32rows_why_not,
            _fp32rows_kernel,
            quantised=False,
            fallback="fp32",
        ),
    )
}
ALIASES = {"vnni4": "w4a8"}  # the form's name before it ran on AVX2 too (models.yaml files and scripts may say it)
AUTO = "auto"  # the fastest exact form this CPU runs, measured on the pair's shapes (kernels/choice.py)


def names() -> tuple[str, ...]:
    """Every form's name, in the order a menu lists them."""
    return tuple(FORMS)


def packed_names() -> tuple[str, ...]:
    """The forms that quantise linear layers (what a feature head can draft in beside a weight-only target)."""
    return tuple(name for name, form in FORMS.items() if form.packs and form.quantised)


def get(name: str) -> WeightForm:
    """The form called `name` (or an alias of it); a ValueError naming the choices where there is none."""
    form = FORMS.get(ALIASES.get(name, name))
    if form is None:
        raise ValueError(f"unknown weight form {name!r}: choose one of {', '.join(names())} (or {AUTO})")
    return form


def canonical(name: str | None) -> str | None:
    """The form's own name for `name` ("vnni4" → "w4a8"); auto and None as they are."""
    return name if name in (None, AUTO) else get(name).name


def rows_independent(name: str | None) -> bool:
    """Whether a model in the form keeps a token's logits the same alone and inside a verify pass on every CPU."""
    return name is not None and name in FORMS and FORMS[name].rows_independent


def runnable_here() -> tuple[str, ...]:
    """The forms this process can run (w4a8 only where its kernel builds for this CPU)."""
    return tuple(name for name, form in FORMS.items() if form.why_not() is None)


def form_of(module: nn.Module) -> WeightForm | None:
    """The form a packed layer is in; None for any other module (a float linear layer included)."""
    return FORMS.get(getattr(type(module), "form_name", ""))


def concatenated(parts: list[nn.Module]) -> nn.Module | None:
    """One layer computing `parts` (same input, same packed form) side by side in one kernel call, or None where joining
    them could change a bit (float layers: a GEMM may block its work by the output width; parts with and without a bias)."""
    forms = {form_of(part) for part in parts}
    if len(forms) != 1 or None in forms or len({part.bias is None for part in parts}) > 1:
        return None
    return next(iter(forms)).layer.concatenated(parts)


def model_rows_independent(model: nn.Module) -> bool:
    """Whether every matrix product of the model's layers is a row-independent form's: no module holds a float matrix
    as its weight (a float linear layer, or GPT-2's Conv1D, computes through a GEMM that sees the other rows); an
    embedding's lookup is not a product."""
    import torch
    from torch import nn

    for module in model.modules():
        if isinstance(module, nn.Embedding):
            continue
        form = form_of(module)
        if form is not None:
            if not form.rows_independent:
                return False
            continue
        weight = getattr(module, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.dim() == 2 and weight.is_floating_point():
            return False
    return True


@functools.cache
def source_text(path: Path) -> str:
    """A native kernel's C++ source, read once per process (the keys of compiled packages and of γ auto's choices
    include it)."""
    return path.read_text()


def native_kernels(model: nn.Module) -> list[str]:
    """What a compiled package that calls our own ops depends on: each op library's name and its C++ source (the path
    a library was built for is in its name, so a package compiled against one path is not loaded beside the other)."""
    from specviz.kernels import fp32rows, w4a8

    found = {}
    for module in model.modules():
        if isinstance(module, w4a8.W4A8Linear):
            found[w4a8.library(w4a8.path() or "none")] = source_text(w4a8.SOURCE)
        elif isinstance(module, fp32rows.Fp32RowsLinear):
            found[fp32rows.LIBRARY] = source_text(fp32rows.SOURCE)
    return [f"{name}\n{source}" for name, source in sorted(found.items())]
