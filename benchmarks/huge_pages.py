"""Transparent huge pages for torch's large tensors, on and off (specviz/__init__.py asks for them by default):
the w4a8 kernel alone, in alternating processes, and the coder pair's load, its peak resident memory.

    python benchmarks/huge_pages.py [--pairs 3] [--path avx512] [--save huge_pages]

Each process runs `benchmarks/w4a8_rows.py --against none` (the kernel on 4 layers of the coder target's shapes,
1 and 3 rows) with THP_MEM_ALLOC_ENABLE=1 or 0, the two settings alternating and each first as often as second;
then one process per setting loads the coder pair and reports its peak resident memory (getrusage) and how much
of it sat on huge pages (/proc/self/smaps_rollup). Printed, and written to benchmarks/results/NAME.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.results import FOLDER, write_results  # noqa: E402

SETTINGS = {"huge_pages": "1", "small_pages": "0"}  # THP_MEM_ALLOC_ENABLE: huge, or 4 KiB
SCRATCH = "huge_pages_scratch"  # w4a8_rows.py's --save, read back and removed
LOAD_CODER_PAIR = """
import re, resource
from specviz.models.catalogue import load_catalogue
from specviz.models.loading import load_pair
catalogue = load_catalogue()
pair = load_pair("qwen2.5-coder-0.5b-1.5b", catalogue.get("qwen2.5-coder-0.5b-1.5b"), catalogue.offline_pairs())
rollup = open("/proc/self/smaps_rollup").read()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, int(re.search(r"AnonHugePages:\\s+(\\d+)", rollup).group(1)) * 1024)
"""


def kernel_times(setting: str, path: str) -> dict:
    """ms of a 1-row and a 3-row pass of the kernel alone, in a fresh process with this setting."""
    environment = {**os.environ, "THP_MEM_ALLOC_ENABLE": SETTINGS[setting]}
    command = [sys.executable, str(ROOT / "benchmarks" / "w4a8_rows.py"), "--path", path, "--against", "none"]
    subprocess.run([*command, "--rows", "1,3", "--save", SCRATCH], env=environment, check=True, capture_output=True)
    scratch = FOLDER / f"{SCRATCH}.json"
    rows = json.loads(scratch.read_text())["results"]["rows"]
    scratch.unlink()
    return {"1": rows["1"]["ms"], "3": rows["3"]["ms"]}


def load_peak(setting: str) -> dict:
    environment = {**os.environ, "THP_MEM_ALLOC_ENABLE": SETTINGS[setting]}
    done = subprocess.run([sys.executable, "-c", LOAD_CODER_PAIR], env=environment, capture_output=True, text=True, check=True)
    peak, huge = (int(value) for value in done.stdout.split()[-2:])
    return {"peak_gb": peak / 1e9, "on_huge_pages_gb": huge / 1e9}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3, help="pairs of kernel processes, one per setting")
    parser.add_argument("--path", default="avx512", choices=["avx2", "avx512"])
    parser.add_argument("--save", default="huge_pages")
    args = parser.parse_args()
    kernel: dict[str, list[dict]] = {setting: [] for setting in SETTINGS}
    for index in range(args.pairs):
        for setting in list(SETTINGS)[:: 1 if index % 2 == 0 else -1]:
            kernel[setting].append(kernel_times(setting, args.path))
            print(f"{setting}: {kernel[setting][-1]}", flush=True)
    medians = {
        setting: {rows: statistics.median(t[rows] for t in times) for rows in ("1", "3")} for setting, times in kernel.items()
    }
    loads = {setting: load_peak(setting) for setting in SETTINGS}
    print(json.dumps({"medians": medians, "loads": loads}, indent=1))
    write_results(
        args.save,
        {
            "path": args.path,
            "kernel_ms": kernel,
            "median_ms": medians,
            "step_speedup": medians["small_pages"]["1"] / medians["huge_pages"]["1"],
            "load": loads,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
