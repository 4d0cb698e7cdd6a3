"""The theory under the verdict: the formulas, an interactive speedup-over-γ chart for any α and τ, what this machine
measured of the real architectures, and common claims checked."""

from __future__ import annotations

import gradio as gr

from specviz.analysis.theory import Prediction
from specviz.ui import charts, texts
from specviz.ui.guard import in_sentences
from specviz.ui.hardware_notes import hardware_lines
from specviz.ui.parts.screen import AS_SENT
from specviz.ui.request import THEORY_FIELDS, checked


@in_sentences
def theory_view(alpha: float, tau: float, gamma_value: int):
    alpha, tau, gamma_value = checked(dict(alpha=alpha, tau=tau, gamma_value=gamma_value), THEORY_FIELDS).values()
    p = Prediction.of(alpha, int(gamma_value), tau)
    text = (
        f"E = **{p.tokens_per_cycle:.2f}** tokens per target forward · speedup at γ = {int(gamma_value)}: **{p.speedup:.2f}×** · "
        f"best γ = **{p.best_gamma}** ({p.best_speedup:.2f}×) · "
        + ("α > τ: some γ pays off." if p.speedup_possible else "α ≤ τ: **no γ gives a speedup.**")
    )
    return charts.theory_figure(alpha, tau, int(gamma_value)), text


@in_sentences
def hardware_loaded() -> str:
    return hardware_lines()


def build(demo: gr.Blocks) -> None:
    gr.Markdown(texts.FORMULAS, latex_delimiters=[{"left": "$", "right": "$", "display": False}])
    with gr.Row():
        sliders = [
            gr.Slider(0.0, 0.99, value=0.8, step=0.01, label="α"),
            gr.Slider(0.0, 1.0, value=0.05, step=0.005, label="τ"),
            gr.Slider(1, 32, value=5, step=1, label="γ"),
        ]
    numbers = gr.Markdown()
    chart = gr.Plot(elem_id="theory-chart")
    hardware = gr.Markdown("", elem_id="hardware")
    gr.Markdown(texts.CLAIMS)
    for slider in sliders:
        slider.change(theory_view, sliders, [chart, numbers], **AS_SENT)
    demo.load(theory_view, sliders, [chart, numbers], **AS_SENT)
    demo.load(hardware_loaded, None, hardware)
