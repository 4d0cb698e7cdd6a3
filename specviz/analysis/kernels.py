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
