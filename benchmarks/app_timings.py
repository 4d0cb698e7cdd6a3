"""Drive the app in Chromium, as a class would, and print how long everything takes.

    python benchmarks/app_timings.py [--runs 3] [--sessions 8] [--alone] [--background-pairs]

Starts `python app.py` on a free port, then measures: page serving time, Run → first coloured token
(first run of the process, then warm runs at real pace), Run → whole run done with the default
playback (slow motion), the speedup the page reports next to `python -m specviz bench` on the same prompt and
settings (with the page still open), a new Run during playback taking over, Stop, an empty
prompt's message while another session is measuring, and N sessions pressing Run at once.
Timings are printed, never asserted: this machine's speed varies from run to run.

Before timing a run the app waits (up to 8 s) until the other programs it can see in /proc are quiet. On a
machine shared with another job that wait is spent every time; `--alone` runs the app and its browser in a PID
namespace of their own (Linux, as root: `unshare`), so the app sees only the browser, as on a user's own machine.
The job still takes its share of the processor, so the models run slower than on a quiet machine.
Like the browser tests, it starts the app without the real pair's background load (SPECVIZ_BACKGROUND_PAIRS=0);
`--background-pairs` keeps it, as `python app.py` does for a new user: the load then shares the processor with the
first runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.browser import CHROMIUM, COLOURED, FLAGS, choose, free_port, numbers, start_app, stop_app, wait_state  # noqa: E402
from benchmarks.first_start import as_number  # noqa: E402
from benchmarks.results import write_results  # noqa: E402


def wait(page, state: str, after: str | None = None, timeout: int = 300_000) -> dict:
    """wait_state, polled every 20 ms: the timings below are only as fine as the polling."""
    return wait_state(page, state, after, timeout, polling=20)


MEASURING_POLL_MS = 250  # the first coloured token's time is then known to within this (it follows the measurement)


def timed_run(page, playback: str) -> dict:
    """Press Run; seconds to the first coloured token and to done, and the page's numbers."""
    choose(page, "playback", playback)
    before = numbers(page).get("runId")
    page.evaluate("() => { window.__cleared = true; }")
    pressed = time.perf_counter()
    page.click("#run")
    wait(page, "measuring", before, timeout=60_000)
    page.wait_for_function(  # while the clock runs, look seldom: a 20 ms poll wakes the browser 50 times a second
        "(after) => { const el = document.querySelector('#run-numbers');"
        " return el.dataset.runId !== after && el.dataset.state !== 'measuring'; }",
        arg=before,
        timeout=300_000,
        polling=MEASURING_POLL_MS,
    )
    page.wait_for_function(
        f"(after) => document.querySelector('#run-numbers').dataset.runId !== after && document.querySelector('{COLOURED}') !== null",
        arg=before,
        timeout=300_000,
        polling=20,
    )
    first = time.perf_counter() - pressed
    done = wait(page, "done", before)
    return {"first_colour_s": first, "done_s": time.perf_counter() - pressed, **done}


RUN_NUMBERS = (  # what each Run's numbers bar says (data-* attributes, ui/texts.run_numbers_html)
    "speedup", "speedupSpread", "alpha", "tau", "verifyCost", "tokensPerS", "baselineTokensPerS", "engine", "otherLoad"
)  # fmt: skip


def run_record(run: dict) -> dict:
    """A Run's timings and numbers, the numbers as numbers ("—" and the engine's name stay text)."""
    return {key: as_number(run.get(key)) for key in ("first_colour_s", "done_s", *RUN_NUMBERS)}


def bench_speedup(prompt: str, gamma: int, max_new_tokens: int, repeats: int) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write(prompt)
    command = [sys.executable, "-m", "specviz", "bench", "--prompts", handle.name, "--gamma", str(gamma)]
    command += ["--max-new-tokens", str(max_new_tokens), "--repeats", str(repeats), "--no-hf", "--json"]
    output = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    rows = json.loads(output)["rows"]
    return next(row for row in rows if row["method"] == "speculative")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="warm runs at real pace")
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--bench-repeats", type=int, default=3)
    parser.add_argument("--alone", action="store_true", help="app and browser in their own PID namespace (see above)")
    parser.add_argument("--background-pairs", action="store_true", help="load the real pair in the background, as app.py does")
    args = parser.parse_args()
    if args.background_pairs:
        os.environ["SPECVIZ_BACKGROUND_PAIRS"] = "1"
    if args.alone and not os.environ.get("SPECVIZ_TIMINGS_ALONE"):
        command = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, *sys.argv]
        sys.exit(subprocess.run(command, env={**os.environ, "SPECVIZ_TIMINGS_ALONE": "1"}).returncode)
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    from specviz.ui.lessons import CODE_PROMPT
    from specviz.ui.request import DEFAULT_PLAYBACK

    port = free_port()
    process, serving_s = start_app(port)
    started = time.perf_counter() - serving_s
    url = f"http://127.0.0.1:{port}"
    report: dict = {"alone": bool(os.environ.get("SPECVIZ_TIMINGS_ALONE")), "background_pairs": args.background_pairs}
    report["serving_s"] = serving_s
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(url)
            page.wait_for_selector("#prompt textarea")
            page.wait_for_function("document.querySelector('#status').innerText.includes('Ready')", timeout=300_000)
            report["pair_ready_s"] = time.perf_counter() - started  # from `python app.py` to "Ready" on the page
            first = timed_run(page, DEFAULT_PLAYBACK)  # the very first run of the process
            report["first_run"] = run_record(first)
            warm = [timed_run(page, "real pace") for _ in range(args.runs)]
            report["warm_runs"] = [run_record(run) for run in warm]
            default = timed_run(page, DEFAULT_PLAYBACK)
            report["default_run_done_s"] = default["done_s"]
            speedups = [float(run["speedup"]) for run in warm]
            report["warm_speedup_spread"] = (max(speedups) - min(speedups)) / statistics.median(speedups)

            bench = bench_speedup(CODE_PROMPT, gamma=4, max_new_tokens=64, repeats=args.bench_repeats)  # page still open
            report["bench_speedup"] = bench["speedup"]
            report["bench_row"] = {k: bench.get(k) for k in ("engine", "tokens_per_s", "verify_cost", "tau", "speedup_spread")}
            report["app_over_bench"] = statistics.median(speedups) / bench["speedup"]

            choose(page, "playback", "50× slower")
            page.click("#run")
            playing = wait(page, "playing")
            page.wait_for_selector(COLOURED)
            pressed = time.perf_counter()
            page.click("#run")
            wait(page, "measuring", playing["runId"], timeout=60_000)
            report["takeover_s"] = time.perf_counter() - pressed
            wait(page, "playing", playing["runId"])
            pressed = time.perf_counter()
            page.click("#stop")
            try:
                wait(page, "stopped", timeout=30_000)
                report["stop_s"] = time.perf_counter() - pressed
            except PlaywrightTimeout:
                report["stop_s"] = f"not stopped after 30 s (state {numbers(page).get('state')})"

            other = browser.new_page()
            other.goto(url)
            other.wait_for_selector("#prompt textarea")
            other.locator("#prompt textarea").fill("   ")
            choose(page, "playback", "real pace")
            page.click("#run")
            wait(page, "measuring", timeout=60_000)
            pressed = time.perf_counter()
            other.click("#run")
            other.wait_for_selector("text=The prompt is empty", timeout=60_000)
            report["empty_prompt_message_s"] = time.perf_counter() - pressed
            wait(page, "done")

            pages = [browser.new_page() for _ in range(args.sessions)]
            for each in pages:
                each.goto(url)
                each.wait_for_selector("#prompt textarea")
                choose(each, "playback", "real pace")
            pressed = time.perf_counter()
            for each in pages:
                each.click("#run")
            finished = [wait_state(each, "done", polling=MEASURING_POLL_MS) for each in pages]
            report["sessions"] = {
                "n": args.sessions,
                "all_done_s": time.perf_counter() - pressed,
                "errors": sum(each.locator(".toast-body").count() for each in pages),
                "speedups": [float(f["speedup"]) for f in finished],
                "other_load_cores": [float(f["otherLoad"]) if f.get("otherLoad") else None for f in finished],
            }
            browser.close()
    finally:
        stop_app(process)
    print(json.dumps(report, indent=2))
    write_results("app_timings", report)


if __name__ == "__main__":
    main()
