"""The `w4a8` weight form: 4-bit weights × 8-bit activations, integer dot products, a token's row independent of the
others, on every x86 CPU with AVX2 (csrc/w4a8.cpp: torchao's int8 × int4 kernel with an AVX2 path added).

torch's own int4 CPU kernel (the `int4` form) multiplies bf16 activations by weights it dequantises on the fly: bound
by arithmetic, about 15 G weights/s on an AVX2-only AMD EPYC (Zen 3) and 34 on Zen 4 whatever the matrix's size, so a
k-row verify pass costs nearly k steps. llama.cpp's 4-bit kernels quantise the activations to 8 bits and take integer
dot products instead, and stream the weights at memory speed. This form does the same:

- each activation row is quantised alone (uint8, its own scale and zero point) inside the op, the products are integer
  sums (exact in any order) and the float epilogue is the same per element on every path, so a token's output is
  bit-identical alone, inside a verify pass, and on the AVX-512 VNNI and AVX2 paths alike;
- weights: 4-bit codes in groups of 32 along the input, a float16 scale and an integer zero point each (0.59 bytes
  streamed per weight).

It approximates the model like every quantised form (activations in 8 bits, as llama.cpp's), and it is what "the
target" means for a pair that runs in it: speculation is exact against the target alone in the same form. The kernel
is compiled once per machine for the path the CPU takes (kernels/cpu.kernel_path: AVX-512 VNNI, else AVX2;
$SPECVIZ_KERNEL_ISA=avx2 forces AVX2) and kept in specviz's cache; where it cannot build, `why_not()` says why in one
sentence and `auto` takes another form.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import torch
from torch import nn

from specviz.kernels import build, cpu
from specviz.kernels.weight_only import empty_like_parts, shared_rows

NAME = "w4a8"
GROUP = 32
BLOCK_N = 32
SOURCE = Path(__file__).parent / "csrc" / "w4a8.cpp"
COMMON_FLAGS = ("-O3", "-fopenmp", "-DNDEBUG", "-ffp-contract=off")  # no FMA contraction: every path rounds alike
PATH_FLAGS = {
    "avx512": (
        "-mavx2",
        "-mfma",
        "-mf16c",
        "-mavx512f",
        "-mavx512bw",
        "-mavx512vl",
        "-mavx512dq",
        "-mavx512vnni",
        "-DCPU_CAPABILITY_AVX512",
        "-DW4A8_AVX512",
    ),
    "avx2": ("-mavx2", "-mfma", "-mf16c", "-DCPU_CAPABILITY_AVX2", "-DW4A8_AVX2"),
}

_loaded: dict[str, str | None] = {}  # path → None (loaded) or why it could not be
_lock = threading.Lock()


def library(path: str) -> str:
    return f"specviz_w4a8_{path}"


def flags(path: str) -> list[str]:
    extra = ["-mavxvnni"] if path == "avx2" and cpu.has_avx_vnni() else []
    return [*COMMON_FLAGS, *PATH_FLAGS[path], *extra, f"-DLIBNAME={library(path)}"]


def path() -> str | None:
    """The kernel path this process takes ("avx512", "avx2"), None where neither runs here."""
    return cpu.kernel_path()[0]


def why_not() -> str | None:
    """Why the form cannot run in this process, in one sentence; None where it can (building the kernel if needed)."""
    chosen, reason = cpu.kernel_path()
    if chosen is None:
        return f"the w4a8 kernel cannot run here: {reason}"
    with _lock:
        if chosen not in _loaded:
            try:
                build.load_library(library(chosen), SOURCE, flags(chosen), f"the 4-bit kernel ({chosen.upper()} path)")
                register_fake(library(chosen))
                _loaded[chosen] = None
            except Exception as error:  # a missing compiler or a failed build: another form serves instead
                first = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
                _loaded[chosen] = f"building the w4a8 kernel failed ({first})"
                build.log.warning("specviz: %s, so another weight form serves instead", _loaded[chosen])
        return _loaded[chosen]


def available() -> bool:
    """Whether this process can run the form: the CPU takes a path and its kernel is built and loaded (once)."""
    return why_not() is None


def describe() -> str:
    """Which path runs and why, for a run's details ("AVX2 path: the CPU has AVX2 and no AVX-512 VNNI")."""
    chosen, reason = cpu.kernel_path()
    return f"{chosen.upper()} path: {reason}" if chosen else reason


def register_fake(name: str) -> None:
    """Teach torch.export the op's output shape (the compiled step calls it)."""

    @torch.library.register_fake(f"{name}::w4a8_linear")
    def _(x, weight, scales, qzeros, bias):
        return x.new_empty((*x.shape[:-1], weight.size(0) * BLOCK_N))


@functools.cache
def ops():
    """The op library of this process's path, looked up once (a layer calls it on every forward)."""
    return getattr(torch.ops, library(path()))


QUANTISE_ROWS = 4096  # output channels quantised at a time: float temporaries stay small (a 151,936-row head is 0.9 GB in float)


def quantise(weight: torch.Tensor, group: int = GROUP) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """4-bit codes (uint8, 0–15), float16 scales and integer zero points, per group of `group` inputs; each group's
    range includes 0 (torchao's asymmetric rule), and the codes are rounded against the float16 scale the kernel
    reads. Rows go a few thousand at a time, so the load's peak stays low."""
    parts = [quantise_rows(weight[start : start + QUANTISE_ROWS], group) for start in range(0, weight.shape[0], QUANTISE_ROWS)]
    return tuple(torch.cat(pieces) for pieces in zip(*parts))


def quantise_rows(weight: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    w = weight.detach().float()  # (rows, in)
    n_out, n_in = w.shape
    grouped = w.view(n_out, n_in // group, group)
    low = grouped.amin(dim=-1).clamp(max=0)
    high = grouped.amax(dim=-1).clamp(min=0)
    scale = ((high - low) / 15).clamp(min=1e-6).half().float()  # (rows, groups), as the kernel reads it
    zero = (-torch.round(low / scale)).clamp(0, 15)
    codes = (torch.round(grouped / scale[..., None]) + zero[..., None]).clamp(0, 15).to(torch.uint8).view(n_out, n_in)
    return codes, scale.half(), zero.to(torch.int8)


class W4A8Linear(nn.Module):
    """y = x Wᵀ (+ b): x quantised per row to uint8 inside the op, W in 4-bit groups of 32 (torchao's packed layout)."""

    form_name = NAME
    kernel_source = SOURCE  # what a compiled package that calls the op depends on (engine/aot_step.package_key)

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        if not available():
            raise RuntimeError(why_not())
        codes, scale, zero = quantise(linear.weight)
        packed, scales, zeros = ops().w4a8_prepack(codes, scale, zero)
        self.register_buffer("packed", packed)
        self.register_buffer("scales", scales)
        self.register_buffer("qzeros", zeros)
        self.register_buffer("bias", linear.bias.detach().float().clone() if linear.bias is not None else None)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    @staticmethod
    def supports(linear: nn.Linear) -> bool:
        """Whether the kernel takes this layer's shape (inputs in whole groups, outputs in whole blocks of 32)."""
        return linear.in_features % GROUP == 0 and linear.out_features % BLOCK_N == 0

    @staticmethod
    def kernel():
        """The fused op: per-row uint8 quantisation of x, then the int8 × int4 product and its epilogue."""
        return ops().w4a8_linear.default

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) → (..., out), in x's dtype (bf16)
        return self.kernel()(x.to(torch.bfloat16), self.packed, self.scales, self.qzeros, self.bias)

    @classmethod
    def concatenated(cls, parts: list[W4A8Linear]) -> W4A8Linear:
        """One layer computing `parts` side by side (blocks of 32 output channels concatenate bit for bit); each part's
        buffers become views of the joined ones, so no copy of the codes stays."""
        joined = empty_like_parts(cls, parts)
        for name in ("packed", "scales", "qzeros"):
            joined.register_buffer(name, shared_rows(parts, name))
        return joined
