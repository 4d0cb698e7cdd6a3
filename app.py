"""specviz: watch speculative decoding run for real. `python app.py` opens it on the bundled pair.

Layout and wiring only. The page serves before the models load: transformers and the pair are
loaded in the background (specviz.models.pair_cache), and handlers reach them on first use.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time

import gradio as gr

from specviz.analysis.hardware_cache import hardware_sentence, saved_batch_curve
from specviz.analysis.theory import Prediction
from specviz.checked import InputError
from specviz.drafting import drafter_choices
from specviz.engine.settings import MAX_GAMMA
from specviz.models import pair_cache
from specviz.prompts import DOMAINS, PROMPTS
from specviz.runner import MAX_PROMPT_CHARS
from specviz.trace import Trace
from specviz.trace_schema import MAX_TRACE_BYTES, read_trace_text
from specviz.ui import charts, runs, texts
from specviz.ui.deployment_view import deployment_html
from specviz.ui.guard import in_sentences
from specviz.ui.lessons import lessons
from specviz.ui.palette import CSS
from specviz.ui.render import legend_html, stream_html
from specviz.ui.request import (
    DEFAULT_PLAYBACK,
    MAX_NEW_TOKENS,
    MAX_TEMPERATURE,
    PLAYBACK,
    RUN_FIELDS,
    THEORY_FIELDS,
    RunRequest,
    checked,
)
from specviz.ui.score_panel import (
    CONTINUATION_TOKENS,
    HARDEST_HEADERS,
    MAX_SCORE_CHARS,
    MY_TEXT,
    PROMPT_SETS,
    SCORE_CSS,
    score_views,
)
from specviz.ui.sessions import Sessions
from specviz.ui.views import inspector_choices

log = logging.getLogger("specviz")

try:  # on a Hugging Face ZeroGPU Space, runs get a GPU; elsewhere this is a no-op
    import spaces

    on_gpu = spaces.GPU(duration=120)
except ImportError:

    def on_gpu(function):
        return function


def catalogue():
    return pair_cache.catalogue()


def preset_choices() -> list[tuple[str, str]]:
    return [(f"{domain}: {prompt.splitlines()[0][:60]}", prompt) for domain in DOMAINS for prompt in PROMPTS[domain]]


def preset_picked(value: object):
    """A preset into the prompt box; anything that is not one of the presets leaves the box as it is."""
    return value if value in {prompt for _, prompt in preset_choices()} else gr.update()


def choice_label(name: str) -> str:
    pair = catalogue().get(name)
    where = "bundled, offline" if pair.bundled else ("real model, fetched on first start" if pair.offline else "hub download")
    return f"{name} · {pair.description} ({where})"


def real_pairs() -> list[str]:
    """Pairs with a real pretrained target that reaches this machine without the hub: fetched in the background."""
    return [name for name, pair in catalogue().pairs.items() if pair.offline and not pair.bundled]


def background_pairs() -> list[str]:
    """What loads in the background after the default pair: the real pairs, unless SPECVIZ_BACKGROUND_PAIRS=0."""
    return real_pairs() if os.environ.get("SPECVIZ_BACKGROUND_PAIRS", "1") != "0" else []


sessions = Sessions()
MEASURING_STREAM = '<div class="sv-stream" data-empty="1">Measuring… the tokens appear once both runs are timed.</div>'
default_pair = catalogue().default
plain_pair = "pycode-plain" if "pycode-plain" in catalogue().pairs else default_pair
real_pair = next(iter(real_pairs()), None)
LESSONS = lessons(default_pair, plain_pair, real_pair, catalogue().get(real_pair).gamma if real_pair else 1)
default_request = LESSONS[0].request  # the app opens on the first lesson's scenario


def session_of(http: gr.Request | None) -> str:
    return http.session_hash if http is not None and http.session_hash else "anonymous"


def page_updates(update: runs.Update) -> dict:
    """A runs.Update as {component: value}: its parts by name (shows), the live charts by key; parts left None are not sent."""
    frame = update.frame
    parts = vars(update) | (vars(frame) if frame is not None else {})
    out = {stream: MEASURING_STREAM, narration_box: "", summary: ""} if update.clear else {}
    out |= {component: parts[name] for name, component in shows.items() if parts.get(name) is not None}
    if update.lesson_chart is not None:
        out[lesson_chart] = gr.update(value=update.lesson_chart, visible=True)
    if frame is not None:
        out.update({live_charts[key]: figure for key, figure in (frame.charts or {}).items()})
        if frame.inspector is not None:
            out[inspector] = gr.update(choices=frame.inspector, value=None)
        if frame.deployment_charts is not None:
            batch, memory = frame.deployment_charts
            out[batch_chart] = gr.update(value=batch, visible=batch is not None)
            out[memory_chart] = gr.update(value=memory, visible=memory is not None)
    if update.trace is not None and update.trace.pair:
        out[details] = texts.details_markdown(update.trace.pair)
    return out


def hardware_line(pair_name: str) -> str | None:
    """A sentence on this pair's real architectures on this machine, if `python -m specviz hardware --save` measured it."""
    try:
        return hardware_sentence(pair_name)
    except Exception:  # a missing or stale measurement must never break a run
        log.exception("reading the hardware measurements failed")
        return None


def saved_batches(pair_name: str, device: str | None) -> dict | None:
    """This pair's batch curve, if `python -m specviz hardware --batch ... --save` measured one on this kind of device."""
    try:
        return saved_batch_curve(pair_name, device or "cpu")
    except Exception:
        log.exception("reading the saved batch curve failed")
        return None


def hardware_lines() -> str:
    """Every catalogue pair measured on this machine by `python -m specviz hardware --save`, one line each."""
    lines = [line for name in catalogue().pairs if (line := hardware_line(name))]
    if not lines:
        return "No real-architecture timings saved on this machine yet: `python -m specviz hardware --pair NAME --save` adds one."
    return "**On this machine** (random-weight real architectures, timed by `python -m specviz hardware`):\n\n" + "\n".join(
        f"- {line}" for line in lines
    )


@on_gpu
@in_sentences
def run_clicked(http: gr.Request, **values):
    request = RunRequest.from_values(values)  # a wrong value is answered before it retires this session's run
    ticket = sessions.start(session_of(http))
    device = pair_cache.device_of(request.pair)
    updates = runs.run_and_play(request, ticket, sessions, hardware_line(request.pair), saved_batches(request.pair, device))
    yield from updates_until_stopped(updates, ticket)


@on_gpu
@in_sentences
def step_clicked(trace: Trace | None, cursor, http: gr.Request, **values):
    request = RunRequest.from_values(values)
    ticket = sessions.start(session_of(http))
    yield from updates_until_stopped(runs.step(trace, tuple(cursor or (0, "decide")), request, ticket, sessions), ticket)


def stopped_page() -> dict:
    return {status: "Stopped.", run_numbers: texts.run_numbers_html(None, "stopped")}


@in_sentences
def stop_clicked(http: gr.Request):
    sessions.stop(session_of(http))
    return stopped_page()


def updates_until_stopped(updates, ticket):
    """The run's updates for the page; when Stop retired the run, its last word is the stopped page.

    Stop does not cancel the run's event (a cancelled stream can leave its last output on the page after
    Stop's own); the run's generator notices Stop within 50 ms, or one cycle while measuring, and ends here.
    """
    for update in updates:
        yield page_updates(update)
    if sessions.was_stopped(ticket):
        yield stopped_page()


def lesson_handler(lesson):
    @on_gpu
    @in_sentences
    def lesson_clicked(playback_choice: str, http: gr.Request):
        playback_choice = RUN_FIELDS["playback"].read(playback_choice)
        ticket = sessions.start(session_of(http))
        request = lesson.request
        yield {component: getattr(request, name) for name, component in run_inputs.items() if name != "playback"} | {
            lesson_chart: gr.update(visible=False)
        }
        yield from updates_until_stopped(runs.run_lesson(lesson, playback_choice, ticket, sessions), ticket)

    return lesson_clicked


@in_sentences
def page_loaded():
    """Say whether the default pair is ready, then how the real pair's background fetch goes; the page is usable throughout."""
    if not pair_cache.is_loaded(default_pair):
        yield f"Loading the pair {default_pair}… (a few seconds, once per process; Run waits for it)"
        deadline = time.monotonic() + 300
        while not pair_cache.is_loaded(default_pair) and time.monotonic() < deadline:
            time.sleep(0.25)
    ready = "Ready. Press **Run**, or pick a lesson." if pair_cache.is_loaded(default_pair) else "Ready."
    yield ready
    for name in background_pairs():
        deadline, shown = time.monotonic() + 600, None
        while not pair_cache.is_loaded(name) and time.monotonic() < deadline:
            message = pair_cache.status(name)
            if message and message != shown:
                shown = message
                yield f"{ready} In the background: {message}"
                if "could not be loaded" in message:
                    break
            time.sleep(0.5)
        if pair_cache.is_loaded(name):
            yield f"{ready} The real pair **{name}** is ready too: pick it above, or its lessons."


@in_sentences
def hardware_loaded():
    return hardware_lines()


@in_sentences
def inspect(trace: Trace | None, choice: str | None):
    if not trace or choice not in {value for _, value in inspector_choices(trace.cycles)}:
        return charts.inspector_figure(Trace(), 0, 0)
    cycle_index, position_index = (int(part) for part in choice.split(":"))
    return charts.inspector_figure(trace, cycle_index, position_index)


@in_sentences
def export_trace(trace: Trace | None):
    if trace is None or not trace.complete:
        raise gr.Error("Nothing to export yet: run a prompt first.")
    handle = tempfile.NamedTemporaryFile("w", suffix=".specviz.json", prefix="trace-", delete=False)
    handle.write(trace.to_json())
    handle.close()
    return handle.name


@in_sentences
def import_trace(path: str | None, http: gr.Request):
    """Replay a shared trace: read within its size limit and checked field by field (specviz.trace_schema) first."""
    if not path:
        return
    try:
        trace = Trace.from_json(read_trace_text(path))
    except InputError as error:
        raise gr.Error(f"Cannot replay that file: {error}") from None
    ticket = sessions.start(session_of(http))
    yield {prompt: trace.prompt}
    yield from updates_until_stopped(runs.play(trace, DEFAULT_PLAYBACK, ticket, sessions), ticket)


@in_sentences
def pair_defaults(name: str):
    pair = catalogue().get(RUN_FIELDS["pair"].read(name))
    return {gamma: pair.gamma, temperature: pair.temperature, drafter: pair.drafter}


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
def score_clicked(pair_name: str, text: str, prompt_set: str, temperature: float, gamma: int, own: bool):
    views = score_views(pair_name, text, prompt_set, temperature, gamma, own)
    return {score_outputs[name]: value for name, value in views.items()}


with gr.Blocks(title="specviz: speculative decoding, run for real") as demo:
    trace_state = gr.State(None)
    cursor_state = gr.State((0, "decide"))

    gr.Markdown(
        "# specviz · speculative decoding, run for real\n"
        "A small **draft** model proposes γ tokens; the big **target** checks them all in one pass. "
        "specviz times both ways of decoding your prompt first, then plays the recording back cycle by cycle."
    )
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=300):
            pair_box = gr.Dropdown(
                [(choice_label(n), n) for n in catalogue().pairs],
                value=default_request.pair,
                label="Draft → target pair",
                elem_id="pair",
            )
            preset = gr.Dropdown(
                preset_choices(), label="Preset prompt (code, prose, repetitive, arithmetic)", value=None, elem_id="preset"
            )
            prompt = gr.Textbox(
                default_request.prompt,
                label=f"Prompt (up to {MAX_PROMPT_CHARS:,} characters)",
                lines=5,
                max_lines=14,
                elem_id="prompt",
            )
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
                gamma = gr.Slider(1, MAX_GAMMA, value=default_request.gamma, step=1, label="γ: drafts per cycle", elem_id="gamma")
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
                drafter = gr.Radio(drafter_choices(), value=default_request.drafter, label="Drafting strategy", elem_id="drafter")
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
                    gr.Markdown(
                        "### Score my draft\nHow often would this draft be accepted on *your* text? One teacher-forced pass "
                        "of each model gives Σ min(p, q) at every position (under greedy: whether both models' top tokens "
                        "agree); nothing is generated. τ and ν are timed on this machine."
                    )
                    with gr.Row():
                        score_text = gr.Textbox(
                            label=f"Text to score (up to {MAX_SCORE_CHARS:,} characters)",
                            lines=6,
                            placeholder="Paste text like what the target will write…",
                            scale=3,
                        )
                        with gr.Column(scale=1):
                            score_set = gr.Dropdown(PROMPT_SETS, value=MY_TEXT, label="or a prompt set")
                            score_temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="temperature (0 = greedy)")
                            score_gamma = gr.Slider(1, MAX_GAMMA, value=4, step=1, label="γ for the prediction")
                            score_own = gr.Checkbox(
                                False,
                                label=f"score what the target writes after it ({CONTINUATION_TOKENS} tokens): the α a run sees",
                            )
                            score_button = gr.Button("Score my draft", variant="primary")
                    score_summary = gr.Markdown()
                    score_strip = gr.HTML()
                    with gr.Row():
                        score_hardest = gr.Dataframe(
                            headers=HARDEST_HEADERS, label="hardest positions", interactive=False, wrap=True
                        )
                        score_curve = gr.Plot(label="predicted speedup over γ")
                with gr.Tab("Run details & traces"):
                    details = gr.Markdown("No pair loaded yet.", elem_id="details")
                    with gr.Row():
                        export_button = gr.Button("Export this run as a JSON trace", elem_id="export")
                        export_file = gr.File(label="trace", elem_id="export-file")
                    import_file = gr.File(label="Replay a trace (.json)", file_types=[".json"], type="filepath", elem_id="import")

    # Inputs reach the handlers by name (RunRequest's field names), never by position.
    run_inputs = {
        "pair": pair_box,
        "prompt": prompt,
        "gamma": gamma,
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
        "summary": summary,
        "narration": narration_box,
        "race_chart": race_chart,
        "race_numbers": race_numbers,
        "race": race,
        "verdict": verdict,
        "deployment": deployment_box,
    }
    page = {*shows.values(), *live_charts.values(), lesson_chart, inspector, batch_chart, memory_chart, details}
    playing = dict(
        concurrency_limit=None, concurrency_id="play", trigger_mode="multiple", show_progress="hidden"
    )  # the measuring slot, not the queue, serialises timings

    # The handlers get the values as sent and check them themselves (ui/request.py): one sentence naming the field and
    # its range, where Gradio's own checks would answer a wrong type with a generic error or repeat the value sent.
    as_sent = dict(preprocess=False)
    run_button.click(run_clicked, inputs_kwargs=run_inputs, outputs=page, **playing, **as_sent)
    step_button.click(step_clicked, [trace_state, cursor_state], page, inputs_kwargs=run_inputs, **playing, **as_sent)
    for button, lesson in lesson_buttons:
        button.click(lesson_handler(lesson), [playback], page | set(run_inputs.values()), **playing, **as_sent)
    stop_button.click(stop_clicked, None, {status, run_numbers}, queue=False)  # the runs end themselves: updates_until_stopped
    preset.change(preset_picked, preset, prompt, **as_sent)
    pair_box.input(pair_defaults, pair_box, [gamma, temperature, drafter], **as_sent)
    verification.change(lambda mode: gr.update(visible=mode == "lenient"), verification, lenience, **as_sent)
    inspector.change(inspect, [trace_state, inspector], inspector_chart, **as_sent)
    export_button.click(export_trace, trace_state, export_file)
    import_file.upload(import_trace, import_file, page | {prompt}, **playing)
    for slider in (theory_alpha, theory_tau, theory_gamma):
        slider.change(theory_view, [theory_alpha, theory_tau, theory_gamma], [theory_chart, theory_numbers], **as_sent)
    score_outputs = {"summary": score_summary, "strip": score_strip, "hardest": score_hardest, "curve": score_curve}
    score_button.click(
        score_clicked,
        [pair_box, score_text, score_set, score_temperature, score_gamma, score_own],
        set(score_outputs.values()),
        **as_sent,
    )
    demo.load(theory_view, [theory_alpha, theory_tau, theory_gamma], [theory_chart, theory_numbers], **as_sent)
    demo.load(page_loaded, None, status, concurrency_limit=None)
    demo.load(hardware_loaded, None, hardware_box)


if __name__ == "__main__":
    demo.queue(default_concurrency_limit=8).launch(
        css=CSS + SCORE_CSS,
        theme=gr.themes.Soft(primary_hue="emerald", neutral_hue="slate"),
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        max_file_size=MAX_TRACE_BYTES,  # the only upload is a trace
        prevent_thread_lock=True,
    )
    pair_cache.preload(default_pair, then=background_pairs())  # after the page serves: the default pair, then the real ones
    demo.block_thread()
