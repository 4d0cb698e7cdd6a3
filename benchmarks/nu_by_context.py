"""ν(k), a target pass over k rows in target steps, after more and more cached tokens: how the context moves it.

    python benchmarks/nu_by_context.py [--pair pycode-distilled] [--contexts 64,128,256] [--threads 2]

On the fast path, compiled, as `gamma: auto` times it (analysis/timing.measure_pass_seconds, the fastest of 10
rounds). Writes benchmarks/results/nu_by_context.json (benchmarks/results.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.results import write_results  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="pycode-distilled")
    parser.add_argument("--contexts", default="64,128,256")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from specviz.analysis.timing import measure_pass_seconds
    from specviz.cli.options import compile_before_timing
    from specviz.models.catalogue import load_catalogue
    from specviz.models.loading import load_pair

    catalogue = load_catalogue()
    pair = load_pair(args.pair, catalogue.get(args.pair), catalogue.offline_pairs())
    compile_before_timing(pair)
    by_context = {}
    for context in (int(text) for text in args.contexts.split(",")):
        seconds = measure_pass_seconds(pair.target.model, pair.shared_vocab_size, args.rows, context=context, repeats=10)
        by_context[str(context)] = {
            "step_ms": 1000 * seconds[1],
            "verify_cost": {str(rows): seconds[rows] / seconds[1] for rows in seconds},
        }
        costs = " ".join(f"{rows}:{seconds[rows] / seconds[1]:.2f}" for rows in seconds)
        print(f"after {context} tokens: step {1000 * seconds[1]:.2f} ms, ν {costs}", flush=True)
    write_results("nu_by_context", {"pair": args.pair, "threads": args.threads, "contexts": by_context})


if __name__ == "__main__":
    main()
