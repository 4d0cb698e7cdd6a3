"""A screenshot of one lesson, as a class sees it: `python benchmarks/screenshot_lesson.py lesson-8 assets/real-model-lesson.png`.

Starts `python app.py`, clicks the lesson's button in Chromium, waits until its run has played back, and saves
the page. The real pair's lessons wait for the pair to load in the background first.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from playwright.sync_api import sync_playwright

from benchmarks.browser import CHROMIUM, FLAGS, free_port, start_app, stop_app


def main(lesson: str, out: Path) -> None:
    os.environ["SPECVIZ_BACKGROUND_PAIRS"] = "1"  # the real pair's lessons need it
    port = free_port()
    process, _ = start_app(port, log=Path("/tmp/specviz-screenshot.log"))
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1400})
            page.goto(f"http://127.0.0.1:{port}")
            page.locator(f"#{lesson}").click(timeout=300_000)
            page.wait_for_selector(
                "#status :text('Lesson done')", timeout=900_000
            )  # every run of the lesson, and its explanation
            page.wait_for_timeout(1500)
            page.screenshot(path=str(out), full_page=False)
            browser.close()
    finally:
        stop_app(process)
    print(f"saved {out}")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
