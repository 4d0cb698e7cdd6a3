"""`bench` on the page's prompt under libgomp's default wait policy and under `OMP_WAIT_POLICY=PASSIVE`, in fresh
processes that alternate (issue 51: which OpenMP mode the server should time in; docs/performance.md "Two modes").

    python benchmarks/wait_policy.py --rounds 2 --save wait_policy

Each round runs `python -m specviz bench` on the default pair and the page's default prompt and settings (γ 4, 64 new
tokens, `--repeats` repeats) once per policy; every process's speedup, its repeats' speedups, ν and both rates.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results import write_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
POLICIES = {"spin": None, "passive": "PASSIVE"}  # None: libgomp's default (no OMP_WAIT_POLICY)


def bench_once(prompt_file: str, policy: str | None, repeats: int) -> dict:
    environment = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    if policy:
        environment["OMP_WAIT_POLICY"] = policy
    command = [sys.executable, "-m", "specviz", "bench", "--prompts", prompt_file, "--gamma", "4"]
    command += ["--max-new-tokens", "64", "--repeats", str(repeats), "--no-hf", "--json"]
    done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, check=True)
    rows = {row["method"]: row for row in json.loads(done.stdout)["rows"]}
    speculative, plain = rows["speculative"], rows["autoregressive"]
    return {
        "speedup": speculative["speedup"],
        "speedup_by_repeat": speculative.get("speedup_by_repeat"),
        "verify_cost": speculative.get("verify_cost"),
        "tokens_per_s": speculative["tokens_per_s"],
        "baseline_tokens_per_s": plain["tokens_per_s"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--save", help="write benchmarks/results/NAME.json")
    args = parser.parse_args()
    from specviz.ui.lessons import CODE_PROMPT  # the page's default prompt

    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write(CODE_PROMPT)
    found: dict[str, list[dict]] = {name: [] for name in POLICIES}
    for _ in range(args.rounds):
        for name, policy in POLICIES.items():
            found[name].append(bench_once(handle.name, policy, args.repeats))
            row = found[name][-1]
            print(
                f"{name:>8}: {row['speedup']:.2f}× (repeats {', '.join(f'{s:.2f}' for s in row['speedup_by_repeat'] or [])}), "
                f"ν {row['verify_cost']:.2f}, {row['tokens_per_s']:.0f} against {row['baseline_tokens_per_s']:.0f} tokens/s",
                flush=True,
            )
    summary = {
        name: {
            "median_speedup": statistics.median(row["speedup"] for row in rows),
            "median_baseline_tokens_per_s": statistics.median(row["baseline_tokens_per_s"] for row in rows),
            "median_tokens_per_s": statistics.median(row["tokens_per_s"] for row in rows),
        }
        for name, rows in found.items()
    }
    if args.save:
        write_results(args.save, {"summary": summary, "processes": found, "load_average": list(os.getloadavg())})
    return 0


if __name__ == "__main__":
    sys.exit(main())
