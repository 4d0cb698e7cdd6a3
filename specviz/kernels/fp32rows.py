"""The `fp32rows` weight form: the model's own float32 weights, multiplied by specviz's kernel (csrc/fp32rows.cpp),
in which a layer's row is the same bits alone and inside a verify pass on every x86 CPU with AVX2 and FMA.

torch's float32 linear (MKL, oneDNN) chooses its kernel by the number of rows, and on a 2-core AMD EPYC (Zen 4) its
one-row products of the bundled pair's small matrices ran far below memory speed. This form keeps every weight as it
is (nothing is quantised) and computes each output as one fixed chain of fused multiply-adds: the bundled target alone
decoded 1.83× as many tokens a second as through MKL (benchmarks/fp32rows_step.py). A float32 model is still exact
only up to rounding in it: its norms and attention sum in float32 with torch's reductions, which may follow the
number of rows (a verify pass's row 6.7e-6 from its step under AVX2 kernels, compiled: tests/test_row_independence.py
found it), where a bf16 model rounds such bits away; so the form is not one of the row-independent ones
(kernels/forms.py), and a run in it says "exact up to rounding". Built once per machine like the w4a8 kernel
(kernels/build.py); where it cannot run, `why_not()` says why in one sentence and the pair loads in plain float32
instead (models/weight_forms.choose_form).
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import torch
from torch import nn

from specviz.kernels import build, cpu
from specviz.kernels.weight_only import empty_like_parts, shared_rows

NAME = "fp32rows"
LANES = 8
SOURCE = Path(__file__).parent / "csrc" / "fp32rows.cpp"
LIBRARY = "specviz_fp32rows"
FLAGS = ("-O3", "-fopenmp", "-DNDEBUG", "-ffp-contract=off", "-mavx2", "-mfma", f"-DLIBNAME={LIBRARY}")
NEEDS = frozenset({"avx2", "fma"})

_loaded: list[str | None] = []  # [None] once loaded, [why not] once it could not be
_lock = threading.Lock()


def why_not() -> str | None:
    """Why the form cannot run in this process, in one sentence; None where it can (building the kernel if needed)."""
    if not NEEDS <= cpu.flags():
        return "the fp32rows kernel needs a CPU with AVX2 and FMA"
    with _lock:
        if not _loaded:
            try:
                build.load_library(LIBRARY, SOURCE, list(FLAGS), "the float32 kernel", expected_s=15)
                register_fake()
                _loaded.append(None)
            except Exception as error:  # a missing compiler or a failed build: plain float32 serves instead
                first = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
                _loaded.append(f"building the fp32rows kernel failed ({first})")  # choose_form says it, once
        return _loaded[0]


def describe() -> str:
    return "specviz's fp32rows kernel (AVX2 and FMA: one chain of fused multiply-adds per output)"


def register_fake() -> None:
    """Teach torch.export the op's output shape (the compiled step calls it)."""

    @torch.library.register_fake(f"{LIBRARY}::fp32rows_linear")
    def _(x, weight, bias):
        return x.new_empty((*x.shape[:-1], weight.size(0)))


@functools.cache
def ops():
    return getattr(torch.ops, LIBRARY)


class Fp32RowsLinear(nn.Module):
    """y = x Wᵀ (+ b) in float32, W the layer's own weights, each output one fixed chain of products (csrc/fp32rows.cpp)."""

    form_name = NAME
    kernel_source = SOURCE  # what a compiled package that calls the op depends on (engine/aot_step.package_key)

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        if why_not() is not None:
            raise RuntimeError(why_not())
        self.register_buffer("weight", linear.weight.detach().float().contiguous().clone())
        self.register_buffer("bias", linear.bias.detach().float().clone() if linear.bias is not None else None)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    @staticmethod
    def supports(linear: nn.Linear) -> bool:
        """Whether the kernel takes this layer's shape (inputs in whole vectors of eight)."""
        return linear.in_features % LANES == 0

    @staticmethod
    def kernel():
        return ops().fp32rows_linear.default

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) → (..., out), in x's dtype
        return self.kernel()(x, self.weight, self.bias)

    @classmethod
    def concatenated(cls, parts: list[Fp32RowsLinear]) -> Fp32RowsLinear:
        """One layer computing `parts` side by side: each output's chain is its own, so joining them changes no bit;
        each part's weights become a view of the joined ones."""
        joined = empty_like_parts(cls, parts)
        joined.register_buffer("weight", shared_rows(parts, "weight"))
        return joined
