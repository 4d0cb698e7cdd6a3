"""The verdict for the run on screen: worth it?, then the same sections as `python -m specviz report` for this prompt
(deployment_view.py), with the batch curve and the memory bars."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
from gradio.components import Component

from specviz.ui import texts
from specviz.ui.deployment_view import deployment_html
from specviz.ui.runs import Update


@dataclass
class Verdict:
    verdict: gr.HTML
    deployment: gr.HTML
    batch_chart: gr.Plot
    memory_chart: gr.Plot

    def outputs(self) -> list[Component]:
        return [self.verdict, self.deployment, self.batch_chart, self.memory_chart]

    def show(self, update: Update) -> dict:
        frame, out = update.frame, {}
        if frame is None:
            return out
        out |= {
            part: value
            for part, value in ((self.verdict, frame.verdict), (self.deployment, frame.deployment))
            if value is not None
        }
        if frame.deployment_charts is not None:
            batch, memory = frame.deployment_charts
            out[self.batch_chart] = gr.update(value=batch, visible=batch is not None)
            out[self.memory_chart] = gr.update(value=memory, visible=memory is not None)
        return out


def build() -> Verdict:
    verdict = gr.HTML(texts.verdict_html(None), elem_id="verdict")
    deployment = gr.HTML(deployment_html(None), elem_id="deployment")
    with gr.Row():
        batch_chart = gr.Plot(visible=False, elem_id="batch-chart", show_label=False)
        memory_chart = gr.Plot(visible=False, elem_id="memory-chart", show_label=False)
    return Verdict(verdict, deployment, batch_chart, memory_chart)
