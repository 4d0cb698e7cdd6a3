"""specviz: watch speculative decoding run for real. `python app.py` opens it on the bundled pair.

Layout only: each part of the page is built and wired in its own module (specviz/ui/parts/), and the parts that
show a run are connected here through one Screen. Importing this file builds nothing; the page is built on first
use of `demo` (or by build_page), and it serves before the models load: transformers and the pair are loaded in
the background (specviz.serving.pair_cache), and the parts' handlers reach them on first use.
"""

from __future__ import annotations

import os

import gradio as gr

from specviz.process.logs import configure as configure_logging
from specviz.run.trace_schema import MAX_TRACE_BYTES
from specviz.serving import pair_cache
from specviz.ui.choices import background_pairs, catalogue_lessons
from specviz.ui.palette import CSS
from specviz.ui.parts import (
    controls,
    inspector,
    lessons,
    live_charts,
    race,
    run_buttons,
    score_tab,
    status_line,
    stream,
    theory,
    traces,
    verdict,
)
from specviz.ui.parts.screen import Recorded, Screen
from specviz.ui.score_panel import SCORE_CSS
from specviz.ui.sessions import Sessions


def build_page() -> gr.Blocks:
    """The page: the controls on the left, what a run shows on the right, then the events that play a run."""
    default_pair = pair_cache.catalogue().default
    lesson_list = catalogue_lessons(default_pair)
    default_request = lesson_list[0].request  # the app opens on the first lesson's scenario
    with gr.Blocks(title="specviz: speculative decoding, run for real") as demo:
        recorded = Recorded.build()
        gr.Markdown(
            "# specviz · speculative decoding, run for real\n"
            "A small **draft** model proposes γ tokens; the big **target** checks them all in one pass. "
            "specviz times both ways of decoding your prompt first, then plays the recording back cycle by cycle."
        )
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=300):
                inputs = controls.prompt_box(default_request)
                buttons = run_buttons.build()
                lesson_buttons = lessons.buttons(lesson_list)
                inputs |= controls.settings(default_request, inputs["pair"])
            with gr.Column(scale=2, min_width=340):
                status = status_line.build(demo, default_pair)
                lesson_panel = lessons.panel()
                shown = [lesson_panel, stream.build(), race.build()]
                with gr.Tabs():
                    with gr.Tab("Live charts"):
                        shown.append(live_charts.build())
                    with gr.Tab("Token inspector"):
                        shown.append(inspector.build(recorded.trace))
                    with gr.Tab("Theory & verdict"):
                        shown.append(verdict.build())
                        theory.build(demo)
                    with gr.Tab("Score my draft"):
                        score_tab.build(inputs["pair"])
                    with gr.Tab("Run details & traces"):
                        shown.append(details := traces.build(recorded.trace))

        screen = Screen(status, recorded, shown, Sessions())
        run_buttons.wire(buttons, inputs, screen)
        lessons.wire(lesson_buttons, lesson_panel, inputs, screen)
        traces.wire_replay(details, inputs["prompt"], screen)
    return demo


_demo: gr.Blocks | None = None


def __getattr__(name: str):
    """`app.demo`: the page, built on first use (so that importing app.py builds and reads nothing)."""
    global _demo
    if name != "demo":
        raise AttributeError(f"module 'app' has no attribute {name!r}")
    if _demo is None:
        _demo = build_page()
    return _demo


if __name__ == "__main__":
    configure_logging()  # the server's log: specviz's messages on stderr, one line each
    demo = build_page()
    demo.queue(default_concurrency_limit=8).launch(
        css=CSS + SCORE_CSS,
        theme=gr.themes.Soft(primary_hue="emerald", neutral_hue="slate"),
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        max_file_size=MAX_TRACE_BYTES,  # the only upload is a trace
        prevent_thread_lock=True,
    )
    pair_cache.preload(
        pair_cache.catalogue().default, then=background_pairs()
    )  # after the page serves: the default pair, then the real ones
    demo.block_thread()
