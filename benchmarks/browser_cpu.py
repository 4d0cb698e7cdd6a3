"""How much processor the browser showing the page takes while the app measures, and after a run is done.

    python benchmarks/browser_cpu.py [--button run|lesson-8] [--pace "10× slower"] [--runs 3]

On a 2-core machine the page competes with the models for the processor. This starts `python app.py`, presses
the button in Chromium `--runs` times, and prints, from /proc, the CPU seconds Chromium and the server used
while `#run-numbers` said `measuring`, the page's numbers (with `data-other-load`, the load the app itself
recorded), and Chromium's CPU for 6 s after the run was done (the replay animations). Linux only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from benchmarks.browser import CHROMIUM, FLAGS, choose, free_port, numbers, start_app, stop_app, wait_state  # noqa: E402
from specviz.process.machine_load import process_cpu_s  # noqa: E402


def cpu_s(pids: list[int]) -> float:
    return sum(read[1] for pid in pids if (read := process_cpu_s(pid)) is not None)


def chromium_pids() -> list[int]:
    found = subprocess.run(["pgrep", "-f", "chromium"], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--button", default="run", help="run, or a lesson's id such as lesson-8 (loads the real pair)")
    parser.add_argument("--pace", default="real pace", help='"real pace", "10× slower" or "50× slower"')
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    if args.button != "run":
        os.environ["SPECVIZ_BACKGROUND_PAIRS"] = "1"  # the real pair's lessons need it
    port = free_port()
    process, _ = start_app(port)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1400})
            page.goto(f"http://127.0.0.1:{port}")
            page.wait_for_selector("#prompt textarea")
            ready = "document.querySelector('#status') && document.querySelector('#status').innerText.includes('Ready')"
            if args.button != "run":
                ready += " && !document.querySelector('#status').innerText.includes('In the background')"
            page.wait_for_function(f"() => {ready}", timeout=600_000)
            for attempt in range(1, args.runs + 1):
                choose(page, "playback", args.pace)
                before = numbers(page).get("runId")
                page.click(f"#{args.button}")
                wait_state(page, "measuring", before, timeout=600_000, polling=50)
                browser_s, server_s, started = cpu_s(chromium_pids()), cpu_s([process.pid]), time.perf_counter()
                page.wait_for_function(
                    "() => ['playing', 'done'].includes(document.querySelector('#run-numbers').dataset.state)",
                    timeout=600_000,
                    polling=100,
                )
                wall = time.perf_counter() - started
                browser_s, server_s = cpu_s(chromium_pids()) - browser_s, cpu_s([process.pid]) - server_s
                shown = numbers(page)
                wait_state(page, "done", timeout=900_000)
                after = cpu_s(chromium_pids())
                time.sleep(6)
                after = (cpu_s(chromium_pids()) - after) / 6
                print(
                    f"run {attempt}: measuring {wall:.1f} s · server {server_s:.1f} CPU-s · Chromium {browser_s:.1f} CPU-s · "
                    f"speedup {shown.get('speedup')} · {shown.get('tokensPerS')} vs {shown.get('baselineTokensPerS')} tok/s · "
                    f"ν {shown.get('verifyCost')} · other load recorded {shown.get('otherLoad')} cores · "
                    f"Chromium after done {after:.2f} cores",
                    flush=True,
                )
            browser.close()
    finally:
        stop_app(process)


if __name__ == "__main__":
    main()
