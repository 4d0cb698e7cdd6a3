"""The token stream: the legend, the stream, the current cycle's tree, the narration of a step, and the summary."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
from gradio.components import Component

from specviz.run.trace import Trace
from specviz.ui.render import legend_html, stream_html
from specviz.ui.runs import Update

MEASURING_STREAM = '<div class="sv-stream" data-empty="1">Measuring… the tokens appear once both runs are timed.</div>'


@dataclass
class Stream:
    stream: gr.HTML
    tree: gr.HTML  # the current cycle's token tree (a chain's is the stream)
    narration: gr.Markdown
    summary: gr.Markdown

    def outputs(self) -> list[Component]:
        return [self.stream, self.tree, self.narration, self.summary]

    def show(self, update: Update) -> dict:
        out = {self.stream: MEASURING_STREAM, self.narration: "", self.summary: "", self.tree: ""} if update.clear else {}
        frame = update.frame
        if frame is not None:
            shown = (
                (self.stream, frame.stream),
                (self.tree, frame.tree),
                (self.narration, frame.narration),
                (self.summary, frame.summary),
            )
            out |= {part: value for part, value in shown if value is not None}
        return out


def build() -> Stream:
    gr.HTML(legend_html(), elem_id="legend")
    return Stream(
        stream=gr.HTML(stream_html(Trace()), elem_id="stream"),
        tree=gr.HTML("", elem_id="tree"),
        narration=gr.Markdown("", elem_id="narration", elem_classes=["sv-narration"]),
        summary=gr.Markdown("", elem_id="summary"),
    )
