"""What one torch parallel region costs under each OpenMP wait mode, and how a second live thread switches the mode:
the mechanism behind a process's verify pass costing about 1.2 or 1.6–1.9 target steps (issue 51; docs/performance.md).

    python benchmarks/openmp_regions.py --save openmp_regions

Each mode runs in a fresh process (libgomp reads its settings once, as it loads): a loop of small parallel regions
(`torch.add` on 80,000 floats, 2 threads), timed in batches; the median batch's microseconds per region. `spin` is
libgomp's default on the main thread (an idle thread spins ~3 ms after a region); `second-team` adds a live thread
that ran one torch operation, so libgomp manages more threads than CPUs and spins 100 iterations only;
`second-team-ended` the same thread once it has ended (its team ends with it); `server-timed-thread` is the app's
server (serving/torch_threads.py): a thread that ran torch and ended, then the loop on a long-lived worker thread;
`passive` sleeps at once (`OMP_WAIT_POLICY=PASSIVE`). A machine's load average is recorded beside: on a busy machine
a spinning thread takes a core the region needs.
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

MODES = {  # OMP_WAIT_POLICY (None: unset, libgomp's default), and where the loop runs (PROBE's `where`)
    "spin": (None, "main"),
    "spin-second-team": (None, "second-team"),
    "spin-second-team-ended": (None, "second-team-ended"),
    "server-timed-thread": (None, "timed-thread"),
    "passive": ("PASSIVE", "main"),
    "passive-second-team": ("PASSIVE", "second-team"),
}

PROBE = """
import json, statistics, sys, threading, time, torch
where, batches, regions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
x, y = torch.randn(80_000), torch.randn(80_000)
def one_region():
    torch.randn(80_000).add_(1)
if where == "second-team":  # a live thread that ran torch: its OpenMP team stays
    ready = threading.Event()
    def other():
        one_region()
        ready.set()
        threading.Event().wait()
    threading.Thread(target=other, daemon=True).start()
    ready.wait()
if where in ("second-team-ended", "timed-thread"):  # a thread that ran torch and ended (a load's stage)
    stage = threading.Thread(target=one_region)
    stage.start()
    stage.join()
def batch():
    started = time.perf_counter()
    for _ in range(regions):
        torch.add(x, y, out=x)
    return (time.perf_counter() - started) / regions * 1e6
def measure():
    batch()
    return [batch() for _ in range(batches)]
if where == "timed-thread":  # the server's: a long-lived thread runs every timed loop (serving/torch_threads.py)
    from concurrent.futures import ThreadPoolExecutor
    times = ThreadPoolExecutor(1).submit(measure).result()
else:
    times = measure()
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
        for mode, (policy, where) in MODES.items():
            environment = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
            if policy:
                environment["OMP_WAIT_POLICY"] = policy
            command = [sys.executable, "-c", PROBE, where, str(args.batches), str(args.regions)]
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
