"""OpenMP's idle threads in the app's server: asleep, always (docs/performance.md, "Two modes").

torch's OpenMP runtime (libgomp) keeps an idle thread spinning for about 3 ms after each parallel region so the next
starts at once, but only while it manages no more threads than the machine has CPUs: once another thread of the process
has run a torch operation (a web server's request threads, a background load), the spin drops to 100 iterations and
every region pays a wake-up. A server runs torch on several threads, so it cannot keep the spinning mode; left to the
default it flipped between the two modes with its threads' history (a verify pass cost 1.2 steps in one process and
1.6–1.9 in another). The server therefore asks for the sleeping mode from the start: one mode, and no idle thread
spinning on a core the browser or the compile worker needs. A command-line process (`bench`, `run`, the benchmarks)
runs torch on its main thread only and keeps libgomp's default: on a quiet machine spinning decoded the coder pair's
target 1.38× faster (benchmarks/results/bench_coder_omp_spin.json against ..._passive.json).
"""

from __future__ import annotations

import os

SERVER_POLICY = "PASSIVE"


def sleep_between_regions() -> None:
    """Set OMP_WAIT_POLICY=PASSIVE unless the environment chose a policy; it acts only before torch loads."""
    os.environ.setdefault("OMP_WAIT_POLICY", SERVER_POLICY)
