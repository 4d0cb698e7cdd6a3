"""ν(k) against weight size: is a verify pass cheap because the weights stream from memory, and dear when they fit in
the cache? (The issue "A real pair that pays on a CPU": prove or refute it with measurements.)

Synthetic targets: stacks of square layers in each weight form the engine runs (`int4`: torch's int4 weight-only
kernel, bf16 activations; `w4a8`: 4-bit weights × 8-bit activations, specviz/kernels/w4a8.py, on its AVX-512 VNNI
path, or its AVX2 path with SPECVIZ_KERNEL_ISA=avx2), from 16 MB to 2 GB of weights. For each size, a pass over
k = 1 … 8 rows through the whole stack is timed (best of several), and ν(k) = time(k) ÷ time(1). The sweep is repeated
`--rounds` times, minutes apart if asked, to see whether a size's ν holds still. The machine's last-level cache
(from the OS) and its memory read bandwidth (measured) go in the results file beside the curves.

    python benchmarks/verify_cost_by_size.py --threads 2 --rounds 3 --save verify_cost_by_size
    ATEN_CPU_CAPABILITY=avx2 SPECVIZ_KERNEL_ISA=avx2 python benchmarks/verify_cost_by_size.py --threads 2 --save verify_cost_by_size_avx2
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from benchmarks.results import write_results  # noqa: E402
from specviz.analysis.cache_fit import last_level_cache_bytes, measure_read_bandwidth, mib  # noqa: E402
from specviz.kernels import forms as weight_forms  # noqa: E402
from specviz.kernels import w4a8  # noqa: E402

WIDTH = 2048  # each layer is WIDTH × WIDTH: 2 MiB of int4 codes (+ its scales), so a size is a count of layers
SIZES_MB = (16, 64, 256, 1024, 2048)
ROWS = (1, 2, 3, 4, 5, 6, 8)


def synthetic_stack(megabytes: int, form: str) -> list[nn.Module]:
    """Layers in `form` adding up to about `megabytes` of weights (codes, scales and offsets), random values."""
    make = weight_forms.get(form).layer
    layer = make(nn.Linear(WIDTH, WIDTH, bias=False))
    per_layer = sum(t.numel() * t.element_size() for t in layer.buffers())
    count = max(1, round(megabytes * 2**20 / per_layer))
    return [layer, *(make(nn.Linear(WIDTH, WIDTH, bias=False)) for _ in range(count - 1))]


def pass_seconds(stack: list[nn.Module], rows: int, repeats: int) -> float:
    """The best time of one pass of `rows` rows through every layer (each layer reads its own weights once)."""
    x = torch.randn(rows, WIDTH, dtype=torch.bfloat16)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for layer in stack:
            layer(x)
        best = min(best, time.perf_counter() - started)
    return best


def curve(stack: list[nn.Module], repeats: int) -> dict:
    pass_seconds(stack, 1, 2)  # warm the allocator and the kernels
    seconds = {rows: pass_seconds(stack, rows, repeats) for rows in ROWS}
    return {
        "one_row_ms": round(seconds[1] * 1000, 3),
        "nu": {str(rows): round(seconds[rows] / seconds[1], 3) for rows in ROWS},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="sweeps of every size, one after another")
    parser.add_argument("--pause-s", type=float, default=0.0, help="seconds between rounds")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES_MB)), help="MB of weights, comma-separated")
    parser.add_argument("--forms", default="int4,w4a8", help="weight forms, comma-separated (w4a8 where its kernel runs)")
    parser.add_argument("--save", help="write benchmarks/results/NAME.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cache = last_level_cache_bytes()
    bandwidth = measure_read_bandwidth()
    sizes = [int(size) for size in args.sizes.split(",")]
    forms = [form for form in args.forms.split(",") if form != "w4a8" or w4a8.available()]
    rounds = []
    for number in range(args.rounds):
        if number and args.pause_s:
            time.sleep(args.pause_s)
        measured = {form: {} for form in forms}
        for form in forms:
            for size in sizes:
                stack = synthetic_stack(size, form)  # one stack in memory at a time
                weights = sum(t.numel() * t.element_size() for layer in stack for t in layer.buffers())
                row = {"weight_bytes": weights, "in_cache": cache is not None and weights <= cache, **curve(stack, args.repeats)}
                row["params_per_s"] = round(len(stack) * WIDTH * WIDTH / (row["one_row_ms"] / 1000))
                measured[form][str(size)] = row
                del stack
                print(
                    f"round {number + 1} {form:>5}: {mib(weights):>10}  one row {row['one_row_ms']:8.2f} ms  "
                    f"{row['params_per_s'] / 1e9:5.1f} G params/s  " + "  ".join(f"ν({k}) {v:.2f}" for k, v in row["nu"].items()),
                    flush=True,
                )
        rounds.append({"at": time.strftime("%H:%M:%S"), "forms": measured})
    values = {
        "last_level_cache_bytes": cache,
        "read_bandwidth_gb_s": round(bandwidth / 1e9, 2),
        "kernels": torch.backends.cpu.get_cpu_capability(),
        "layer": f"{WIDTH}x{WIDTH}, int4 groups of 32",
        "forms": forms,
        "rounds": rounds,
    }
    print(f"last-level cache {mib(cache) if cache else 'unknown'}, read bandwidth {bandwidth / 1e9:.1f} GB/s")
    if args.save:
        print(write_results(args.save, values))


if __name__ == "__main__":
    main()
