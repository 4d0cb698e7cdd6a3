"""The bundled pair in plain float32 (torch's linear: MKL) against `fp32rows` (specviz's float32 kernel: the same
weights, each output one fixed chain of products), `bench` in fresh processes that alternate form by form.

    python benchmarks/fp32rows_step.py --rounds 2 --save fp32rows_step

Each process runs `python -m specviz bench --pair pycode-distilled --weights FORM --json` with γ auto, on the pair's
code prompts; this prints the target alone's tokens/s, the speculative row's tokens/s, speedup and its spread over the
repeats, ν and τ, the engine, and whether the output
equalled the target alone's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results import write_results  # noqa: E402

FORMS = ("fp32", "fp32rows")


def bench(form: str, repeats: int) -> dict:
    command = [sys.executable, "-m", "specviz", "bench", "--pair", "pycode-distilled", "--weights", form, "--prompts", "code"]
    command += ["--max-new-tokens", "64", "--repeats", str(repeats), "--no-hf", "--no-dynamic", "--json"]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)  # its stderr: the terminal's
    found = json.loads(done.stdout.strip().splitlines()[-1])
    plain = next(row for row in found["rows"] if row["method"] == "autoregressive")
    ours = next(row for row in found["rows"] if row["method"].startswith("speculative"))
    return {
        "plain_tokens_per_s": plain["tokens_per_s"],
        "tokens_per_s": ours["tokens_per_s"],
        "speedup": ours["speedup"],
        "speedup_spread": ours.get("speedup_spread"),
        "verify_cost": ours.get("verify_cost"),
        "tau": ours.get("tau"),
        "setting": f"tree {ours['tree']}" if ours.get("tree") else f"γ {ours['gamma']}",
        "same_as_target": ours.get("same_as_target"),
        "engine": found.get("engine"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--save", help="write benchmarks/results/NAME.json")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {form: [] for form in FORMS}
    for index in range(args.rounds):
        for form in FORMS if index % 2 == 0 else reversed(FORMS):
            runs[form].append(bench(form, args.repeats))
            run = runs[form][-1]
            print(
                f"{form}: target alone {run['plain_tokens_per_s']:.1f} tokens/s; {run['setting']} {run['tokens_per_s']:.1f} "
                f"tokens/s, {run['speedup']:.2f}× ± {run['speedup_spread'] or 0:.2f} (ν {run['verify_cost']:.2f}, "
                f"τ {run['tau']:.3f}), same as the target alone: {run['same_as_target']}",
                flush=True,
            )
    summary = {
        form: {key: statistics.median(run[key] for run in found) for key in ("plain_tokens_per_s", "tokens_per_s", "speedup")}
        for form, found in runs.items()
    }
    faster = summary["fp32rows"]["plain_tokens_per_s"] / summary["fp32"]["plain_tokens_per_s"]
    print(f"the target alone: fp32rows {faster:.2f}× plain float32's tokens/s (medians of {args.rounds} processes each)")
    if args.save:
        write_results(
            args.save, {"rounds": args.rounds, "repeats": args.repeats, "runs": runs, "median": summary, "plain_ratio": faster}
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
