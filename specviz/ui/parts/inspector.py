"""The token inspector: pick a drafted token (or the target's own) of the run on screen, see p, q and the residual."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
from gradio.components import Component

from specviz.run.trace import Trace
from specviz.ui import charts
from specviz.ui.guard import in_sentences
from specviz.ui.parts.screen import AS_SENT
from specviz.ui.runs import Update
from specviz.ui.views import inspector_choices


@dataclass
class Inspector:
    choice: gr.Dropdown

    def outputs(self) -> list[Component]:
        return [self.choice]

    def show(self, update: Update) -> dict:
        if update.frame is None or update.frame.inspector is None:
            return {}
        return {self.choice: gr.update(choices=update.frame.inspector, value=None)}


@in_sentences
def inspect(trace: Trace | None, choice: str | None):
    if not trace or choice not in {value for _, value in inspector_choices(trace.cycles)}:
        return charts.inspector_figure(Trace(), 0, 0)
    cycle_index, position_index = (int(part) for part in choice.split(":"))
    return charts.inspector_figure(trace, cycle_index, position_index)


def build(trace: gr.State) -> Inspector:
    """The tab's controls; `trace` holds the run on screen."""
    choice = gr.Dropdown([], label="Pick a drafted token (or the target's own)", elem_id="inspector")
    chart = gr.Plot(label="p, q and the residual", elem_id="inspector-chart")
    choice.change(inspect, [trace, choice], chart, **AS_SENT)
    return Inspector(choice)
