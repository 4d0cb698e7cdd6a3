"""Run, Step and Stop: measure the request and play it back on the screen, walk the run on screen one phase at a
time, or stop the session's run (it ends itself within 50 ms, and Stop has the last word)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
from gradio.components import Component

from specviz.run.runner import check_prompt_text
from specviz.run.trace import Trace
from specviz.serving import pair_cache
from specviz.ui import runs
from specviz.ui.guard import in_sentences
from specviz.ui.hardware_notes import hardware_line, saved_batches
from specviz.ui.parts.screen import AS_SENT, PLAYING, Screen, on_gpu
from specviz.ui.request import RunRequest


@dataclass
class RunButtons:
    run: gr.Button
    step: gr.Button
    stop: gr.Button


def build() -> RunButtons:
    with gr.Row():
        return RunButtons(
            run=gr.Button("Run", variant="primary", elem_id="run"),
            step=gr.Button("Step", elem_id="step"),
            stop=gr.Button("Stop", variant="stop", elem_id="stop"),
        )


def wire(buttons: RunButtons, inputs: dict[str, Component], screen: Screen) -> None:
    """`inputs`: the request's components by RunRequest field name; the runs play on `screen`."""

    @in_sentences
    def run_clicked(http: gr.Request, **values):
        request = RunRequest.from_values(values)  # a wrong value is answered before it retires this session's run
        check_prompt_text(request.prompt)  # an empty prompt too: before the run's first use imports anything
        ticket = screen.start(http)
        device = pair_cache.device_of(request.pair)
        updates = runs.run_and_play(
            request, ticket, screen.sessions, hardware_line(request.pair), saved_batches(request.pair, device)
        )
        yield from screen.play(updates, ticket)

    @in_sentences
    def step_clicked(trace: Trace | None, cursor, http: gr.Request, **values):
        request = RunRequest.from_values(values)
        ticket = screen.start(http)
        yield from screen.play(runs.step(trace, tuple(cursor or (0, "decide")), request, ticket, screen.sessions), ticket)

    @in_sentences
    def stop_clicked(http: gr.Request):
        return screen.stop(http)

    outputs, recorded = screen.outputs(), screen.recorded
    buttons.run.click(on_gpu(run_clicked), inputs_kwargs=inputs, outputs=outputs, **PLAYING, **AS_SENT)
    step_inputs = [recorded.trace, recorded.cursor]
    buttons.step.click(on_gpu(step_clicked), step_inputs, outputs, inputs_kwargs=inputs, **PLAYING, **AS_SENT)
    buttons.stop.click(stop_clicked, None, set(screen.status.outputs()), queue=False)  # runs end themselves
