"""What a processor's torch kernels do with half precision: where a verify pass multiplies its rows one by one.

A verify pass multiplies each weight matrix by γ + 1 rows where a plain step multiplies it by one. With a
matrix kernel for the dtype the extra rows cost little (reading the weights dominates), which is the
theory's ν ≈ 1. torch has no bf16 or fp16 matrix kernel for an x86 processor without AVX-512 or AMX: it
multiplies row by row, and k rows cost about k times one (benchmarks/verify_rows.py measures it).
"""

from __future__ import annotations

ROW_BY_ROW_CAPABILITIES = ("NO AVX", "AVX2")  # torch.backends.cpu.get_cpu_capability() on such x86 processors
HALF_PRECISION = ("bfloat16", "float16")


def multiplies_half_precision_row_by_row(capability: str | None, dtype: str | None) -> bool:
    """Whether torch multiplies this dtype's matrices row by row on a CPU of this capability."""
    return capability in ROW_BY_ROW_CAPABILITIES and dtype in HALF_PRECISION


# The CPU kernel sets a run can be forced into, each as the environment that forces it before torch loads (torch's
# own kernels by ATEN_CPU_CAPABILITY, oneDNN's by ONEDNN_MAX_CPU_ISA), with the /proc/cpuinfo flags it needs: forcing
# a set the CPU lacks would crash it (ATen) or be capped at what the CPU has (oneDNN). tests/test_row_independence.py
# and benchmarks/row_independence.py run each one the CPU offers in turn.
AVX512 = ("avx512f", "avx512bw", "avx512vl", "avx512dq")
KERNEL_SETS = {
    "avx2": ({"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}, ("avx2",)),  # no oneDNN kernel for bf16
    "avx512": ({"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, AVX512),  # Skylake, Cascade Lake
    "avx512-bf16": ({"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, (*AVX512, "avx512_bf16")),
    "amx": ({"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}, (*AVX512, "amx_bf16")),
}


def cpu_flags() -> set[str]:
    """This CPU's feature flags, from /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            line = next(line for line in cpuinfo if line.startswith("flags"))
    except (OSError, StopIteration):
        return set()
    return set(line.split(":", 1)[1].split())


def offered_kernel_sets(flags: set[str] | None = None) -> dict[str, dict[str, str]]:
    """The kernel sets this CPU can run (name → the environment that forces it), weakest first."""
    flags = cpu_flags() if flags is None else flags
    return {name: dict(env) for name, (env, needs) in KERNEL_SETS.items() if set(needs) <= flags}
