"""The app's first start, as a new user gets it, timed: `python app.py` from an empty cache, then a warm restart.

    python benchmarks/first_start.py [--runs 3] [--save NAME] [--out ANOTHER.json]

Measures, in Chromium, with everything as it ships (compiling on, the real pair loading in the background) and only
the real model's downloaded files linked into the new cache:
- seconds from the page first serving to the default Run done (eager while a worker process compiles),
- seconds until the compiled step is loaded, then `--runs` identical runs at real pace: their speedups and spread,
- the same prompt and settings through `python -m specviz bench` on the warm cache, the app stopped (`--bench-calls`
  processes, their median; γ auto where the page drafted it, so both read the same kept choice): the app's ÷ bench's,
- a restart on the warm cache: seconds from `python app.py` to "Ready" on the page, and the engine of its first run,
- the lines of the server's logs with a traceback or "failed".
Printed as JSON and written to benchmarks/results/first_start.json, or NAME.json with `--save` (benchmarks/results.py:
with the command, machine and date; also to `--out`); never asserted: tests/test_first_start.py holds the behaviour.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.browser import (  # noqa: E402
    CHROMIUM,
    FLAGS,
    free_port,
    open_ready_page,
    press_run,
    problems_in,
    shipped_environment,
    start_app,
    stop_app,
    wait_for_compiled_step,
)
from benchmarks.results import write_results  # noqa: E402

KEPT = (
    "speedup",
    "engine",
    "threads",
    "auto",
    "alpha",
    "verifyCost",
    "nuMoved",
    "rowsExact",
    "tokensPerS",
    "baselineTokensPerS",
    "otherLoad",
    "readGbS",  # the memory read rate before and after the Run's rounds, "35.2/36.0" (the machine's state)
)


def kept(done: dict) -> dict:
    """The numbers bar's values, numbers as numbers (the page writes every data-* attribute as text)."""
    return {key: as_number(done.get(key)) for key in KEPT}


def as_number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def bench_speedup(env: dict, prompt: str, gamma: int | None, max_new_tokens: int, repeats: int) -> dict:
    """`bench`'s row for the app's default request (its own process; the cache is warm by now). `gamma` None: the
    page drafted γ auto, so bench does too, and reads the same kept choice from the same cache."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write(prompt)
    command = [sys.executable, "-m", "specviz", "bench", "--prompts", handle.name]
    command += [] if gamma is None else ["--gamma", str(gamma)]
    command += ["--max-new-tokens", str(max_new_tokens), "--repeats", str(repeats), "--no-hf", "--no-dynamic", "--json"]
    output = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout
    result = json.loads(output)
    auto = result.get("auto")
    if auto is not None:
        return {
            "speedup": auto["measured_speedup"],
            "auto": auto.get("label"),
            "engine": result.get("engine"),
            "threads": result.get("threads"),
            "other_load_cores": result.get("other_load_cores"),
        }
    row = next(row for row in result["rows"] if row["method"] == "speculative")
    return {
        "speedup": row["speedup"],
        "engine": row.get("engine"),
        "threads": result.get("threads"),
        "other_load_cores": result.get("other_load_cores"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bench-repeats", type=int, default=3)
    parser.add_argument("--bench-calls", type=int, default=3, help="bench processes, each --bench-repeats repeats: their median")
    parser.add_argument("--out", type=Path, help="also write the JSON here (it always goes to benchmarks/results/)")
    parser.add_argument("--save", default="first_start", help="benchmarks/results/NAME.json to write")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    from specviz.serving.pair_cache import catalogue
    from specviz.ui.choices import catalogue_lessons

    default = catalogue_lessons(catalogue().default)[0].request  # what the page opens on
    scratch = Path(tempfile.mkdtemp(prefix="specviz-first-start-"))
    (scratch / "cache").mkdir()
    env = shipped_environment(scratch / "cache")
    logs = [scratch / "first.log", scratch / "restart.log"]
    report: dict = {"measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(sys.argv)}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        port = free_port()
        launched = time.perf_counter()
        process, report["first_serving_s"] = start_app(port, log=logs[0], env=env)
        served = launched + report["first_serving_s"]
        try:
            page = open_ready_page(browser, port)
            report["first_run"] = kept(press_run(page, default.playback))
            reason = page.locator(".sv-slower")  # a slowdown's one sentence (ui/lessons.slower_reason), where one shows
            report["first_run_slower_reason"] = reason.first.inner_text() if reason.count() else None
            report["first_run_done_after_serving_s"] = time.perf_counter() - served
            wait_for_compiled_step(browser, port)
            report["compiled_loaded_after_serving_s"] = time.perf_counter() - served
            runs = [kept(press_run(page)) for _ in range(args.runs)]
            report["compiled_runs"] = runs
            speedups = [float(run["speedup"]) for run in runs]
            report["compiled_spread"] = (max(speedups) - min(speedups)) / statistics.median(speedups)
        finally:
            stop_app(process)
        # bench as a user runs it: from a terminal, the app stopped (with the page open its server and Chromium held
        # 0.3 of a core here), on the same warm cache, so it drafts the same kept γ auto choice
        gamma = None if default.auto else default.gamma
        benches = [
            bench_speedup(env, default.prompt, gamma, default.max_new_tokens, args.bench_repeats) for _ in range(args.bench_calls)
        ]
        report["bench_calls"] = benches
        bench_median = statistics.median(bench["speedup"] for bench in benches)
        report["bench"] = {"speedup": bench_median, "calls": len(benches)}
        report["app_over_bench"] = statistics.median(speedups) / bench_median
        launched = time.perf_counter()
        process, report["restart_serving_s"] = start_app(port, log=logs[1], env=env)
        try:
            page = open_ready_page(browser, port)
            report["restart_ready_s"] = time.perf_counter() - launched
            report["restart_first_run"] = kept(press_run(page))
        finally:
            stop_app(process)
        browser.close()
    report["log_problems"] = [line for log in logs for line in problems_in(log)]
    text = json.dumps(report, indent=1)
    print(text)
    write_results(args.save, report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
