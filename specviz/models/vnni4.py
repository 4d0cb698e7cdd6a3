"""The `vnni4` weight form: int4 weights × int8 activations on AVX-512 VNNI, a token's row independent of the others.

torch's own int4 CPU kernel (`_weight_int4pack_mm_for_cpu`, the `int4` form) multiplies bf16 activations by weights it
dequantises on the fly; on an AMD EPYC (Zen 4, 2 cores) that arithmetic, not memory, bounds it: about 34 G params/s
whatever the weights' size, and 4 rows cost 1.7 steps, 5 rows 3.1 (benchmarks/verify_cost_by_size.py). llama.cpp's Q4_K
kernels quantise the activations to int8 and use integer dot products instead, and decode the same 1.5B model 1.8×
faster on that machine. This form does the same with torchao's int8 × int4 kernel, patched to run without AMX
(`csrc/da8w4_vnni.cpp`, its header says what changed):

- each activation row is quantised alone (uint8, its own scale and zero point), the products are integer sums (exact
  in any order), and the epilogue is per element, so a token's output is bit-identical alone and inside a verify pass;
  tests/test_vnni4.py checks it, and greedy speculation against plain decoding in this form;
- weights: 4-bit codes in groups of 32 along the input, a float scale and an integer zero point each;
- measured on that machine, streaming 330 M params from memory: 48–60 G params/s for one row, and 2–5 rows cost
  1.00–1.14 rows.

It is an approximation of the model like every quantised form (activations in 8 bits, as llama.cpp's), and it is what
"the target" means for a pair that runs in it: speculation is exact against the target alone in the same form. The
kernel is compiled once per machine with the machine's own instruction set (g++ through torch.utils.cpp_extension,
about 25 s on 2 cores) and kept in specviz's cache; where the CPU has no AVX-512 VNNI, torch runs its AVX2 kernels
(ATEN_CPU_CAPABILITY=avx2), or the build fails, `available()` says no and `auto` takes `int4`.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import torch
from torch import nn

GROUP = 32
SOURCE = Path(__file__).parent / "csrc" / "da8w4_vnni.cpp"
LIBRARY = "specviz_vnni4"
FLAGS = (
    "-O3",
    "-march=native",
    "-fopenmp",
    "-DNDEBUG",
    "-DCPU_CAPABILITY_AVX512",
    "-DCPU_CAPABILITY_AVX512_VNNI",
    "-DMAX_SMALL_M=8",
    "-DFORCE_INLINE",
    f"-DLIBNAME={LIBRARY}",
)

_loaded: bool | None = None  # None: not tried yet; then whether the kernel is usable in this process
_why_not: str | None = None
_lock = threading.Lock()


def cpu_has_vnni() -> bool:
    """AVX-512 VNNI on this CPU (from /proc/cpuinfo), and torch not told to use its AVX2 kernels (an AVX2 machine)."""
    if torch.backends.cpu.get_cpu_capability() not in ("AVX512", "AMX"):
        return False
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return False
    return "avx512_vnni" in flags.split()


def build_folder() -> Path:
    """Where the compiled kernel is kept: specviz's cache, under a key of its source, flags, torch and this CPU."""
    from specviz.models.sources import cache_root

    cpu = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")), "")
    key = hashlib.sha256("\n".join([SOURCE.read_text(), *FLAGS, torch.__version__, cpu]).encode()).hexdigest()[:16]
    return cache_root() / "kernels" / f"{LIBRARY}-{key}"


def available() -> bool:
    """Whether this process can run the form: the CPU has VNNI and the kernel is built and loaded (once)."""
    global _loaded, _why_not
    with _lock:
        if _loaded is None:
            _loaded, _why_not = False, "the CPU has no AVX-512 VNNI (or torch runs its AVX2 kernels)"
            if cpu_has_vnni():
                try:
                    load_kernel()
                    _loaded, _why_not = True, None
                except Exception as error:  # a missing compiler or a failed build: the int4 form serves instead
                    _why_not = f"building the vnni4 kernel failed ({type(error).__name__}: {str(error).splitlines()[0][:160]})"
                    print(f"specviz: {_why_not}, so int4 serves instead.")
        return _loaded


def why_not() -> str | None:
    """Why the form cannot run here, in one sentence (None where it can, or before `available()` was asked)."""
    return _why_not


def load_kernel() -> None:
    """Build the kernel (first use on this machine) or load the cached build, and teach torch.export its shapes."""
    from torch.utils.cpp_extension import load

    folder = build_folder()
    folder.mkdir(parents=True, exist_ok=True)
    clear_stale_lock(folder)
    load(
        LIBRARY,
        [str(SOURCE)],
        extra_cflags=list(FLAGS),
        build_directory=str(folder),
        is_python_module=False,
        verbose=os.environ.get("SPECVIZ_VERBOSE_BUILD") == "1",
    )

    @torch.library.register_fake(f"{LIBRARY}::da8w4_linear_fused")
    def _(x, weight, weight_scales, weight_qzeros, compensation, bias):
        return x.new_empty((*x.shape[:-1], weight.size(0) * weight.size(-1) * 2))


STALE_LOCK_S = 600  # a first build takes under a minute on 2 cores: a lock this old was left by a killed build


def clear_stale_lock(folder: Path) -> None:
    """Remove the build's lock file if a killed build left it (torch's loader would wait on it forever)."""
    lock = folder / "lock"
    try:
        if time.time() - lock.stat().st_mtime > STALE_LOCK_S:
            lock.unlink()
    except FileNotFoundError:
        pass


QUANTISE_ROWS = 4096  # output channels quantised at a time: float temporaries stay small (a 151,936-row head is 0.9 GB in float)


def quantise(weight: torch.Tensor, group: int = GROUP) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """4-bit codes (uint8, 0–15), float32 scales and integer zero points, per group of `group` inputs; each group's
    range includes 0 (torchao's asymmetric rule). Rows go a few thousand at a time, so the load's peak stays low."""
    parts = [quantise_rows(weight[start : start + QUANTISE_ROWS], group) for start in range(0, weight.shape[0], QUANTISE_ROWS)]
    return tuple(torch.cat(pieces) for pieces in zip(*parts))


def quantise_rows(weight: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    w = weight.detach().float()  # (rows, in)
    n_out, n_in = w.shape
    grouped = w.view(n_out, n_in // group, group)
    low = grouped.amin(dim=-1).clamp(max=0)
    high = grouped.amax(dim=-1).clamp(min=0)
    scale = ((high - low) / 15).clamp(min=1e-6)  # (rows, groups)
    zero = (-torch.round(low / scale)).clamp(0, 15)
    codes = (torch.round(grouped / scale[..., None]) + zero[..., None]).clamp(0, 15).to(torch.uint8).view(n_out, n_in)
    return codes, scale, zero.to(torch.int8)


class Vnni4WeightOnly(nn.Module):
    """y = x Wᵀ (+ b): x quantised per row to uint8 inside the op, W in int4 groups of 32 (torchao's packed layout)."""

    kernel_source = SOURCE  # what a compiled package that calls the op depends on (engine/aot_step.package_key)

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        if not available():
            raise RuntimeError(f"the vnni4 form cannot run here: {why_not()}")
        codes, scale, zero = quantise(linear.weight)
        packed, scales, zeros, compensation = getattr(torch.ops, LIBRARY).da8w4_linear_prepack_cpu(codes, scale, zero)
        self.register_buffer("packed", packed)
        self.register_buffer("scales", scales)
        self.register_buffer("qzeros", zeros)
        self.register_buffer("compensation", compensation)
        self.register_buffer("bias", linear.bias.detach().float().clone() if linear.bias is not None else None)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    @staticmethod
    def kernel():
        """The fused op: per-row uint8 quantisation of x, then the int8 × int4 product and its epilogue."""
        return getattr(torch.ops, LIBRARY).da8w4_linear_fused.default

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) → (..., out), in x's dtype (bf16)
        return self.kernel()(x.to(torch.bfloat16), self.packed, self.scales, self.qzeros, self.compensation, self.bias)


def supports(linear: nn.Linear) -> bool:
    """Whether the kernel takes this layer's shape (inputs in whole groups, outputs in whole blocks of 32)."""
    return linear.in_features % GROUP == 0 and linear.out_features % 32 == 0
