"""Results files: what a benchmark measured, with the command, the machine and the date, in benchmarks/results/.

Every measured number the README and docs/ quote comes from such a file (or from a report the project already
writes, such as a head's distill_report.json), and tests/test_doc_numbers.py checks each quoted number against it.
A benchmark script calls `write_results(name, values)`; a command that prints JSON (`python -m specviz bench --json`)
is saved by this script itself:

    python benchmarks/results.py NAME -- python -m specviz bench ... --json

which runs the command, reads the JSON it printed and writes benchmarks/results/NAME.json.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "benchmarks" / "results"
ENVIRONMENT = (
    "SPECVIZ_COMPILE",
    "SPECVIZ_KERNEL_ISA",
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "OMP_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "THP_MEM_ALLOC_ENABLE",  # specviz sets it (specviz/__init__.py): torch's large tensors on huge pages
    "SPECVIZ_CACHE",
)


def machine(in_this_process: bool = True) -> dict:
    """The machine a number was measured on: CPU model, its widest vector set (AVX2 / AVX-512 / AMX) and last-level
    cache, the memory read bandwidth (measured once a process), the kernels torch and specviz's w4a8 kernel run,
    cores, versions; torch's thread count only where the measurement ran in this process."""
    import torch

    from specviz.analysis.cache_fit import read_bandwidth_gb_s
    from specviz.kernels import cpu, w4a8

    model = next((line.split(":", 1)[1].strip() for line in _cpuinfo().splitlines() if line.startswith("model name")), None)
    return {
        "cpu": model or platform.processor() or platform.machine(),
        "isa": cpu.isa(),  # AVX2, AVX-512 or AMX: what the CPU has, whatever is forced
        "last_level_cache_mib": (cpu.last_level_cache_bytes() or 0) / 2**20 or None,
        "read_bandwidth_gb_s": round(read_bandwidth_gb_s(), 1),
        "w4a8_path": w4a8.describe(),  # the path specviz's kernel takes here, and why
        "kernels": torch.backends.cpu.get_cpu_capability(),  # AVX512 or AVX2 (ATEN_CPU_CAPABILITY can lower it)
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads() if in_this_process else None,
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "environment": {name: os.environ[name] for name in ENVIRONMENT if name in os.environ},
    }


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


SIGNIFICANT_DIGITS = 7  # a timing's noise is in its second or third digit; every quoted number keeps its rounding


def significant(value):
    """`value` with every float rounded to SIGNIFICANT_DIGITS significant digits (float repr writes 17)."""
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    if isinstance(value, dict):
        return {key: significant(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [significant(item) for item in value]
    return value


def write_results(name: str, values: dict, command: str | None = None) -> Path:
    """Write benchmarks/results/NAME.json: the command that measured `values`, the machine, the date, the values.
    `command` names another process that measured them (benchmarks/results.py NAME -- COMMAND); default: this one."""
    record = {
        "command": command or shlex.join(["python", *sys.argv]),
        "machine": machine(in_this_process=command is None),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": values,
    }
    FOLDER.mkdir(parents=True, exist_ok=True)
    path = FOLDER / f"{name}.json"
    # compact: a Space clones every tracked file, and the tracked tree stays under 60 MiB (tests/test_stored.py)
    path.write_text(json.dumps(significant(record), ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)
    return path


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: python benchmarks/results.py NAME -- COMMAND ... (a command that prints JSON)")
    name, command = argv[0], argv[2:]
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"{shlex.join(command)} exited with {done.returncode}; nothing written")
    write_results(name, printed_json(done.stdout), command=shlex.join(command))


def printed_json(output: str):
    """The JSON document a command printed, after any lines of text before it (the first line that starts one)."""
    for start in [0] + [i + 1 for i, c in enumerate(output) if c == "\n"]:
        if output.startswith(("{", "["), start):
            try:
                return json.JSONDecoder().raw_decode(output, start)[0]
            except json.JSONDecodeError:
                continue
    sys.exit("the command printed no JSON; nothing written")


if __name__ == "__main__":
    main(sys.argv[1:])
