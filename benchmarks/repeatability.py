"""Do separate `bench` processes agree? N fresh processes per pair on the same prompts (issue 51's goal: each process's
speedup within 10 % of their median), γ auto's prediction beside what each process measured.

    python benchmarks/repeatability.py --processes 5 --save repeatability

Each pair runs `python -m specviz bench --pair NAME --processes N --json` (specviz/cli/bench.py: fresh processes one
after another, each timing its methods request by request in alternating order, `--repeats` times); this prints every
process's speedup, the median, the spread (the farthest process from the median, analysis/readings.Spread) and whether
every process lies within 10 % of the median. Pairs that are not installed here (`python -m specviz fetch --pair NAME`)
are skipped with a line saying so.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results import write_results  # noqa: E402
from specviz.analysis.readings import STEADY_WITHIN, spread_of  # noqa: E402

PAIRS = {  # pair → its prompts (the pair's domain) and new tokens: a few minutes per pair for five processes
    "pycode-distilled": ("code", 64),
    "smollm2-135m-distilled": ("chat-heldout:4", 64),
    "qwen2.5-coder-0.5b-1.5b": ("code-questions:3", 48),
}


def bench_processes(pair: str, prompts: str, tokens: int, processes: int, repeats: int, threads: int | None) -> dict | str:
    """One pair's merged `bench --processes` result, or why it could not run."""
    command = [sys.executable, "-m", "specviz", "bench", "--pair", pair, "--prompts", prompts, "--max-new-tokens", str(tokens)]
    command += ["--repeats", str(repeats), "--no-hf", "--no-dynamic", "--processes", str(processes), "--json"]
    command += ["--threads", str(threads)] if threads else []
    print(f"$ python {shlex.join(command[1:])}", flush=True)
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)  # its stderr: the terminal's
    if done.returncode != 0:
        return f"exit {done.returncode}: its last lines on stderr, above, say why"
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"command": shlex.join(command[1:])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=",".join(PAIRS), help="a comma list of pairs")
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="each process's repeats")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's, one per core)")
    parser.add_argument("--save", help="write benchmarks/results/NAME.json")
    args = parser.parse_args()

    values: dict = {"processes": args.processes, "repeats": args.repeats, "pairs": {}}
    for pair in args.pairs.split(","):
        prompts, tokens = PAIRS.get(pair, ("code", 64))
        merged = bench_processes(pair, prompts, tokens, args.processes, args.repeats, args.threads)
        if isinstance(merged, str):
            print(f"{pair}: skipped ({merged})")
            values["pairs"][pair] = {"skipped": merged}
            continue
        auto = merged.get("auto") or {}
        rows = [row for row in merged["rows"] if row["method"] != "autoregressive"]
        summary = {"command": merged["command"], "engine": merged.get("engine"), "threads": merged.get("threads"), "rows": []}
        read_rates = merged.get("memory_read_gb_s_by_process") or []  # each process's, before each repeat and after
        summary["memory_read_gb_s_by_process"] = read_rates
        print(
            f"{pair} memory read rate around each process's repeats: "
            + "; ".join(", ".join(f"{rate:.0f}" for rate in rates or ()) + " GB/s" for rates in read_rates)
        )
        for row in rows:
            processes = spread_of(row["speedup_by_process"])
            label = f"tree {row['tree']}" if row.get("tree") else f"γ {row['gamma']}"
            within = processes.relative is not None and processes.relative <= STEADY_WITHIN
            print(
                f"{pair} {row['method']} {label}: processes {', '.join(f'{v:.2f}' for v in processes.values)} → "
                f"{processes.text()} (farthest {100 * (processes.relative or 0):.1f} % from the median: "
                f"{'within' if within else 'NOT within'} {100 * STEADY_WITHIN:.0f} %)"
            )
            summary["rows"].append(
                {
                    "method": row["method"],
                    "label": label,
                    "speedup_by_process": processes.values,
                    "median": processes.median,
                    "spread": processes.spread,
                    "relative_spread": processes.relative,
                    "within_goal": within,
                    "verify_cost": row.get("verify_cost"),
                    "decode_speedup_by_process": row.get("decode_speedup_by_process", []),
                }
            )
        if auto:  # γ auto predicts the speedup while decoding (its calibration leaves the prefill out): compared so
            predicted, measured = auto.get("predicted_speedup"), auto.get("measured_decode_speedup")
            ratio = measured / predicted if predicted and measured else None
            summary["auto"] = {
                "chosen": auto.get("label") or auto.get("chosen"),
                "predicted": predicted,
                "measured_decoding": measured,
                "measured_with_prefill": auto.get("measured_speedup"),
                "measured_over_predicted": ratio,
                "within_goal": ratio is not None and abs(ratio - 1) <= STEADY_WITHIN,
                "chosen_read_gb_s": auto.get("read_gb_s"),  # the memory read rate the choice was measured at
            }
            if ratio is not None:
                print(
                    f"{pair} γ auto chose {summary['auto']['chosen']}: predicted {predicted:.2f}× while decoding, measured "
                    f"{measured:.2f}× ({ratio:.2f}); {auto.get('measured_speedup') or 0:.2f}× with the prompt's prefill"
                    + (f"; chosen while memory read {auto['read_gb_s']:.0f} GB/s" if auto.get("read_gb_s") else "")
                )
        values["pairs"][pair] = summary
    values["in_order"] = [{"pair": name, **summary} for name, summary in values["pairs"].items()]  # keys without dots
    if args.save:
        write_results(args.save, values)
    return 0


if __name__ == "__main__":
    sys.exit(main())
