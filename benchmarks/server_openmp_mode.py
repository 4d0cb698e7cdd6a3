"""Which OpenMP mode the server's Runs are timed in (issue 51; serving/torch_threads.py): the server's own code paths
in one process, and a parallel region's cost read where the Runs ran.

    python benchmarks/server_openmp_mode.py --save server_openmp_mode

The default pair loads through the pair cache (its stages on threads that end), two Runs are measured from two
request-like threads that stay alive afterwards (as a web server's worker threads do), then a loop of small parallel
regions (`torch.add` on 80,000 floats) is timed on the server's timed thread, where the Runs were timed, and on one of
the request threads: the first stays in libgomp's spinning mode (a few µs a region), the second, a second team while
the timed one lives, pays a wake-up per region.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results import write_results  # noqa: E402


def region_us(regions: int = 1000, batches: int = 5) -> float:
    """The median batch's microseconds per small parallel region, on the calling thread."""
    import torch

    x, y = torch.randn(80_000), torch.randn(80_000)

    def batch() -> float:
        started = time.perf_counter()
        for _ in range(regions):
            torch.add(x, y, out=x)
        return (time.perf_counter() - started) / regions * 1e6

    batch()
    return statistics.median(batch() for _ in range(batches))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", help="write benchmarks/results/NAME.json")
    args = parser.parse_args()
    from specviz.engine.settings import DecodeSettings
    from specviz.serving import pair_cache, recorder, torch_threads

    name = pair_cache.catalogue().default
    pair = pair_cache.get_pair(name)
    traces, release = [], threading.Event()

    def request_thread() -> None:  # measures a Run, then stays alive, as a web server's worker thread does
        traces.append(recorder.measure_run(pair, "def fibonacci(n):", DecodeSettings(max_new_tokens=32, gamma=4)))
        release.wait()

    threads = [threading.Thread(target=request_thread) for _ in range(2)]
    for thread in threads:
        thread.start()
        while len(traces) < threads.index(thread) + 1:
            time.sleep(0.05)
    found = {"timed_thread_us_per_region": torch_threads.timed(region_us)}
    on_request_thread: list[float] = []
    keep_team = threading.Event()

    def request_with_team() -> None:  # a request thread that runs torch itself, and stays alive
        on_request_thread.append(region_us())
        keep_team.wait()

    probe = threading.Thread(target=request_with_team)
    probe.start()
    while not on_request_thread:
        time.sleep(0.05)
    found["request_thread_us_per_region"] = on_request_thread[0]
    found["timed_thread_us_per_region_beside_a_second_team"] = torch_threads.timed(region_us)
    keep_team.set()
    probe.join()
    found["timed_thread_us_per_region_once_it_ended"] = torch_threads.timed(region_us)
    release.set()
    for thread in threads:
        thread.join()
    found["run_speedups"] = [round(trace_speedup(trace), 4) for trace in traces]
    found["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY", "")
    for key, value in found.items():
        print(f"{key}: {value}")
    if args.save:
        write_results(args.save, found)
    return 0


def trace_speedup(trace) -> float:
    from specviz.analysis.readings import readings_of_trace

    return readings_of_trace(trace).measured_speedup


if __name__ == "__main__":
    sys.exit(main())
