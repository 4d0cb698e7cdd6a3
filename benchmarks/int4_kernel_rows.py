"""The int4 weight-only kernel alone, by the rows it multiplies: what a verify pass's extra rows cost on this CPU.

    python benchmarks/int4_kernel_rows.py [--threads 2] [--rows 1,2,4]

For SmolLM2-135M's matrix shapes (fused q/k/v, o, fused gate/up, down, the LM head), times torch's
`_weight_int4pack_mm_for_cpu` (groups of 32, as the real pair's Q4_1 weights) on random codes, and prints each
call's time and the int4 bytes it reads per second. A kernel limited by reading its weights would cost about the
same for 1, 2 or 4 rows; one limited by dequantising and multiplying costs more per row.
"""

from __future__ import annotations

import argparse
import time

import torch

SHAPES = {"q/k/v": (960, 576), "o": (576, 576), "gate/up": (3072, 576), "down": (576, 1536), "LM head": (49152, 576)}
GROUP = 32


def timed(call, repeats: int = 100) -> float:
    for _ in range(5):
        call()
    started = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - started) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", default="1,2,4")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = [int(r) for r in args.rows.split(",")]
    print(f"{'matrix':>8} {'out × in':>12} " + " ".join(f"{f'{m} row(s)':>22}" for m in rows))
    for name, (out_features, in_features) in SHAPES.items():
        codes = torch.randint(0, 16, (out_features, in_features), dtype=torch.int32)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
        scales = torch.randn(in_features // GROUP, out_features, 2, dtype=torch.bfloat16)
        megabytes = out_features * in_features / 2 / 1e6 + scales.numel() * 2 / 1e6
        cells = []
        for m in rows:
            x = torch.randn(m, in_features, dtype=torch.bfloat16)
            seconds = timed(
                lambda x=x, packed=packed, scales=scales: torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, GROUP, scales)
            )
            cells.append(f"{1e6 * seconds:8.1f} µs {megabytes / seconds / 1e3:5.1f} GB/s")
        print(f"{name:>8} {f'{out_features} × {in_features}':>12} " + " ".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
