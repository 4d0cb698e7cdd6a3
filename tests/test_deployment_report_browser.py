"""The deployment report in a real browser: opened from disk in Chromium, its figures drawn, nothing fetched."""

from __future__ import annotations

import pytest

from specviz.deployment.report import write_report
from tests.test_deployment_report import FIGURES, sample_report

pytestmark = pytest.mark.browser

LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:")


def test_report_draws_its_figures_offline(browser, tmp_path):
    path = write_report(sample_report(), tmp_path / "report.html")
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(path.as_uri(), wait_until="load")
    page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {len(FIGURES)}", timeout=30_000)
    for div_id in FIGURES:
        assert page.locator(f"#{div_id} .main-svg").count() >= 1, f"plotly must have drawn the {div_id} figure"
    assert page.locator("#race .scatterlayer .trace").count() == 2, "the race has one curve per method"
    assert page.locator("#batch .scatterlayer .trace").count() >= 1
    page.close()
    leaving = [url for url in requests if not url.startswith(LOCAL_SCHEMES)]
    assert not leaving, f"the report must work offline, yet it requested {leaving}"
    assert requests and requests[0].startswith("file:"), "the page itself was loaded from disk"
    assert not errors, f"the page raised: {errors}"
