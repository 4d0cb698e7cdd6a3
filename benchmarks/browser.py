"""Driving the app in Chromium: shared by benchmarks/app_timings.py and tests/test_ui_browser.py.

Both start `python app.py` on a free port and read the page's contract for scripts, the `#run-numbers`
element's data-* attributes (docs/page.md). Playwright drives Debian's Chromium; it downloads
none of its own. Tests import this module as `benchmarks.browser` (pytest puts the repository on the path).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
COLOURED = "#stream [data-status=accepted], #stream [data-status=resampled], #stream [data-status=bonus]"
COMPILE_WAIT_S = 900  # the bundled pair's packages, cold, on a loaded 2-core machine
SERVE_TIMEOUT_S = 240  # a loaded 2-core machine can take minutes to import gradio and serve


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(
    port: int, log: Path | None = None, env: dict[str, str] | None = None, cwd: Path = ROOT
) -> tuple[subprocess.Popen, float]:
    """Start `python app.py` on the port (its output into `log`, if given); return it and the seconds until it served.

    `env`: the app's whole environment (default: this one, with the real pair's background loading off). RuntimeError,
    with the app's output when it was logged, if it exits early or does not serve in time.
    """
    if env is None:
        env = {**os.environ}
        env.setdefault("SPECVIZ_BACKGROUND_PAIRS", "0")  # timings and tests of the default pair: no real pair beside them
    env = {**env, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False"}
    output = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 (the app keeps writing to it)
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "app.py"], cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT)
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}", timeout=1)
            return process, time.perf_counter() - started
        except OSError:
            waited = time.perf_counter() - started
            if process.poll() is not None or waited > SERVE_TIMEOUT_S:
                process.kill()
                said = log.read_text()[-4000:] if log else ""
                why = "exited early" if process.returncode not in (None, -9) and waited <= SERVE_TIMEOUT_S else "did not serve"
                raise RuntimeError(f"app.py {why} (after {waited:.0f} s)\n{said}") from None
            time.sleep(0.05)


def stop_app(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


def numbers(page) -> dict:
    """The #run-numbers element's data-* attributes: the page's contract for scripts."""
    return page.locator("#run-numbers").evaluate("el => ({...el.dataset})")


def wait_state(page, state: str, after_run_id: str | None = None, timeout: int = 300_000, polling: int | str = "raf") -> dict:
    """Wait until #run-numbers reaches `state` for a run newer than `after_run_id`; return its numbers."""
    page.wait_for_function(
        """([state, after]) => { const el = document.querySelector('#run-numbers');
             return el && el.dataset.state === state && (after === null || el.dataset.runId !== after); }""",
        arg=[state, after_run_id],
        timeout=timeout,
        polling=polling,
    )
    return numbers(page)


def choose(page, element_id: str, label: str) -> None:
    """Click the radio choice `label` of the component with this elem_id."""
    page.locator(f"#{element_id} label", has_text=label).first.click()


def shipped_environment(cache: Path) -> dict[str, str]:
    """This environment as a user's shell has it: none of the tests' switches, specviz's cache empty but for the
    real model's downloaded files."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SPECVIZ_", "PYTEST_"))}
    env["SPECVIZ_CACHE"] = str(cache)
    default = Path.home() / ".cache" / "specviz"
    for fetched in ("wheels", "converted"):
        if (default / fetched).is_dir():
            (cache / fetched).symlink_to(default / fetched)
    return env


def wait_for_compiled_step(browser, port: int) -> None:
    """Until a newly opened page no longer says the default pair is compiling (the status a visitor reads)."""
    deadline = time.monotonic() + COMPILE_WAIT_S
    while time.monotonic() < deadline:
        page = browser.new_page()
        page.goto(f"http://127.0.0.1:{port}", wait_until="load", timeout=120_000)
        page.wait_for_selector("#status :text('Ready')", timeout=300_000)
        page.wait_for_timeout(1000)  # the status's next line, if the pair is compiling
        status = page.locator("#status").inner_text()
        page.close()
        if "decode step in a separate process" not in status.split("In the background")[0]:
            return
        time.sleep(10)
    raise RuntimeError(f"the default pair was still compiling after {COMPILE_WAIT_S} s")


def problems_in(log: Path) -> list[str]:
    """Lines of the server's log that a user should never cause: tracebacks and failures."""
    return [line for line in log.read_text(errors="replace").splitlines() if re.search(r"traceback|failed", line, re.I)]


def open_ready_page(browser, port: int):
    """A new page on the app at `port`, once its status says Ready (the default pair is loaded)."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"http://127.0.0.1:{port}", wait_until="load", timeout=120_000)
    page.wait_for_selector("#status :text('Ready')", timeout=300_000)
    return page


def press_run(page, playback: str = "real pace") -> dict:
    """Press Run with this playback and wait for that run to be done: the numbers it left on #run-numbers."""
    choose(page, "playback", playback)
    before = numbers(page).get("runId")
    page.click("#run")
    return wait_state(page, "done", before, timeout=600_000, polling=100)
