"""The app in a real browser: Playwright drives Debian's Chromium against `python app.py` on localhost."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "artifacts" / "screenshots"
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
TOKEN_STATES = {"prompt", "drafted", "accepted", "rejected", "unverified", "resampled", "bonus"}
COLOURED = "#stream [data-status=accepted], #stream [data-status=resampled], #stream [data-status=bonus]"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app_url():
    if not Path(CHROMIUM).exists():
        if os.environ.get("SPECVIZ_REQUIRE_BROWSER"):
            pytest.fail(f"Chromium is required here but {CHROMIUM} is missing (apt-get install chromium)")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    port = _free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False", "SPECVIZ_CONCURRENCY": "2"}
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            urllib.request.urlopen(url, timeout=1)
            break
        except OSError:
            if process.poll() is not None:
                pytest.fail(f"app.py exited early:\n{process.stdout.read()}")
            time.sleep(0.5)
    else:
        process.kill()
        pytest.fail("app.py did not serve within 120 s")
    SHOTS.mkdir(parents=True, exist_ok=True)
    (SHOTS.parent / "ui_timings.json").write_text(json.dumps({"app_serving_s": time.perf_counter() - started}))
    yield url
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


def open_app(browser, url: str, width: int = 1280, height: int = 720):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url, wait_until="load")
    page.wait_for_selector("#prompt textarea", timeout=60_000)
    return page


def choose(page, element_id: str, label: str) -> None:
    page.locator(f"#{element_id} label", has_text=label).first.click()


def run_prompt(page, prompt: str, playback: str = "real pace") -> float:
    """Type a prompt, press Run, wait for the race; return seconds from Run to the first coloured token."""
    page.locator("#prompt textarea").fill(prompt)
    choose(page, "playback", playback)
    before = page.locator("#status").inner_text()
    pressed = time.perf_counter()
    page.click("#run")
    page.wait_for_selector(COLOURED, timeout=120_000)
    first_token_s = time.perf_counter() - pressed
    page.wait_for_function(  # this run's "Done" (each carries its run number), not a stale one
        "before => { const text = document.querySelector('#status').innerText; return text.includes('Done.') && text !== before; }",
        arg=before,
        timeout=180_000,
    )
    return first_token_s


def test_run_animates_tokens_charts_and_race(app_url, browser):
    page = open_app(browser, app_url)
    first_token_s = run_prompt(page, "def fibonacci(n):\n    ")
    statuses = page.locator("#stream [data-status]").evaluate_all("els => els.map(e => e.dataset.status)")
    assert set(statuses) <= TOKEN_STATES, f"unexpected token states {set(statuses) - TOKEN_STATES}"
    assert "prompt" in statuses and {"resampled", "bonus"} & set(statuses), "the target's own tokens must be shown"
    assert page.locator("#stream [data-status=accepted]").count() > 0, "a distilled draft should get some tokens accepted"
    tip = page.locator("#stream [data-status=accepted]").first.get_attribute("data-tip")
    assert "p(x)" in tip and "q(x)" in tip, f"hovering a token should show p and q, got {tip!r}"
    for chart in ("#alpha-chart", "#tau-chart", "#speedup-chart"):
        assert page.locator(f"{chart} .js-plotly-plot").count() == 1, f"{chart} did not draw"
    assert "speedup measured" in page.locator("#summary").inner_text()
    page.screenshot(path=str(SHOTS / "run-1280x720.png"), full_page=True)
    page.get_by_role("tab", name="Race", exact=True).click()
    race = page.locator("#race")
    assert race.locator(".sv-lane").count() == 2 and race.locator(".sv-text span").count() > 0
    assert "identical" in race.inner_text(), "under greedy the race must say whether the two texts are identical"
    page.wait_for_timeout(1500)
    page.screenshot(path=str(SHOTS / "race.png"), full_page=True)
    timings = json.loads((SHOTS.parent / "ui_timings.json").read_text())
    timings["run_to_first_coloured_token_s"] = first_token_s
    (SHOTS.parent / "ui_timings.json").write_text(json.dumps(timings))
    page.close()


def test_step_mode_narrates_each_phase(app_url, browser):
    page = open_app(browser, app_url)
    page.locator("#prompt textarea").fill("import os\nimport sys\n")
    page.click("#step")
    page.wait_for_selector("#narration :text('Cycle 1')", timeout=120_000)
    assert page.locator("#stream [data-status=drafted]").count() > 0, "the draft phase shows pending tokens"
    assert "proposed" in page.locator("#narration").inner_text()
    page.click("#step")
    page.wait_for_selector("#narration :text('one forward pass')", timeout=30_000)
    page.click("#step")
    page.wait_for_selector("#narration :text('for one target forward')", timeout=30_000)
    assert page.locator("#stream [data-status=drafted]").count() == 0, "after the decision no token is left pending"
    page.screenshot(path=str(SHOTS / "step-mode.png"), full_page=True)
    page.close()


def test_bad_input_is_explained_and_the_app_keeps_serving(app_url, browser):
    page = open_app(browser, app_url)
    page.locator("#prompt textarea").fill("   ")
    page.click("#run")
    page.wait_for_selector("text=The prompt is empty", timeout=30_000)
    first_token_s = run_prompt(page, "class Stack:\n")
    assert first_token_s < 60
    page.close()


def test_stop_cancels_and_two_sessions_run_side_by_side(app_url, browser):
    slow, other = open_app(browser, app_url), open_app(browser, app_url)
    slow.locator("#prompt textarea").fill("def main():\n")
    choose(slow, "playback", "50× slower")
    slow.click("#run")
    slow.wait_for_selector(COLOURED, timeout=120_000)
    run_prompt(other, "for i in range(10):\n")  # a second session completes while the first is still playing
    slow.click("#stop")
    slow.wait_for_selector("#status :text('Stopped.')", timeout=30_000)
    slow.wait_for_timeout(1000)
    run_prompt(slow, "while True:\n")  # and the stopped session can run again
    slow.close()
    other.close()


def test_phone_layout(app_url, browser):
    page = open_app(browser, app_url, width=390, height=844)
    run_prompt(page, "def add(a, b):\n")
    page.screenshot(path=str(SHOTS / "phone-390x844.png"), full_page=True)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 400, f"the page scrolls sideways on a phone ({width}px wide)"
    page.close()
