"""The app in a real browser: Playwright drives Debian's Chromium against `python app.py` on localhost."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks.browser import COLOURED, ROOT, choose, free_port, numbers, start_app, stop_app, wait_state
from specviz.ui.request import DEFAULT_PLAYBACK, PLAYBACK
from tests.hostile import broken_trace, markup_trace

pytestmark = pytest.mark.browser

SHOTS = ROOT / "artifacts" / "screenshots"
TOKEN_STATES = {"prompt", "drafted", "accepted", "rejected", "unverified", "resampled", "bonus"}


@pytest.fixture(scope="module")
def app_url(chromium):
    SHOTS.mkdir(parents=True, exist_ok=True)
    port = free_port()
    try:
        process, serving_s = start_app(port, log=SHOTS.parent / "app.log")
    except RuntimeError as error:
        pytest.fail(str(error))
    (SHOTS.parent / "ui_timings.json").write_text(json.dumps({"app_serving_s": serving_s}))
    yield f"http://127.0.0.1:{port}"
    stop_app(process)


def open_app(browser, url: str, width: int = 1280, height: int = 800):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url, wait_until="load", timeout=120_000)
    for selector in ("#prompt textarea", "#run-numbers", "#stream"):  # both columns drawn, on a loaded machine too
        page.wait_for_selector(selector, timeout=120_000)
    return page


def run_prompt(page, prompt: str | None = None, playback: str = "real pace") -> dict:
    """Press Run (after typing a prompt) and wait for that run to be done; return its numbers."""
    if prompt is not None:
        page.locator("#prompt textarea").fill(prompt)
    choose(page, "playback", playback)
    before = numbers(page).get("runId")
    page.click("#run")
    return wait_state(page, "done", before)


def test_page_contract_measure_then_play(app_url, browser):
    page = open_app(browser, app_url)
    for selector in (
        "#prompt",
        "#run",
        "#step",
        "#stop",
        "#stream",
        "#status",
        "#alpha-chart",
        "#tau-chart",
        "#speedup-chart",
        "#run-numbers",
    ):
        page.locator(selector).first.wait_for(state="attached", timeout=30_000)  # a loaded machine mounts late
        assert page.locator(selector).count() >= 1, f"{selector} is part of the page contract"
    for label in PLAYBACK:
        assert page.locator("#playback label", has_text=label).count() == 1
    assert page.locator("#playback input:checked").input_value() == DEFAULT_PLAYBACK
    page.click("#run")
    measuring = wait_state(page, "measuring")
    assert "speedup" not in measuring, "no numbers before they are measured"
    playing = wait_state(page, "playing")
    for key in ("runId", "speedup", "alpha", "tau", "tokensPerS", "baselineTokensPerS"):
        assert key in playing, f"data-{key} is set as soon as the measurement is known"
    page.wait_for_selector(COLOURED, timeout=120_000)
    done = wait_state(page, "done")
    assert done["speedup"] == playing["speedup"], "playback shows the measured numbers, it does not re-measure"
    assert done.get("auto", "").startswith(("γ ", "tree ")), "the first Run drafts what γ auto measured on this machine"
    assert "γ auto, on this machine" in page.locator("#run-numbers").inner_text(), "and says what it drafted"
    assert int(done["threads"]) >= 1 and done["engine"] in ("compiled", "eager"), "what the run was timed on"
    statuses = page.locator("#stream [data-status]").evaluate_all("els => els.map(e => e.dataset.status)")
    assert set(statuses) <= TOKEN_STATES, f"unexpected token states {set(statuses) - TOKEN_STATES}"
    assert "prompt" in statuses and {"resampled", "bonus"} & set(statuses), "the target's own tokens must be shown"
    tip = page.locator("#stream [data-status=accepted]").first.get_attribute("data-tip")
    assert "p(x)" in tip and "q(x)" in tip, f"hovering a token should show p and q, got {tip!r}"
    for chart in ("#alpha-chart", "#tau-chart", "#speedup-chart"):
        assert page.locator(f"{chart} .js-plotly-plot").count() == 1, f"{chart} did not draw"
    summary = page.locator("#summary").inner_text()
    shown = re.search(r"speedup measured ([0-9.]+)×", summary)
    assert shown, f"the summary shows the measured speedup: {summary!r}"
    # data-speedup has four decimals and the summary two, so rounding the attribute again may differ in the last digit
    assert abs(float(shown.group(1)) - float(done["speedup"])) <= 0.005 + 1e-9, "the summary shows the page's measured speedup"
    speedup = f"{shown.group(1)}×"  # every view formats the same measurement with two decimals
    page.screenshot(path=str(SHOTS / "run-1280x800.png"), full_page=True)
    race = page.locator("#race")  # on the main view: no tab to click
    assert race.is_visible() and race.locator(".js-plotly-plot").count() == 1, "the race's arrival curves are drawn"
    assert race.locator(".sv-lane").count() == 2 and speedup in race.inner_text(), "the race shows the same speedup"
    assert "ITL P99" in race.inner_text() and "the whole run" in race.inner_text(), "TTFT, TPOT and ITL of both runs"
    assert "identical" in race.inner_text(), "under greedy the race must say whether the two texts are identical"
    page.get_by_role("tab", name="Theory & verdict", exact=True).click()
    verdict = page.locator("#verdict").inner_text()
    assert speedup in verdict and "**" not in verdict, "the verdict is formatted and built from the measurement"
    deployment = page.locator("#deployment").inner_text()
    for section in ("P99 latency", "Memory", "Cold start", "Batch size"):
        assert section in deployment, f"Theory & verdict shows the report's {section!r} for this prompt"
    page.wait_for_timeout(500)
    page.screenshot(path=str(SHOTS / "race.png"), full_page=True)
    page.close()


RACE_POINTS = """() => { const plot = document.querySelector('#race .js-plotly-plot');
    return plot && plot.data ? plot.data.map(trace => trace.y[trace.y.length - 1]) : null; }"""


def test_the_race_on_the_main_view_fills_in_during_playback(app_url, browser):
    page = open_app(browser, app_url)
    assert page.locator("#race").is_visible(), "the race is on the main view, not behind a tab"
    # the default playback, slow motion, fits any run into 8 s: long enough for the charts' redraws every 2 s to show
    # the race mid-way on a fast machine (10× a bundled run in fp32rows played in under 2 s, with no redraw between the
    # first and the last), short enough on a slow one (50× a run recorded in 6 s played for 5 minutes)
    page.click("#run")
    wait_state(page, "playing")
    page.wait_for_function(f"({RACE_POINTS})() !== null", timeout=120_000)
    first = page.evaluate(RACE_POINTS)
    assert len(first) == 2, "two arrival curves: speculative and the target alone"
    # the speculative curve gains tokens as the playback's clock advances, and at that same moment the numbers are cut
    # at the clock ("so far"): one check in the page, as a fast run's playback may end between two checks from here
    page.wait_for_function(
        f"""(first) => {{ const now = ({RACE_POINTS})(); const numbers = document.querySelector('#race-numbers');
            return now && now[1] > first[1] && numbers !== null && numbers.innerText.includes('so far'); }}""",
        arg=first,
        timeout=180_000,
    )
    wait_state(page, "done")
    page.wait_for_selector("#race-numbers :text('the whole run')", timeout=60_000)
    final = page.evaluate(RACE_POINTS)
    assert final[0] == final[1] > first[1], "at the end both curves reach the run's tokens (greedy: the same text)"
    page.close()


def test_a_new_run_replaces_playback_and_stop_ends_it(app_url, browser):
    page = open_app(browser, app_url)
    choose(page, "playback", "50× slower")
    page.click("#run")
    first = wait_state(page, "playing")
    page.wait_for_selector(COLOURED, timeout=120_000)
    page.click("#run")  # pressed again during playback
    second = wait_state(page, "playing", after_run_id=first["runId"], timeout=180_000)
    assert second["runId"] != first["runId"]
    page.wait_for_timeout(1500)
    assert numbers(page)["runId"] == second["runId"], "the old run must not write over the new one"
    page.click("#stop")
    page.wait_for_selector("#status :text('Stopped.')", timeout=60_000)
    wait_state(page, "stopped", timeout=60_000)  # a loaded machine may deliver the stopped numbers a moment later
    page.wait_for_timeout(1000)
    assert numbers(page)["state"] == "stopped", "Stop ends playback: no frame of the stopped run writes over it"
    run_prompt(page, "while True:\n    x")  # and the stopped session can run again
    page.close()


def test_step_mode_walks_the_run_on_screen(app_url, browser):
    page = open_app(browser, app_url)
    page.locator("#prompt textarea").fill("import os\nimport sys\n\n\ndef main():\n    args")
    page.click("#step")  # nothing recorded yet: Step records first
    page.wait_for_selector("#narration :text('Cycle 1')", timeout=120_000)
    assert page.locator("#stream [data-status=drafted]").count() > 0, "the draft phase shows pending tokens"
    assert "proposed" in page.locator("#narration").inner_text()
    page.click("#step")
    page.wait_for_selector("#narration :text('one forward pass')", timeout=120_000)
    page.click("#step")
    page.wait_for_selector("#narration :text('for one target forward')", timeout=120_000)
    assert page.locator("#stream [data-status=drafted]").count() == 0, "after the decision no token is left pending"
    page.screenshot(path=str(SHOTS / "step-mode.png"), full_page=True)
    run_prompt(page)
    page.click("#step")  # Step after a Run steps through that run from cycle 1
    page.wait_for_selector("#status :text('cycle 1 of')", timeout=120_000)
    page.close()


def pick_tree(page, shape: str) -> None:
    """Choose a shape the Token tree box offers."""
    page.locator("#tree-shape input").click()
    page.get_by_role("option", name=shape, exact=True).click()


def test_a_token_tree_is_drawn_and_step_walks_it(app_url, browser):
    page = open_app(browser, app_url)
    assert page.locator("#tree .sv-tree").count() == 0, "no tree is drawn for a chain"
    pick_tree(page, "3x2x1:2")
    assert page.locator("#tree-shape input").input_value() == "3x2x1:2"
    done = run_prompt(page, "def fibonacci(n):\n", playback="real pace")
    assert float(done["tokensPerCycle"]) > 1, "the tree's run kept more than one token per target pass"
    page.wait_for_selector("#tree .sv-tree[data-decided='1']", timeout=60_000)
    nodes = page.locator("#tree .sv-node > .sv-tok").evaluate_all("els => els.map(e => e.dataset.status)")
    assert set(nodes) <= TOKEN_STATES and len(nodes) >= 4, (
        f"the root, nodes and the target's token, in the stream's states: {nodes}"
    )
    assert nodes[-1] in ("bonus", "resampled") and page.locator("#tree .sv-node[data-path='1']").count() >= 2
    stream = page.locator("#stream [data-status]").evaluate_all("els => els.map(e => e.dataset.status)")
    assert not {"rejected", "unverified"} & set(stream), "the stream shows a tree's emitted text only"
    path_node = page.locator("#tree .sv-node[data-path='1'] .sv-tok").first
    path_node.hover()
    tip = path_node.get_attribute("data-tip")
    assert "p(x)" in tip and "q(x)" in tip and "greedy test" in tip, f"hovering a node shows its test, got {tip!r}"
    page.locator("#tree").screenshot(path=str(SHOTS / "tree.png"))
    for phase in ("draft", "verify", "decide"):
        page.click("#step")
        page.wait_for_selector(f"#status :text('cycle 1 of'):has-text('{phase}')", timeout=120_000)
    page.wait_for_selector("#narration :text('depth 1: branch')", timeout=60_000)
    assert "for one target forward" in page.locator("#narration").inner_text()
    assert page.locator("#tree .sv-tree[data-cycle='0'][data-decided='1']").count() == 1, "Step draws the cycle it walks"
    page.screenshot(path=str(SHOTS / "tree-step.png"), full_page=True)
    page.close()


def test_bad_input_is_explained_at_once_and_the_app_keeps_serving(app_url, browser):
    busy, page = open_app(browser, app_url), open_app(browser, app_url)
    busy.click("#run")  # another session is measuring
    page.locator("#prompt textarea").fill("   ")
    page.click("#run")
    page.wait_for_selector("text=The prompt is empty", timeout=60_000)
    run_prompt(page, "class Stack:\n    def push(self, item):\n        self")
    busy.close()
    page.close()


def test_a_lesson_runs_and_explains_itself_in_measured_numbers(app_url, browser):
    page = open_app(browser, app_url)
    assert page.locator("button[id^=lesson-]").count() >= 6
    page.click("#lesson-2")
    page.wait_for_selector("#lesson :text('Question')", timeout=240_000)
    lesson = page.locator("#lesson").inner_text()
    shown = numbers(page)
    assert f"{float(shown['alpha']):.2f}" in lesson, "the lesson quotes this run's measured α"
    assert page.locator("#pair input").input_value().startswith("pycode-plain"), "the lesson set the pair"
    page.screenshot(path=str(SHOTS / "lesson.png"), full_page=True)
    page.close()


def test_lesson_12_judges_the_same_drafts_three_ways(app_url, browser):
    """Lesson 12 as a new user runs it: one click, a sampled run and its two siblings measured back to back, three
    rows of the same drafts judged by each verifier from the first run, and one cycle walked through in numbers."""
    page = open_app(browser, app_url)
    page.click("#lesson-12")
    page.wait_for_selector("#lesson :text('Question')", timeout=480_000)
    lesson = page.locator("#lesson").inner_text()
    shown = numbers(page)
    assert f"{float(shown['alpha']):.2f}" in lesson, "the lesson quotes the shown run's measured α"
    for words in ("token by token", "block verification", "sample-and-match", "Same drafts, three verdicts"):
        assert words in lesson, f"{words!r} missing from lesson 12"
    tables = page.locator("#lesson table")
    assert tables.count() == 2, "one table of the three runs, one of the same drafts judged three ways"
    assert tables.nth(0).locator("tr").count() == 4 and tables.nth(1).locator("tr").count() == 4, "three rows each"
    assert "Cycle " in lesson and "η = " in lesson and "u = " in lesson, "a cycle walked through with its uniforms"
    assert "same distribution of texts" in lesson
    page.screenshot(path=str(SHOTS / "lesson-12.png"), full_page=True)
    page.close()


def test_two_sessions_at_once(app_url, browser):
    one, two = open_app(browser, app_url), open_app(browser, app_url)
    choose(one, "playback", "real pace")
    choose(two, "playback", "real pace")
    one.click("#run")
    two.click("#run")
    a, b = wait_state(one, "done"), wait_state(two, "done")
    assert a["runId"] != b["runId"] and float(a["speedup"]) > 0 and float(b["speedup"]) > 0
    one.close()
    two.close()


def test_phone_layout(app_url, browser):
    page = open_app(browser, app_url, width=390, height=844)
    run_prompt(page, "def add(a, b):\n    return")
    page.screenshot(path=str(SHOTS / "phone-390x844.png"), full_page=True)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 400, f"the page scrolls sideways on a phone ({width}px wide)"
    page.close()


def test_a_shared_trace_shows_its_strings_as_text_and_a_broken_one_gets_a_sentence(app_url, browser, tmp_path):
    """Issue 29: the trace's own HTML and Markdown never render in the page; a broken file is one sentence."""
    page = open_app(browser, app_url)
    shared = tmp_path / "markup.json"
    shared.write_text(json.dumps(markup_trace()))
    page.get_by_role("tab", name="Run details & traces", exact=True).click()
    page.locator("#import input[type=file]").set_input_files(str(shared))
    page.wait_for_selector("#status :text('Done.')", timeout=120_000)
    page.wait_for_selector("#details :text('weights in memory')", timeout=30_000)
    shown = ("#status", "#narration", "#details", "#summary", "#stream", "#verdict", "#race")
    for where in shown:
        rendered = page.locator(f"{where} img, {where} a[href*='example.com']").count()
        assert rendered == 0, f"markup from the trace rendered inside {where}"
    for where in ("#status", "#narration", "#details"):
        text = page.locator(where).inner_text()
        assert "<img src=x onerror=alert(1)> **bold** [link](http://example.com)" in text, f"{where} shows the strings as text"
    page.close()
    page = open_app(browser, app_url)
    broken = tmp_path / "broken.json"
    broken.write_bytes(broken_trace("a cycle of 1e300 s"))
    page.get_by_role("tab", name="Run details & traces", exact=True).click()
    page.locator("#import input[type=file]").set_input_files(str(broken))
    page.wait_for_selector("text=Cannot replay that file: trace.cycles[1].verify_s must be a number of seconds", timeout=30_000)
    page.close()
