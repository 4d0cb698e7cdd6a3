"""specviz: speculative decoding, run for real.

One measurement condition is set here, before torch (and with it OpenMP's runtime) loads: OpenMP's idle threads
sleep instead of spinning (`OMP_WAIT_POLICY=PASSIVE`, unless the environment says otherwise). torch's OpenMP runtime
(libgomp) otherwise spins an idle thread for about 3 ms after each parallel region, but only while it manages no more
threads than there are CPUs: one other thread of the process that ever ran a torch operation and is still alive (a
web server's worker threads, a loader) cuts the spin to 100 iterations. So the same compiled step ran in one of two
modes per process, set by its threads' history: a verify pass of several rows cost about 1.2 target steps in one
process and 1.6–1.9 in another, and a spinning thread on a busy 2-core machine stalled every parallel region.
docs/performance.md ("Two modes") has the measurement.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
