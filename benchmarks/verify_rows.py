"""Why a verify pass can cost several target steps on a CPU: the matrix products, timed by the rows they multiply.

    python benchmarks/verify_rows.py [--pair smollm2-135m-distilled] [--threads 2] [--forms bf16,int8,int4,fp32]

A verify pass multiplies each weight matrix by γ + 1 rows (one per token) where a plain step multiplies it
by one. On hardware with a real matrix kernel for the dtype, a few more rows cost little more than one, because
reading the weights dominates: that is the paper's assumption ν ≈ 1. Where the CPU lacks one (torch's bf16 on a
processor without AVX-512 bf16 or AMX computes row by row), k rows cost about k times one row, and so does the
verify pass. This prints the CPU's capability as torch sees it, then, for each weight form of the target
(specviz/models/weight_forms.py: bf16, int8 and int4 weight-only, fp32), a whole forward's time for k rows over one
row, and the largest logit difference between a token fed alone and inside a 5-row pass (0: rows are independent,
so speculation is exact in that form). --matrices adds the single matrix products in bf16 and fp32.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, DynamicCache  # noqa: E402

from specviz.models.loading import load_pair  # noqa: E402
from specviz.models.weight_forms import FORMS, apply_form, weight_bytes  # noqa: E402
from specviz.serving.pair_cache import catalogue  # noqa: E402

ROWS = (1, 2, 3, 4, 5, 6, 7, 8)


def median_s(call, repeats: int) -> float:
    for _ in range(3):
        call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


@torch.inference_mode()
def matrix_rows(shapes: dict[str, tuple[int, int]], dtype: torch.dtype) -> list[str]:
    """For each weight shape (in, out): the time of k rows over one row."""
    lines = []
    for name, (n_in, n_out) in shapes.items():
        weight = torch.randn(n_out, n_in, dtype=dtype)
        one = None
        cells = []
        for rows in ROWS:
            x = torch.randn(rows, n_in, dtype=dtype)
            seconds = median_s(lambda x=x, weight=weight: torch.nn.functional.linear(x, weight), 20 if n_out > 8192 else 100)
            one = one or seconds
            cells.append(f"{seconds / one:5.2f}")
        lines.append(f"  {name:28s} {one * 1e6:8.0f} µs  " + "  ".join(cells))
    return lines


@torch.inference_mode()
def forward_rows(model, context: int = 40, repeats: int = 20) -> tuple[float, list[float]]:
    """A whole target forward over k new tokens after a `context`-token prefix: (one-row seconds, k-row / one-row)."""
    cache = DynamicCache(config=model.config)
    model(input_ids=torch.arange(100, 100 + context).view(1, -1), cache=cache, use_cache=True, logits_to_keep=1)

    def forward(rows: int) -> None:
        model(input_ids=torch.arange(5, 5 + rows).view(1, -1), cache=cache, use_cache=True, logits_to_keep=rows)
        cache.crop(-rows)

    one = median_s(lambda: forward(1), repeats)
    return one, [median_s(lambda rows=rows: forward(rows), repeats) / one for rows in ROWS]


@torch.inference_mode()
def row_independence(model, context: int = 40, rows: int = 5) -> float:
    """Largest |Δ logit| between each of `rows` tokens fed alone (after the ones before it) and inside one pass."""
    prefix = torch.arange(100, 100 + context).view(1, -1)
    tokens = torch.arange(7, 7 + rows).view(1, -1)
    cache = DynamicCache(config=model.config)
    model(input_ids=prefix, cache=cache, use_cache=True, logits_to_keep=1)
    together = model(input_ids=tokens, cache=cache, use_cache=True, logits_to_keep=rows).logits[0].float()
    cache.crop(-rows)
    alone = []
    for index in range(rows):
        alone.append(model(input_ids=tokens[:, index : index + 1], cache=cache, use_cache=True, logits_to_keep=1).logits[0, -1])
    return (together - torch.stack(alone).float()).abs().max().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="smollm2-135m-distilled")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--forms", default=",".join(FORMS), help=f"weight forms to time (of {', '.join(FORMS)})")
    parser.add_argument("--matrices", action="store_true", help="also time the target's single matrix products (bf16, fp32)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair(args.pair, catalogue().get(args.pair), catalogue().offline_pairs())
    config = pair.target.model.config
    print(f"CPU capability as torch sees it: {torch.backends.cpu.get_cpu_capability()}, {args.threads} threads")
    print(
        f"ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', '(unset)')}, ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', '(unset)')}"
    )
    if args.matrices:
        shapes = {
            "attention q/o (h → h)": (config.hidden_size, config.hidden_size),
            "MLP up/gate (h → ffn)": (config.hidden_size, config.intermediate_size),
            "MLP down (ffn → h)": (config.intermediate_size, config.hidden_size),
            "LM head (h → vocabulary)": (config.hidden_size, config.vocab_size),
        }
        for dtype in (torch.float32, torch.bfloat16):
            print(f"{str(dtype).replace('torch.', '')} matrix products, time of k rows / 1 row, k = {', '.join(map(str, ROWS))}:")
            print("\n".join(matrix_rows(shapes, dtype)))
    print(
        f"\nwhole target forward after a 40-token prefix: ν(k) = time of k rows / time of 1 row, k = {', '.join(map(str, ROWS))}"
    )
    print(f"{'form':6s} {'1 row':>9s}  " + "  ".join(f"{k:>5d}" for k in ROWS) + "   max |Δlogit| alone vs 5 rows   weights")
    for form in args.forms.split(","):
        model = AutoModelForCausalLM.from_pretrained(pair.target.reference, dtype=torch.bfloat16).eval()
        apply_form(model, form)
        one, ratios = forward_rows(model)
        gap = row_independence(model)
        print(
            f"{form:6s} {one * 1e3:7.1f} ms  "
            + "  ".join(f"{r:5.2f}" for r in ratios)
            + f"   {gap:.3g}".ljust(33)
            + f"{weight_bytes(model) / 2**20:.0f} MiB",
            flush=True,
        )


if __name__ == "__main__":
    main()
