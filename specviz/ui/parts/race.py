"""The race, on the main view: both runs' arrival curves up to the playback's clock, their latencies, and at the end
the two texts replayed side by side."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
from gradio.components import Component

from specviz.ui.runs import Update


@dataclass
class Race:
    chart: gr.Plot
    numbers: gr.HTML
    lanes: gr.HTML

    def outputs(self) -> list[Component]:
        return [self.chart, self.numbers, self.lanes]

    def show(self, update: Update) -> dict:
        frame = update.frame
        if frame is None:
            return {}
        shown = ((self.chart, frame.race_chart), (self.numbers, frame.race_numbers), (self.lanes, frame.race))
        return {part: value for part, value in shown if value is not None}


def build() -> Race:
    with gr.Column(elem_id="race"):
        return Race(
            chart=gr.Plot(elem_id="race-chart", show_label=False),
            numbers=gr.HTML("", elem_id="race-numbers"),
            lanes=gr.HTML('<div class="sv-race"></div>', elem_id="race-lanes"),
        )
