"""What the page's events do. Each handler reads its inputs by name and answers with {component: value} updates.

app.py lays the page out and hands its components to Handlers as one namespace (`page`), so a handler writes
to a component by its name there; runs.py and views.py decide what a run shows, this module only routes it.
"""

from __future__ import annotations

import logging
import tempfile
import time
from types import SimpleNamespace

import gradio as gr

from specviz.analysis.hardware_cache import hardware_sentence, saved_batch_curve
from specviz.analysis.theory import Prediction
from specviz.checked import InputError
from specviz.run.trace import Trace
from specviz.run.trace_schema import read_trace_text
from specviz.serving import pair_cache
from specviz.ui import charts, runs, texts
from specviz.ui.choices import background_pairs, preset_choices
from specviz.ui.guard import in_sentences
from specviz.ui.lessons import Lesson
from specviz.ui.request import DEFAULT_PLAYBACK, RUN_FIELDS, THEORY_FIELDS, RunRequest, checked
from specviz.ui.sessions import Sessions
from specviz.ui.views import inspector_choices

log = logging.getLogger("specviz")
MEASURING_STREAM = '<div class="sv-stream" data-empty="1">Measuring… the tokens appear once both runs are timed.</div>'

try:  # on a Hugging Face ZeroGPU Space, runs get a GPU; elsewhere this is a no-op
    import spaces

    on_gpu = spaces.GPU(duration=120)
except ImportError:

    def on_gpu(function):
        return function


def session_of(http: gr.Request | None) -> str:
    return http.session_hash if http is not None and http.session_hash else "anonymous"


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
    lines = [line for name in pair_cache.catalogue().pairs if (line := hardware_line(name))]
    if not lines:
        return "No real-architecture timings saved on this machine yet: `python -m specviz hardware --pair NAME --save` adds one."
    return "**On this machine** (random-weight real architectures, timed by `python -m specviz hardware`):\n\n" + "\n".join(
        f"- {line}" for line in lines
    )


@in_sentences
def hardware_loaded() -> str:
    return hardware_lines()


@in_sentences
def preset_picked(value: object):
    """A preset into the prompt box; anything that is not one of the presets leaves the box as it is."""
    return value if value in {prompt for _, prompt in preset_choices()} else gr.update()


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
def theory_view(alpha: float, tau: float, gamma_value: int):
    alpha, tau, gamma_value = checked(dict(alpha=alpha, tau=tau, gamma_value=gamma_value), THEORY_FIELDS).values()
    p = Prediction.of(alpha, int(gamma_value), tau)
    text = (
        f"E = **{p.tokens_per_cycle:.2f}** tokens per target forward · speedup at γ = {int(gamma_value)}: **{p.speedup:.2f}×** · "
        f"best γ = **{p.best_gamma}** ({p.best_speedup:.2f}×) · "
        + ("α > τ: some γ pays off." if p.speedup_possible else "α ≤ τ: **no γ gives a speedup.**")
    )
    return charts.theory_figure(alpha, tau, int(gamma_value)), text


class Handlers:
    """The handlers that write to the page: `page` names its components (app.py builds it), `sessions` its runs."""

    def __init__(self, page: SimpleNamespace, sessions: Sessions, default_pair: str) -> None:
        self.page, self.sessions, self.default_pair = page, sessions, default_pair

    def page_updates(self, update: runs.Update) -> dict:
        """A runs.Update as {component: value}: its parts by name (shows), the live charts by key; parts left None are not sent."""
        page, frame = self.page, update.frame
        parts = vars(update) | (vars(frame) if frame is not None else {})
        out = (
            {page.stream: MEASURING_STREAM, page.narration_box: "", page.summary: "", page.shows["tree"]: ""}
            if update.clear
            else {}
        )
        out |= {component: parts[name] for name, component in page.shows.items() if parts.get(name) is not None}
        if update.lesson_chart is not None:
            out[page.lesson_chart] = gr.update(value=update.lesson_chart, visible=True)
        if frame is not None:
            out.update({page.live_charts[key]: figure for key, figure in (frame.charts or {}).items()})
            if frame.inspector is not None:
                out[page.inspector] = gr.update(choices=frame.inspector, value=None)
            if frame.deployment_charts is not None:
                batch, memory = frame.deployment_charts
                out[page.batch_chart] = gr.update(value=batch, visible=batch is not None)
                out[page.memory_chart] = gr.update(value=memory, visible=memory is not None)
        if update.trace is not None and update.trace.pair.known:
            out[page.details] = texts.details_markdown(update.trace.pair)
        return out

    @in_sentences
    def run_clicked(self, http: gr.Request, **values):
        request = RunRequest.from_values(values)  # a wrong value is answered before it retires this session's run
        ticket = self.sessions.start(session_of(http))
        device = pair_cache.device_of(request.pair)
        updates = runs.run_and_play(
            request, ticket, self.sessions, hardware_line(request.pair), saved_batches(request.pair, device)
        )
        yield from self.updates_until_stopped(updates, ticket)

    @in_sentences
    def step_clicked(self, trace: Trace | None, cursor, http: gr.Request, **values):
        request = RunRequest.from_values(values)
        ticket = self.sessions.start(session_of(http))
        yield from self.updates_until_stopped(
            runs.step(trace, tuple(cursor or (0, "decide")), request, ticket, self.sessions), ticket
        )

    def stopped_page(self) -> dict:
        return {self.page.status: "Stopped.", self.page.run_numbers: texts.run_numbers_html(None, "stopped")}

    @in_sentences
    def stop_clicked(self, http: gr.Request):
        self.sessions.stop(session_of(http))
        return self.stopped_page()

    def updates_until_stopped(self, updates, ticket):
        """The run's updates for the page; when Stop retired the run, its last word is the stopped page.

        Stop does not cancel the run's event (a cancelled stream can leave its last output on the page after
        Stop's own); the run's generator notices Stop within 50 ms, or one cycle while measuring, and ends here.
        """
        for update in updates:
            yield self.page_updates(update)
        if self.sessions.was_stopped(ticket):
            yield self.stopped_page()

    def lesson_clicked(self, lesson: Lesson):
        page = self.page

        @on_gpu
        @in_sentences
        def lesson_clicked(playback_choice: str, http: gr.Request):
            playback_choice = RUN_FIELDS["playback"].read(playback_choice)
            ticket = self.sessions.start(session_of(http))
            request = lesson.request
            yield {component: getattr(request, name) for name, component in page.run_inputs.items() if name != "playback"} | {
                page.lesson_chart: gr.update(visible=False)
            }
            yield from self.updates_until_stopped(runs.run_lesson(lesson, playback_choice, ticket, self.sessions), ticket)

        return lesson_clicked

    @in_sentences
    def page_loaded(self):
        """Say whether the default pair is ready, then how the real pair's background fetch goes; the page is usable throughout."""
        default_pair = self.default_pair
        if not pair_cache.is_loaded(default_pair):
            yield f"Loading the pair {default_pair}… (a few seconds, once per process; Run waits for it)"
            deadline = time.monotonic() + 300
            while not pair_cache.is_loaded(default_pair) and time.monotonic() < deadline:
                time.sleep(0.25)
        ready = "Ready. Press **Run**, or pick a lesson." if pair_cache.is_loaded(default_pair) else "Ready."
        yield ready
        compiling, deadline = pair_cache.status(default_pair), time.monotonic() + 900
        if compiling:  # the first start on an empty cache: runs are eager until the worker's packages load
            yield f"{ready} {compiling}"
            while pair_cache.status(default_pair) and time.monotonic() < deadline:
                time.sleep(0.5)
            yield f"{ready} The compiled step is loaded: runs from now on measure it."
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
    def import_trace(self, path: str | None, http: gr.Request):
        """Replay a shared trace: read within its size limit and checked field by field (run/trace_schema.py) first."""
        if not path:
            return
        try:
            trace = Trace.from_json(read_trace_text(path))
        except InputError as error:
            raise gr.Error(f"Cannot replay that file: {error}") from None
        ticket = self.sessions.start(session_of(http))
        yield {self.page.prompt: trace.prompt}
        yield from self.updates_until_stopped(runs.play(trace, DEFAULT_PLAYBACK, ticket, self.sessions), ticket)

    @in_sentences
    def pair_defaults(self, name: str):
        pair = pair_cache.catalogue().get(RUN_FIELDS["pair"].read(name))
        return {self.page.gamma: pair.start_gamma, self.page.temperature: pair.temperature, self.page.drafter: pair.drafter}
