"""specviz: watch speculative decoding run for real. `python app.py` opens it on the bundled pair."""

from __future__ import annotations

import logging
import os
import tempfile

import gradio as gr
import torch

from specviz.catalogue import CatalogueError
from specviz.engine import MAX_GAMMA, SettingsError
from specviz.loading import PairError
from specviz.engine.tally import Tally
from specviz.measures import measure
from specviz.prompts import DOMAINS, PROMPTS
from specviz.runner import PromptError
from specviz.trace import Trace
from specviz.ui import charts, texts
from specviz.ui.controller import PLAYBACK, RunRequest, inspector_choices, live_run, next_cursor, record
from specviz.ui.pairs import catalogue, choice_label, get_pair, is_loaded
from specviz.ui.palette import CSS
from specviz.ui.render import legend_html, narration, race_html, stream_html

log = logging.getLogger("specviz")
RUN_CONCURRENCY = int(os.environ.get("SPECVIZ_CONCURRENCY", "1"))  # runs share the processor; one at a time keeps timings honest
USER_ERRORS = (SettingsError, PromptError, PairError, CatalogueError, ValueError)

try:  # on a Hugging Face ZeroGPU Space, runs get a GPU; elsewhere this is a no-op
    import spaces

    on_gpu = spaces.GPU(duration=120)
except ImportError:

    def on_gpu(function):
        return function


def preset_choices() -> list[tuple[str, str]]:
    return [(f"{domain}: {prompt.splitlines()[0][:60]}", prompt) for domain in DOMAINS for prompt in PROMPTS[domain]]


def request_from(*values) -> RunRequest:
    return RunRequest(*values)


def user_error(error: Exception) -> gr.Error:
    if isinstance(error, torch.OutOfMemoryError):
        return gr.Error("The device ran out of memory: try a smaller pair, fewer new tokens or a shorter prompt.")
    if isinstance(error, USER_ERRORS):
        return gr.Error(str(error))
    log.exception("run failed")
    return gr.Error(f"Something went wrong: {type(error).__name__}: {error}")


def views(trace: Trace, shown: int, phase: str, request: RunRequest | None, charts_too: bool = True) -> dict:
    """Every view of a trace at a cursor: the pure renderers, gathered for the layout."""
    m = measure(trace, upto=shown)
    updates = {stream: stream_html(trace, shown, phase), summary: texts.summary_markdown(m, trace)}
    if shown:
        updates[narration_box] = narration(trace, shown - 1, phase)
    if charts_too:
        updates.update(
            {
                alpha_chart: charts.alpha_figure(Tally.running(trace.cycles[:shown])),
                tau_chart: charts.tau_figure(trace.cycles[:shown], m),
                speedup_chart: charts.speedup_figure(m),
            }
        )
    if trace.summary is not None and trace.baseline is not None and shown == len(trace.cycles):
        slowdown = request.slowdown if request else 1.0
        updates.update(
            {
                race: race_html(trace, slowdown),
                verdict: texts.verdict_markdown(measure(trace), trace.pair.get("name", "")),
                inspector: gr.update(choices=inspector_choices(trace), value=None),
            }
        )
    if trace.pair:
        updates[details] = texts.details_markdown(trace.pair)
    return updates


def _upto(trace: Trace, shown: int) -> Trace:
    return Trace(pair=trace.pair, prompt=trace.prompt, started=trace.started, cycles=trace.cycles[:shown])


# Cancelling a generator in Gradio cannot interrupt the worker thread that runs it, so each session
# has a run generation: Stop (or a newer run) moves it on, and a run checks between cycles that it
# is still the current one.
run_generation: dict[str, int] = {}


def request_stop(request: gr.Request) -> str:
    session = request.session_hash if request else ""
    run_generation[session] = run_generation.get(session, 0) + 1
    return "Stopped."


@on_gpu
def run_live(
    pair,
    prompt_text,
    gamma_value,
    temperature_value,
    top_k_value,
    top_p_value,
    max_new,
    seed_value,
    drafter_kind,
    adaptive_gamma,
    verification_mode,
    lenience_value,
    playback_speed,
    http_request: gr.Request,
):
    session = http_request.session_hash if http_request else ""
    generation = run_generation[session] = run_generation.get(session, 0) + 1
    try:
        request = request_from(
            pair,
            prompt_text,
            gamma_value,
            temperature_value,
            top_k_value,
            top_p_value,
            max_new,
            seed_value,
            drafter_kind,
            adaptive_gamma,
            verification_mode,
            lenience_value,
            playback_speed,
        )
        request.settings()
        if not is_loaded(request.pair):
            yield {status: f"Loading {request.pair} (first time only)…"}
        pair = get_pair(request.pair)
        where = (
            f"{pair.name} on {pair.device} ({str(pair.dtype).replace('torch.', '')}): target {pair.target.parameters / 1e6:.1f}M, "
            f"draft {pair.draft.parameters / 1e6:.1f}M parameters"
        )
        frames = 0
        for frame in live_run(request, should_stop=lambda: run_generation.get(session) != generation):
            frames += 1
            label = {
                "speculative": f"Speculative decoding… · {where}",
                "baseline": "Now the target alone, for the race…",
                "done": f"Done. · run {generation} · {where}",
            }[frame.stage]
            charts_too = frame.stage != "speculative" or request.slowdown > 1 or frames % 4 == 0
            yield {
                **views(frame.trace, frame.shown_cycles, frame.phase, request, charts_too),
                status: label,
                trace_state: frame.trace,
                cursor_state: (frame.shown_cycles, frame.phase),
                request_state: request,
            }
    except Exception as error:  # one user's bad input must not take the server down
        raise user_error(error) from None


@on_gpu
def step_once(trace: Trace | None, cursor, last_request: RunRequest | None, *values):
    try:
        request = request_from(*values)
        if trace is None or last_request != request or not trace.complete:
            trace = record(request)
            cursor = (0, "decide")
        position = next_cursor(trace, *cursor)
        if position is None:
            return {
                narration_box: "End of the run. Press **Step** again after changing anything to record a new run.",
                status: "Step mode: done.",
            }
        shown, phase = position
        return {
            **views(trace, shown, phase, request),
            trace_state: trace,
            cursor_state: position,
            request_state: request,
            status: f"Step mode: cycle {shown} of {len(trace.cycles)}, {phase}.",
        }
    except Exception as error:
        raise user_error(error) from None


def inspect(trace: Trace | None, choice: str | None):
    if not trace or not choice:
        return charts.inspector_figure(Trace(), 0, 0)
    cycle_index, position_index = (int(part) for part in choice.split(":"))
    return charts.inspector_figure(trace, cycle_index, position_index)


def export_trace(trace: Trace | None):
    if trace is None or not trace.complete:
        raise gr.Error("Nothing to export yet: run a prompt first.")
    handle = tempfile.NamedTemporaryFile("w", suffix=".specviz.json", prefix="trace-", delete=False)
    handle.write(trace.to_json())
    handle.close()
    return handle.name


def import_trace(path: str | None):
    if not path:
        return {}
    try:
        with open(path) as file:
            trace = Trace.from_json(file.read())
    except (OSError, ValueError) as error:
        raise gr.Error(f"Cannot replay that file: {error}") from None
    return {
        **views(trace, len(trace.cycles), "decide", None),
        trace_state: trace,
        cursor_state: (len(trace.cycles), "decide"),
        status: f"Replaying a trace recorded on {trace.pair.get('device', '?')} ({trace.pair.get('name', '?')}).",
        prompt: trace.prompt,
    }


def pair_defaults(name: str):
    pair = catalogue().get(name)
    return {gamma: pair.gamma, temperature: pair.temperature}


def theory_view(alpha: float, tau: float, gamma_value: int):
    from specviz import theory

    p = theory.Prediction.of(alpha, int(gamma_value), tau)
    text = (
        f"E = **{p.tokens_per_cycle:.2f}** tokens per target forward · speedup at γ = {int(gamma_value)}: **{p.speedup:.2f}×** · "
        f"best γ = **{p.best_gamma}** ({p.best_speedup:.2f}×) · "
        + ("α > τ: some γ pays off." if p.worth_it else "α ≤ τ: **no γ gives a speedup.**")
    )
    return charts.theory_figure(alpha, tau, int(gamma_value)), text


default_pair = catalogue().default
default_prompt = PROMPTS[catalogue().get(default_pair).domain][0]

with gr.Blocks(title="specviz: speculative decoding, run for real") as demo:
    trace_state = gr.State(None)
    cursor_state = gr.State((0, "decide"))
    request_state = gr.State(None)

    gr.Markdown(
        "# specviz · speculative decoding, run for real\n"
        "A small **draft** model proposes γ tokens; the big **target** checks them all in one pass. "
        "Watch every cycle, and measure whether it pays off for your pair and your prompt."
    )
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=300):
            pair_box = gr.Dropdown(
                [(choice_label(n), n) for n in catalogue().pairs], value=default_pair, label="Draft → target pair", elem_id="pair"
            )
            preset = gr.Dropdown(
                preset_choices(), label="Preset prompt (code, prose, repetitive, arithmetic)", value=None, elem_id="preset"
            )
            prompt = gr.Textbox(default_prompt, label="Prompt", lines=5, max_lines=14, elem_id="prompt")
            with gr.Row():
                run_button = gr.Button("Run", variant="primary", elem_id="run")
                step_button = gr.Button("Step", elem_id="step")
                stop_button = gr.Button("Stop", variant="stop", elem_id="stop")
            with gr.Accordion("Settings", open=True):
                gamma = gr.Slider(
                    1, MAX_GAMMA, value=catalogue().get(default_pair).gamma, step=1, label="γ: drafts per cycle", elem_id="gamma"
                )
                verification = gr.Radio(
                    ["exact", "greedy", "lenient"],
                    value="exact",
                    label="Verification",
                    info="exact: the min(1, p/q) test · greedy: argmax · lenient: accepts more, LOSSY",
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
                temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0 = greedy)", elem_id="temperature")
                max_new_tokens = gr.Slider(1, 256, value=64, step=1, label="Max new tokens", elem_id="max-new-tokens")
                playback = gr.Radio(
                    list(PLAYBACK), value="10× slower", label="Playback (timings are always the real ones)", elem_id="playback"
                )
            with gr.Accordion("More settings", open=False):
                drafter = gr.Radio(
                    [("draft model", "model"), ("prompt lookup (no model)", "lookup")],
                    value="model",
                    label="Drafter",
                    elem_id="drafter",
                )
                adaptive = gr.Checkbox(False, label="Adaptive γ (+2 after a full accept, −1 otherwise)", elem_id="adaptive")
                with gr.Row():
                    top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="top-p", elem_id="top-p")
                    top_k = gr.Number(0, label="top-k (0 = off)", precision=0, minimum=0, elem_id="top-k")
                seed = gr.Number(0, label="Seed", precision=0, minimum=0, elem_id="seed")
        with gr.Column(scale=2, min_width=340):
            status = gr.Markdown("Ready.", elem_id="status")
            gr.HTML(legend_html(), elem_id="legend")
            stream = gr.HTML(stream_html(Trace()), elem_id="stream")
            narration_box = gr.Markdown("", elem_id="narration", elem_classes=["sv-narration"])
            summary = gr.Markdown("", elem_id="summary")
            with gr.Tabs():
                with gr.Tab("Live charts"):
                    alpha_chart = gr.Plot(label="α", elem_id="alpha-chart")
                    tau_chart = gr.Plot(label="τ", elem_id="tau-chart")
                    speedup_chart = gr.Plot(label="speedup", elem_id="speedup-chart")
                with gr.Tab("Race"):
                    race = gr.HTML(race_html(Trace(), 1.0), elem_id="race")
                with gr.Tab("Token inspector"):
                    inspector = gr.Dropdown([], label="Pick a drafted token (or the target's own)", elem_id="inspector")
                    inspector_chart = gr.Plot(label="p, q and the residual", elem_id="inspector-chart")
                with gr.Tab("Theory"):
                    gr.Markdown(texts.FORMULAS, latex_delimiters=[{"left": "$", "right": "$", "display": False}])
                    with gr.Row():
                        theory_alpha = gr.Slider(0.0, 0.99, value=0.8, step=0.01, label="α")
                        theory_tau = gr.Slider(0.0, 1.0, value=0.05, step=0.005, label="τ")
                        theory_gamma = gr.Slider(1, 32, value=5, step=1, label="γ")
                    theory_numbers = gr.Markdown()
                    theory_chart = gr.Plot(elem_id="theory-chart")
                    verdict = gr.HTML(texts.verdict_markdown(None), elem_id="verdict")
                    gr.Markdown(texts.CLAIMS)
                with gr.Tab("Run details & traces"):
                    details = gr.Markdown("No pair loaded yet.", elem_id="details")
                    with gr.Row():
                        export_button = gr.Button("Export this run as a JSON trace", elem_id="export")
                        export_file = gr.File(label="trace", elem_id="export-file")
                    import_file = gr.File(label="Replay a trace (.json)", file_types=[".json"], type="filepath", elem_id="import")

    controls = [
        pair_box,
        prompt,
        gamma,
        temperature,
        top_k,
        top_p,
        max_new_tokens,
        seed,
        drafter,
        adaptive,
        verification,
        lenience,
        playback,
    ]
    run_outputs = [
        stream,
        summary,
        narration_box,
        alpha_chart,
        tau_chart,
        speedup_chart,
        race,
        verdict,
        inspector,
        details,
        status,
        trace_state,
        cursor_state,
        request_state,
    ]

    run_event = run_button.click(run_live, controls, run_outputs, concurrency_limit=RUN_CONCURRENCY, concurrency_id="decode")
    submit_event = prompt.submit(run_live, controls, run_outputs, concurrency_id="decode")
    stop_button.click(request_stop, None, status, cancels=[run_event, submit_event])
    step_button.click(step_once, [trace_state, cursor_state, request_state, *controls], run_outputs, concurrency_id="decode")
    preset.change(lambda value: value or gr.update(), preset, prompt)
    pair_box.change(pair_defaults, pair_box, [gamma, temperature])
    verification.change(lambda mode: gr.update(visible=mode == "lenient"), verification, lenience)
    inspector.change(inspect, [trace_state, inspector], inspector_chart)
    export_button.click(export_trace, trace_state, export_file)
    import_file.upload(import_trace, import_file, [*run_outputs, prompt])
    for slider in (theory_alpha, theory_tau, theory_gamma):
        slider.change(theory_view, [theory_alpha, theory_tau, theory_gamma], [theory_chart, theory_numbers])
    demo.load(theory_view, [theory_alpha, theory_tau, theory_gamma], [theory_chart, theory_numbers])


if __name__ == "__main__":
    demo.queue(default_concurrency_limit=8).launch(
        css=CSS,
        theme=gr.themes.Soft(primary_hue="emerald", neutral_hue="slate"),
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
    )
