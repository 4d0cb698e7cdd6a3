"""specviz asks for transparent huge pages for torch's large tensors (specviz/__init__.py): a step streams its
weights with fewer TLB misses. The request must reach torch before its first allocation, so it is tested in a fresh
interpreter, the way every entry point starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")
HUGE_AFTER_A_LARGE_TENSOR = """
import re, specviz, torch
weights = torch.ones(64 << 20, dtype=torch.uint8)  # 64 MiB, touched
rollup = open("/proc/self/smaps_rollup").read()
print(int(re.search(r"AnonHugePages:\\s+(\\d+)", rollup).group(1)) * 1024)
"""


def huge_bytes(environment: dict) -> int:
    done = subprocess.run(
        [sys.executable, "-c", HUGE_AFTER_A_LARGE_TENSOR], capture_output=True, text=True, env=environment, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(
    sys.platform != "linux" or not THP_MODE.exists() or "[never]" in THP_MODE.read_text(),
    reason="Linux with transparent huge pages",
)
def test_importing_specviz_puts_torchs_large_tensors_on_huge_pages():
    environment = {key: value for key, value in os.environ.items() if key != "THP_MEM_ALLOC_ENABLE"}
    assert huge_bytes(environment) >= 2 << 20, "specviz did not ask for huge pages before torch's first allocation"
    if "[madvise]" in THP_MODE.read_text():  # under "always" Linux gives them to everyone
        assert huge_bytes({**environment, "THP_MEM_ALLOC_ENABLE": "0"}) == 0, "THP_MEM_ALLOC_ENABLE=0 turns it off"
