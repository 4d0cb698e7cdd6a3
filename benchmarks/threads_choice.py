"""One torch thread or two on this machine: `bench` in fresh processes, each thread count in turn, on the bundled pair
(γ auto, the page's default prompt, several processes: how far one process reads from the next) and on the coder pair
(γ 3, four coding questions: what one thread costs a target that streams from memory).

    python benchmarks/threads_choice.py [--calls 4]

Writes benchmarks/results/threads_choice.json (benchmarks/results.py). Run it on a quiet machine; it prints its rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.results import write_results  # noqa: E402


def bench(arguments: list[str], threads: int) -> dict:
    command = [sys.executable, "-m", "specviz", "bench", *arguments, "--threads", str(threads), "--repeats", "1"]
    command += ["--no-hf", "--no-dynamic", "--json"]
    result = json.loads(subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    plain = next(row for row in result["rows"] if row["method"] == "autoregressive")
    ours = [row for row in result["rows"] if row["method"].startswith("speculative")]
    chosen = result.get("auto")
    row = ours[0] if chosen is None else next(r for r in ours if r["speedup"] == chosen["measured_speedup"])
    return {
        "plain_tokens_per_s": plain["tokens_per_s"],
        "tokens_per_s": row["tokens_per_s"],
        "speedup": row["speedup"],
        "verify_cost": row.get("verify_cost"),
        "setting": chosen["label"] if chosen else f"γ {row.get('gamma')}",
        "other_load_cores": result.get("other_load_cores"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4, help="bench processes per thread count on the bundled pair")
    args = parser.parse_args()
    from specviz.serving.pair_cache import catalogue
    from specviz.ui.choices import catalogue_lessons

    default = catalogue_lessons(catalogue().default)[0].request
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write(default.prompt)
    bundled = ["--pair", "pycode-distilled", "--prompts", handle.name, "--max-new-tokens", str(default.max_new_tokens)]
    coder = ["--pair", "qwen2.5-coder-0.5b-1.5b", "--prompts", "code-questions:4", "--gamma", "3", "--max-new-tokens", "64"]
    results: dict = {}
    for threads in (2, 1):
        calls = [bench(bundled, threads) for _ in range(args.calls)]
        speedups = [call["speedup"] for call in calls]
        results[f"bundled_{threads}"] = {
            "calls": calls,
            "median_speedup": statistics.median(speedups),
            "spread": (max(speedups) - min(speedups)) / statistics.median(speedups),
        }
        results[f"coder_{threads}"] = bench(coder, threads)
        print(json.dumps({key: value for key, value in results.items() if key.endswith(str(threads))}), flush=True)
    results["coder_one_thread_over_two_plain"] = (
        results["coder_1"]["plain_tokens_per_s"] / results["coder_2"]["plain_tokens_per_s"]
    )
    results["coder_one_thread_over_two_speculative"] = results["coder_1"]["tokens_per_s"] / results["coder_2"]["tokens_per_s"]
    write_results("threads_choice", results)


if __name__ == "__main__":
    main()
