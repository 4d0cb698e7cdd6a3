"""The "Score my draft" tab laid out and wired: its inputs, its one button, and where score_views' parts land."""

from __future__ import annotations

import gradio as gr

from specviz.engine.settings import MAX_GAMMA
from specviz.ui.guard import in_sentences
from specviz.ui.parts.screen import AS_SENT
from specviz.ui.score_panel import CONTINUATION_TOKENS, HARDEST_HEADERS, MAX_SCORE_CHARS, MY_TEXT, PROMPT_SETS, score_views


def build(pair_box: gr.Dropdown) -> None:
    """Build the tab inside an open gr.Tab; it scores the pair chosen in `pair_box`."""
    gr.Markdown(
        "### Score my draft\nHow often would this draft be accepted on *your* text? One teacher-forced pass "
        "of each model gives Σ min(p, q) at every position (under greedy: whether both models' top tokens "
        "agree); nothing is generated. τ and ν are timed on this machine."
    )
    with gr.Row():
        text = gr.Textbox(
            label=f"Text to score (up to {MAX_SCORE_CHARS:,} characters)",
            lines=6,
            placeholder="Paste text like what the target will write…",
            scale=3,
        )
        with gr.Column(scale=1):
            prompt_set = gr.Dropdown(PROMPT_SETS, value=MY_TEXT, label="or a prompt set")
            temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="temperature (0 = greedy)")
            gamma = gr.Slider(1, MAX_GAMMA, value=4, step=1, label="γ for the prediction")
            own = gr.Checkbox(
                False,
                label=f"score what the target writes after it ({CONTINUATION_TOKENS} tokens): the α a run sees",
            )
            button = gr.Button("Score my draft", variant="primary")
    summary = gr.Markdown()
    strip = gr.HTML()
    with gr.Row():
        hardest = gr.Dataframe(headers=HARDEST_HEADERS, label="hardest positions", interactive=False, wrap=True)
        curve = gr.Plot(label="predicted speedup over γ")
    outputs = {"summary": summary, "strip": strip, "hardest": hardest, "curve": curve}  # score_views' parts, by name

    @in_sentences
    def score_clicked(pair_name: str, text: str, prompt_set: str, temperature: float, gamma: int, own: bool):
        views = score_views(pair_name, text, prompt_set, temperature, gamma, own)
        return {outputs[name]: value for name, value in views.items()}

    inputs = [pair_box, text, prompt_set, temperature, gamma, own]
    button.click(score_clicked, inputs, set(outputs.values()), **AS_SENT)  # checked by score_views, as sent
