"""The w4a8 kernel alone, by the rows it multiplies: a k-row pass over one step, for two builds of the kernel side by
side (the tree's source and a git revision's, by default HEAD's), or the tree's alone, on the coder target's real
shapes.

    python benchmarks/w4a8_rows.py [--path avx2] [--against REVISION|none] [--layers 4] [--rows 1,2,3,4,5,8,45]

Each build is loaded as its own op library; both multiply the same random 4-bit weights (`--layers` layers of
Qwen2.5-Coder-1.5B's four matrices, 1536 → 2048, 1536 → 1536, 1536 → 17,920 and 8960 → 1536: 4 layers stream
110 MB, more than any L3 here, as a real step does) by the same bf16 rows. The builds alternate pass by pass (each
first as often as second), each time is the median of `--repeats`, and every output is compared bit for bit between
the builds. It prints ms per pass, ν(k) (a k-row pass over a 1-row one) and GB/s of weights streamed.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.results import write_results  # noqa: E402
from specviz.kernels import build, w4a8  # noqa: E402
from specviz.run.timing_conditions import slice_order  # noqa: E402

SHAPES = ((1536, 2048), (1536, 1536), (1536, 17920), (8960, 1536))  # (in, out): qkv, o, gate+up, down


def ops_of(source: Path, path: str, name: str):
    flags = [f for f in w4a8.flags(path) if not f.startswith("-DLIBNAME=")] + [f"-DLIBNAME={name}"]
    build.load_library(name, source, flags, f"{name} ({path} path)")
    return getattr(torch.ops, name)


def source_at(revision: str) -> Path:
    """The kernel's source as committed at `revision` (git show), in a temporary file."""
    text = subprocess.run(
        ["git", "show", f"{revision}:specviz/kernels/csrc/w4a8.cpp"], capture_output=True, text=True, check=True
    ).stdout
    target = Path(tempfile.mkdtemp()) / "w4a8.cpp"
    target.write_text(text)
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default="avx2", choices=["avx2", "avx512"])
    parser.add_argument(
        "--against", default="HEAD", help="a git revision whose kernel source to compare (default HEAD; none: this tree's alone)"
    )
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rows", default="1,2,3,4,5,8,45")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--save", help="write benchmarks/results/NAME.json")
    args = parser.parse_args()

    builds = {"this tree": ops_of(w4a8.SOURCE, args.path, f"w4a8_rows_new_{args.path}")}
    if args.against != "none":
        builds[args.against] = ops_of(source_at(args.against), args.path, f"w4a8_rows_old_{args.path}")
    torch.manual_seed(0)
    matrices = []
    for _ in range(args.layers):
        for n_in, n_out in SHAPES:
            weight = torch.randn(n_out, n_in) * 0.02
            matrices.append((n_in, w4a8.quantise(weight)))
    packed = {name: [(n_in, ops.w4a8_prepack(*parts)) for n_in, parts in matrices] for name, ops in builds.items()}
    weight_bytes = sum(sum(t.numel() * t.element_size() for t in parts) for _, parts in packed["this tree"])
    print(
        f"{args.path} path, {args.layers} layers, {weight_bytes / 1e6:.0f} MB of packed weights, {torch.get_num_threads()} threads"
    )

    def one_pass(name: str, rows: dict[int, torch.Tensor]) -> list[torch.Tensor]:
        ops = builds[name]
        return [ops.w4a8_linear(rows[n_in], *parts, None) for n_in, parts in packed[name]]

    results = {}
    for k in [int(r) for r in args.rows.split(",")]:
        rows = {n_in: torch.randn(k, n_in, dtype=torch.bfloat16) for n_in, _ in SHAPES}
        outs = {name: one_pass(name, rows) for name in builds}
        first = next(iter(outs.values()))
        same = all(torch.equal(a, b) for out in outs.values() for a, b in zip(first, out))
        times = {name: [] for name in builds}
        for repeat in range(args.repeats):
            for name in slice_order(list(builds), repeat):  # each build first as often as second
                started = time.perf_counter()
                one_pass(name, rows)
                times[name].append(time.perf_counter() - started)
        results[k] = {name: statistics.median(t) * 1e3 for name, t in times.items()} | {"same_bits": same}
    print(f"{'rows':>5} " + " ".join(f"{name + ' ms':>14} {'ν':>6} {'GB/s':>6}" for name in builds) + "  same bits")
    for k, row in results.items():
        cells = []
        for name in builds:
            ms = row[name]
            cells.append(f"{ms:14.2f} {ms / results[1][name]:6.2f} {weight_bytes / ms / 1e6:6.1f}")
        print(f"{k:5d} " + " ".join(cells) + f"  {row['same_bits']}")
    if args.save:
        saved = {  # by rows: this tree's ms, ν and GB/s; the other build's ms; whether every output had the same bits
            str(k): {
                "ms": row["this tree"],
                "nu": row["this tree"] / results[1]["this tree"],
                "gb_s": weight_bytes / row["this tree"] / 1e6,
                "against_ms": row.get(args.against),
                "same_bits": row["same_bits"],
            }
            for k, row in results.items()
        }
        write_results(args.save, {"path": args.path, "against": args.against, "weight_bytes": weight_bytes, "rows": saved})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
