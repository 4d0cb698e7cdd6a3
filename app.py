"""specviz: watch speculative decoding run for real. `python app.py` opens it on the bundled pair.

Layout and wiring only: what each event does is specviz/ui/handlers.py. Importing this file builds nothing; the
page is built on first use of `demo` (or by build_page), and it serves before the models load: transformers and
the pair are loaded in the background (specviz.serving.pair_cache), and handlers reach them on first use.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import gradio as gr

from specviz.drafting.registry import drafter_choices
from specviz.engine.settings import MAX_GAMMA
from specviz.run.runner import MAX_PROMPT_CHARS
from specviz.run.trace import Trace
from specviz.run.trace_schema import MAX_TRACE_BYTES
from specviz.serving import pair_cache
from specviz.ui import charts, handlers, texts
from specviz.ui.choices import background_pairs, catalogue_lessons, pair_choices, preset_choices
from specviz.ui.deployment_view import deployment_html
from specviz.ui.handlers import Handlers, on_gpu
from specviz.ui.palette import CSS
from specviz.ui.render import legend_html, stream_html
from specviz.ui.request import ACCEPTANCE_RULES, DEFAULT_PLAYBACK, MAX_NEW_TOKENS, MAX_TEMPERATURE, PLAYBACK, TREE_CONTROL
from specviz.ui.score_panel import SCORE_CSS
from specviz.ui.score_tab import score_tab
from specviz.ui.sessions import Sessions


def build_page() -> gr.Blocks:
    """The page: its layout, then each event wired to its handler."""
    default_pair = pair_cache.catalogue().default
    LESSONS = catalogue_lessons(default_pair)
    default_request = LESSONS[0].request  # the app opens on the first lesson's scenario
    with gr.Blocks(title="specviz: speculative decoding, run for real") as demo:
        trace_state, cursor_state = gr.State(None), gr.State((0, "decide"))

        gr.Markdown(
            "# specviz · speculative decoding, run for real\n"
            "A small **draft** model proposes γ tokens; the big **target** checks them all in one pass. "
            "specviz times both ways of decoding your prompt first, then plays the recording back cycle by cycle."
        )
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=300):
                pair_box = gr.Dropdown(pair_choices(), value=default_request.pair, label="Draft → target pair", elem_id="pair")
                preset = gr.Dropdown(
                    preset_choices(), label="Preset prompt (code, prose, repetitive, arithmetic)", value=None, elem_id="preset"
                )
                prompt_label = f"Prompt (up to {MAX_PROMPT_CHARS:,} characters)"
                prompt = gr.Textbox(default_request.prompt, label=prompt_label, lines=5, max_lines=14, elem_id="prompt")
                with gr.Row():
                    run_button = gr.Button("Run", variant="primary", elem_id="run")
                    step_button = gr.Button("Step", elem_id="step")
                    stop_button = gr.Button("Stop", variant="stop", elem_id="stop")
                with gr.Accordion("Lessons: one click each", open=True, elem_id="lessons"):
                    lesson_buttons = [
                        (gr.Button(f"{n}. {lesson.title}", size="sm", elem_id=lesson.key, elem_classes=["sv-lesson"]), lesson)
                        for n, lesson in enumerate(LESSONS, start=1)
                    ]
                with gr.Accordion("Settings", open=True):
                    gamma = gr.Slider(
                        1, MAX_GAMMA, value=default_request.gamma, step=1, label="γ: drafts per cycle", elem_id="gamma"
                    )
                    tree = gr.Dropdown(value=default_request.tree, elem_id="tree-shape", **TREE_CONTROL)
                    verification = gr.Radio(
                        list(ACCEPTANCE_RULES),
                        value="exact",
                        label="Verification",
                        info=(
                            "exact: the min(1, p/q) test, token by token · block: the block judged jointly (Sun et al. 2025) · "
                            "match: keep a draft while it equals the target's own sample (llama.cpp) · greedy: argmax · "
                            "lenient: accepts more, LOSSY"
                        ),
                        elem_id="verification",
                    )
                    lenience = gr.Slider(
                        0.05,
                        1.0,
                        value=0.5,
                        step=0.05,
                        label="Lenience l: accept if u ≤ p / (l·q). LOSSY below 1",
                        visible=False,
                        elem_id="lenience",
                    )
                    temperature = gr.Slider(
                        0.0, MAX_TEMPERATURE, value=0.0, step=0.05, label="Temperature (0 = greedy)", elem_id="temperature"
                    )
                    max_new_tokens = gr.Slider(
                        1,
                        MAX_NEW_TOKENS,
                        value=default_request.max_new_tokens,
                        step=1,
                        label="Max new tokens",
                        elem_id="max-new-tokens",
                    )
                    playback = gr.Radio(
                        list(PLAYBACK),
                        value=DEFAULT_PLAYBACK,
                        label="Playback of the measured run (timings are always the real ones)",
                        elem_id="playback",
                    )
                with gr.Accordion("More settings", open=False):
                    drafter = gr.Radio(
                        drafter_choices(), value=default_request.drafter, label="Drafting strategy", elem_id="drafter"
                    )
                    with gr.Row():
                        top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="top-p", elem_id="top-p")
                        top_k = gr.Number(0, label="top-k (0 = off)", precision=0, minimum=0, elem_id="top-k")
                    seed = gr.Number(0, label="Seed", precision=0, minimum=0, elem_id="seed")
            with gr.Column(scale=2, min_width=340):
                status = gr.Markdown("Starting…", elem_id="status")
                run_numbers = gr.HTML(texts.run_numbers_html(None, "idle"), elem_id="run-numbers-box")
                lesson_box = gr.HTML("", elem_id="lesson", elem_classes=["sv-lesson-text"])
                lesson_chart = gr.Plot(visible=False, elem_id="lesson-chart", show_label=False)
                gr.HTML(legend_html(), elem_id="legend")
                stream = gr.HTML(stream_html(Trace()), elem_id="stream")
                tree_drawing = gr.HTML("", elem_id="tree")  # the current cycle's token tree (a chain's is the stream)
                narration_box = gr.Markdown("", elem_id="narration", elem_classes=["sv-narration"])
                summary = gr.Markdown("", elem_id="summary")
                with gr.Column(elem_id="race"):  # the race, on the main view: arrivals as they are played back
                    race_chart = gr.Plot(elem_id="race-chart", show_label=False)
                    race_numbers = gr.HTML("", elem_id="race-numbers")
                    race = gr.HTML('<div class="sv-race"></div>', elem_id="race-lanes")
                with gr.Tabs():
                    with gr.Tab("Live charts"):  # every chart registered with charts.live_chart, in its order
                        live_charts = {chart.key: gr.Plot(label=chart.label, elem_id=chart.key) for chart in charts.LIVE_CHARTS}
                    with gr.Tab("Token inspector"):
                        inspector = gr.Dropdown([], label="Pick a drafted token (or the target's own)", elem_id="inspector")
                        inspector_chart = gr.Plot(label="p, q and the residual", elem_id="inspector-chart")
                    with gr.Tab("Theory & verdict"):
                        verdict = gr.HTML(texts.verdict_html(None), elem_id="verdict")
                        deployment_box = gr.HTML(deployment_html(None), elem_id="deployment")
                        with gr.Row():
                            batch_chart = gr.Plot(visible=False, elem_id="batch-chart", show_label=False)
                            memory_chart = gr.Plot(visible=False, elem_id="memory-chart", show_label=False)
                        gr.Markdown(texts.FORMULAS, latex_delimiters=[{"left": "$", "right": "$", "display": False}])
                        with gr.Row():
                            theory_alpha = gr.Slider(0.0, 0.99, value=0.8, step=0.01, label="α")
                            theory_tau = gr.Slider(0.0, 1.0, value=0.05, step=0.005, label="τ")
                            theory_gamma = gr.Slider(1, 32, value=5, step=1, label="γ")
                        theory_numbers = gr.Markdown()
                        theory_chart = gr.Plot(elem_id="theory-chart")
                        hardware_box = gr.Markdown("", elem_id="hardware")
                        gr.Markdown(texts.CLAIMS)
                    with gr.Tab("Score my draft"):
                        score_tab(pair_box)
                    with gr.Tab("Run details & traces"):
                        details = gr.Markdown("No pair loaded yet.", elem_id="details")
                        with gr.Row():
                            export_button = gr.Button("Export this run as a JSON trace", elem_id="export")
                            export_file = gr.File(label="trace", elem_id="export-file")
                        import_file = gr.File(
                            label="Replay a trace (.json)", file_types=[".json"], type="filepath", elem_id="import"
                        )

        # Inputs reach the handlers by name (RunRequest's field names), never by position.
        run_inputs = {
            "pair": pair_box,
            "prompt": prompt,
            "gamma": gamma,
            "tree": tree,
            "temperature": temperature,
            "top_k": top_k,
            "top_p": top_p,
            "max_new_tokens": max_new_tokens,
            "seed": seed,
            "drafter": drafter,
            "verification": verification,
            "lenience": lenience,
            "playback": playback,
        }
        # Where each part of a run's update lands, by its name in runs.Update or views.Frame (page_updates sends them).
        shows = {
            "status": status,
            "numbers": run_numbers,
            "trace": trace_state,
            "cursor": cursor_state,
            "lesson": lesson_box,
            "stream": stream,
            "tree": tree_drawing,
            "summary": summary,
            "narration": narration_box,
            "race_chart": race_chart,
            "race_numbers": race_numbers,
            "race": race,
            "verdict": verdict,
            "deployment": deployment_box,
        }
        outputs = {*shows.values(), *live_charts.values(), lesson_chart, inspector, batch_chart, memory_chart, details}
        playing = dict(
            concurrency_limit=None, concurrency_id="play", trigger_mode="multiple", show_progress="hidden"
        )  # the measuring slot, not the queue, serialises timings
        page = SimpleNamespace(  # what the handlers write to, by name
            **dict(shows=shows, live_charts=live_charts, run_inputs=run_inputs, stream=stream, summary=summary, prompt=prompt),
            **dict(narration_box=narration_box, lesson_chart=lesson_chart, inspector=inspector, details=details, status=status),
            **dict(batch_chart=batch_chart, memory_chart=memory_chart, run_numbers=run_numbers, gamma=gamma, drafter=drafter),
            temperature=temperature,
        )
        act = Handlers(page, Sessions(), default_pair)

        # Handlers get the values as sent and check them themselves (ui/request.py): one sentence naming the field and its
        # range, where Gradio's own checks would answer a wrong type with a generic error or repeat the value sent.
        as_sent = dict(preprocess=False)
        run_button.click(on_gpu(act.run_clicked), inputs_kwargs=run_inputs, outputs=outputs, **playing, **as_sent)
        step_button.click(
            on_gpu(act.step_clicked), [trace_state, cursor_state], outputs, inputs_kwargs=run_inputs, **playing, **as_sent
        )
        for button, lesson in lesson_buttons:
            button.click(act.lesson_clicked(lesson), [playback], outputs | set(run_inputs.values()), **playing, **as_sent)
        stop_button.click(act.stop_clicked, None, {status, run_numbers}, queue=False)  # runs end themselves
        preset.change(handlers.preset_picked, preset, prompt, **as_sent)
        pair_box.input(act.pair_defaults, pair_box, [gamma, temperature, drafter], **as_sent)
        verification.change(lambda mode: gr.update(visible=mode == "lenient"), verification, lenience, **as_sent)
        inspector.change(handlers.inspect, [trace_state, inspector], inspector_chart, **as_sent)
        export_button.click(handlers.export_trace, trace_state, export_file)
        import_file.upload(act.import_trace, import_file, outputs | {prompt}, **playing)
        theory_inputs = [theory_alpha, theory_tau, theory_gamma]
        for slider in theory_inputs:
            slider.change(handlers.theory_view, theory_inputs, [theory_chart, theory_numbers], **as_sent)
        demo.load(handlers.theory_view, theory_inputs, [theory_chart, theory_numbers], **as_sent)
        demo.load(act.page_loaded, None, status, concurrency_limit=None)
        demo.load(handlers.hardware_loaded, None, hardware_box)
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
