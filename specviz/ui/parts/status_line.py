"""The status line and the numbers bar: what a run is doing and its measured numbers, and on page load how the
pairs load (the default pair, the compile worker's progress, then the real pairs in the background)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import gradio as gr
from gradio.components import Component

from specviz.serving import pair_cache
from specviz.ui import runs, texts
from specviz.ui.choices import background_pairs, catalogue_lessons
from specviz.ui.guard import in_sentences
from specviz.ui.runs import Update


def default_request(default_pair: str):
    """The request the page opens on: the first lesson's."""
    return catalogue_lessons(default_pair)[0].request


@dataclass
class StatusLine:
    status: gr.Markdown
    numbers: gr.HTML  # holds the #run-numbers element

    def outputs(self) -> list[Component]:
        return [self.status, self.numbers]

    def show(self, update: Update) -> dict:
        return {
            part: value for part, value in ((self.status, update.status), (self.numbers, update.numbers)) if value is not None
        }

    def stopped(self) -> dict:
        return {self.status: "Stopped.", self.numbers: texts.run_numbers_html(None, "stopped")}


def build(demo: gr.Blocks, default_pair: str) -> StatusLine:
    status = gr.Markdown("Starting…", elem_id="status")
    numbers = gr.HTML(texts.run_numbers_html(None, "idle"), elem_id="run-numbers-box")

    @in_sentences
    def page_loaded():
        """Say whether the default pair is ready, then how the real pair's background fetch goes; the page is usable throughout."""
        if not pair_cache.is_loaded(default_pair):
            yield f"Loading the pair {default_pair}… (a few seconds, once per process; Run waits for it)"
            deadline = time.monotonic() + 300
            while not pair_cache.is_loaded(default_pair) and time.monotonic() < deadline:
                time.sleep(0.25)
        ready = "Ready. Press **Run**, or pick a lesson." if pair_cache.is_loaded(default_pair) else "Ready."
        yield ready
        compiling, deadline = pair_cache.status(default_pair), time.monotonic() + 900
        if compiling:  # the first start on an empty cache: runs are eager until the worker's packages load
            yield f"{ready} {compiling}"
            while pair_cache.status(default_pair) and time.monotonic() < deadline:
                time.sleep(0.5)
            yield f"{ready} The compiled step is loaded: runs from now on measure it."
        runs.prepare_auto_setting(default_request(default_pair))  # γ auto, measured in the background for the first Run
        for name in background_pairs():
            deadline, shown = time.monotonic() + 600, None
            while not pair_cache.is_loaded(name) and time.monotonic() < deadline:
                message = pair_cache.status(name)
                if message and message != shown:
                    shown = message
                    yield f"{ready} In the background: {message}"
                    if "could not be loaded" in message:
                        break
                time.sleep(0.5)
            if pair_cache.is_loaded(name):
                yield f"{ready} The real pair **{name}** is ready too: pick it above, or its lessons."

    demo.load(page_loaded, None, status, concurrency_limit=None)
    return StatusLine(status, numbers)
