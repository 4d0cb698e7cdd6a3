"""The page's measured Run against `bench`, on one prompt, in one process: how far apart they read, and how far each
swings from one measurement to the next (the issue "True on every CPU": three identical page Runs read 0.47×–1.97×).

Both take one path (run/timing_conditions.py): the pair loads and compiles as the CLI does, then `--rounds` times, the
page's measurement (serving/recorder.measure_run, with its wait for quiet) and `bench` (deployment/benchmark.bench,
`--repeats` repeats) time the same prompt and settings. With `--other-load F`, a child process keeps a fraction F of
one core busy meanwhile (in 10 ms slices), as a browser drawing the page or the server's own threads would: on a
machine with as many torch threads as cores, every parallel region then waits for the thread the scheduler took away.

    python benchmarks/page_vs_bench.py --threads 2 --rounds 5 --save page_vs_bench_2_threads
    python benchmarks/page_vs_bench.py --threads 2 --rounds 3 --save page_vs_bench   # issue 51: page ÷ bench, spreads
    python benchmarks/page_vs_bench.py --threads 1 --rounds 5 --save page_vs_bench_1_thread
    python benchmarks/page_vs_bench.py --threads 2 --rounds 5 --other-load 0.3 --save page_vs_bench_2_threads_loaded
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results import write_results  # noqa: E402


def keep_busy(fraction: float, stop) -> None:
    """Burn `fraction` of one core in 10 ms slices until `stop` is set."""
    while not stop.is_set():
        started = time.perf_counter()
        while time.perf_counter() - started < 0.01 * fraction:
            pass
        time.sleep(0.01 * (1 - fraction))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="pycode-distilled")
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--rounds", type=int, default=5, help="page measurements and bench calls, alternating")
    parser.add_argument("--repeats", type=int, default=3, help="bench's repeats per call")
    parser.add_argument("--other-load", type=float, default=0.0, help="a fraction of one core kept busy meanwhile")
    parser.add_argument("--save", help="write benchmarks/results/NAME.json")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from specviz.analysis.readings import STEADY_WITHIN, readings_of_trace, spread_of
    from specviz.cli.options import compile_before_timing
    from specviz.deployment.benchmark import bench
    from specviz.engine import DecodeSettings
    from specviz.models.catalogue import load_catalogue
    from specviz.models.loading import load_pair
    from specviz.prompts.sets import PROMPTS
    from specviz.serving import recorder

    catalogue = load_catalogue()
    pair = load_pair(args.pair, catalogue.get(args.pair), catalogue.offline_pairs(), progress=print)
    compile_before_timing(pair)
    prompt, settings = PROMPTS["code"][0], DecodeSettings(max_new_tokens=args.max_new_tokens, gamma=args.gamma)

    stop = multiprocessing.Event()
    burner = multiprocessing.Process(target=keep_busy, args=(args.other_load, stop), daemon=True)
    if args.other_load > 0:
        burner.start()
    page_speedups, bench_speedups, other_cores, engines, page_round_spreads = [], [], [], set(), []
    try:
        for round_number in range(args.rounds):
            trace = recorder.measure_run(pair, prompt, settings, "model", settle_s=recorder.SETTLE_S)
            benched = bench(pair, [prompt], settings, [args.gamma], "model", args.repeats, False, False)
            row = next(row for row in benched["rows"] if row["method"] == "speculative")
            page_speedups.append(readings_of_trace(trace).measured_speedup)
            page_round_spreads.append(readings_of_trace(trace).speedup_spread.to_json())
            bench_speedups.append(row["speedup"])
            other_cores.append(trace.other_load.other_cores if trace.other_load else None)
            engines |= {(trace.started.engine, trace.started.threads), (row["engine"], row["threads"])}
            print(
                f"round {round_number + 1}: page {page_speedups[-1]:.2f}× (rounds {', '.join(f'{s:.2f}' for s in trace.round_speedups)}), "
                f"bench {bench_speedups[-1]:.2f}×, other programs "
                + (f"{other_cores[-1]:.2f} cores" if other_cores[-1] is not None else "not measured")
            )
    finally:
        stop.set()
        if burner.is_alive():
            burner.join(2)
    ratios = [page / benched for page, benched in zip(page_speedups, bench_speedups)]
    page, benched, over = spread_of(page_speedups), spread_of(bench_speedups), spread_of(ratios)
    values = {
        "pair": args.pair,
        "gamma": args.gamma,
        "max_new_tokens": args.max_new_tokens,
        "threads": args.threads,
        "other_load": args.other_load,
        "engines": sorted(f"{engine} × {threads} threads" for engine, threads in engines),
        "page_speedups": page_speedups,
        "bench_speedups": bench_speedups,
        "page_over_bench": ratios,
        "page_spread": max(page_speedups) / min(page_speedups),
        "bench_spread": max(bench_speedups) / min(bench_speedups),
        "median_page_over_bench": over.median,
        "page": page.to_json(),  # the median page Run ± the farthest from it (analysis/readings.Spread)
        "bench": benched.to_json(),
        "page_within_goal": page.relative is not None and page.relative <= STEADY_WITHIN,  # issue 51: ≤ 10 %
        "page_over_bench_within_goal": 0.90 <= over.median <= 1.10,  # issue 51: 0.90–1.10
        "page_round_spreads": page_round_spreads,
        "other_cores": other_cores,
    }
    print(
        f"page {page.text()} (farthest Run {100 * (page.relative or 0):.1f} % from the median; goal ≤ 10 %), bench "
        f"{benched.text()}, median page ÷ bench {over.median:.2f} (goal 0.90–1.10) ({', '.join(values['engines'])})"
    )
    if args.save:
        print(f"wrote {write_results(args.save, values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
