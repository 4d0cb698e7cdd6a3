"""specviz: speculative decoding, run for real."""

import os

# torch's large tensors (the packed weights, the KV caches) on transparent huge pages, where Linux gives them only to
# a program that asks (transparent_hugepage=madvise). Fewer TLB misses while a step streams its weights: on a 2-core
# Zen 4 the coder pair's target step ran 9 % faster in alternating slices (benchmarks/results/two_modes_huge_pages.json)
# and its load peaked lower, 3.2 against 3.8 GB (benchmarks/results/huge_pages.json). torch reads this at its first
# allocation, so it is set before torch loads; THP_MEM_ALLOC_ENABLE=0 turns it off.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
