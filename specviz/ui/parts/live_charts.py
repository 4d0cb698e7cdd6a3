"""The live charts tab: every chart registered with charts.live_chart, in its order, redrawn as the run plays back."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
from gradio.components import Component

from specviz.ui import charts
from specviz.ui.runs import Update


@dataclass
class LiveCharts:
    plots: dict[str, gr.Plot]  # by the chart's key

    def outputs(self) -> list[Component]:
        return list(self.plots.values())

    def show(self, update: Update) -> dict:
        figures = (update.frame.charts if update.frame is not None else None) or {}
        return {self.plots[key]: figure for key, figure in figures.items()}


def build() -> LiveCharts:
    return LiveCharts({chart.key: gr.Plot(label=chart.label, elem_id=chart.key) for chart in charts.LIVE_CHARTS})
