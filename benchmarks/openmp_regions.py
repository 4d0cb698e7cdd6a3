"""What one torch parallel region costs under each OpenMP wait mode, and how a second live thread switches the mode:
the mechanism behind a process's verify pass costing about 1.2 or 1.6–1.9 target steps (issue 51; docs/performance.md).

    python benchmarks/openmp_regions.py --save openmp_regions

Each mode runs in a fresh process (libgomp reads its settings once, as it loads): a loop of small parallel regions
(`torch.add` on 200,000 floats, with a yield to Python between them, as a decode step's kernels have), timed in
batches; the median batch's microseconds per region. `spin` is libgomp's default (an idle thread spins ~3 ms after a
region); `second-team` adds a live thread that ran one torch operation, so libgomp manages more threads than CPUs
and spins 100 iterations only; `passive` sleeps at once (specviz's setting, specviz/__init__.py). A machine's load
average is recorded beside: on a busy machine a spinning thread takes a core the region needs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results import write_results  # noqa: E402

MODES = {  # OMP_WAIT_POLICY ("" is none: libgomp's default), and whether a second live thread ran torch
    "spin": ("", False),
    "spin-second-team": ("", True),
    "passive": ("PASSIVE", False),
    "passive-second-team": ("PASSIVE", True),
}

PROBE = """
import json, statistics, sys, threading, time, torch
second_team, batches, regions = sys.argv[1] == "1", int(sys.argv[2]), int(sys.argv[3])
x, y = torch.randn(200_000), torch.randn(200_000)
if second_team:
    ready = threading.Event()
    def other():
        torch.randn(200_000).add_(1)
        ready.set()
        threading.Event().wait()
    threading.Thread(target=other, daemon=True).start()
    ready.wait()
def batch():
    started = time.perf_counter()
    for _ in range(regions):
        torch.add(x, y, out=x)
        time.sleep(0)
    return (time.perf_counter() - started) / regions * 1e6
batch()
times = [batch() for _ in range(batches)]
print(json.dumps({"us_per_region": statistics.median(times), "batches": times, "threads": torch.get_num_threads()}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--regions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2, help="every mode this many times, interleaved")
    parser.add_argument("--save", help="write benchmarks/results/NAME.json")
    args = parser.parse_args()
    found: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode, (policy, second_team) in MODES.items():
            environment = {**os.environ, "OMP_WAIT_POLICY": policy}
            command = [sys.executable, "-c", PROBE, "1" if second_team else "0", str(args.batches), str(args.regions)]
            done = subprocess.run(command, env=environment, stdout=subprocess.PIPE, text=True, check=True)
            found[mode].append(json.loads(done.stdout.strip().splitlines()[-1])["us_per_region"])
            print(f"{mode:>20}: {found[mode][-1]:8.1f} µs per region", flush=True)
    summary = {mode: sorted(values)[(len(values) - 1) // 2] for mode, values in found.items()}
    values = {"us_per_region": summary, "by_round": found, "load_average": [round(x, 2) for x in os.getloadavg()]}
    print("median of rounds: " + ", ".join(f"{mode} {us:.0f} µs" for mode, us in summary.items()))
    if args.save:
        write_results(args.save, values)
    return 0


if __name__ == "__main__":
    sys.exit(main())
