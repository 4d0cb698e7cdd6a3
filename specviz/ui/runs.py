"""A Run from button press to last frame: check the input, measure in the shared slot, then play the recording back.

Nothing of ours runs while the models are timed: the measurement happens first, with no
rendering and no yields to the page, and playback only reads the recorded trace.
"""

from __future__ import annotations

import html
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, replace

from specviz.analysis.readings import readings_of_trace
from specviz.run.chosen_setting import ChosenSetting
from specviz.run.runner import check_prompt_text
from specviz.run.trace import Trace
from specviz.serving import compile_worker, pair_cache, recorder
from specviz.serving.measuring_slot import background_now, slot_is_busy
from specviz.ui import texts
from specviz.ui.as_text import markdown_text
from specviz.ui.lessons import Lesson, Measured, setting_note, slower_reason
from specviz.ui.playback import next_cursor, playback, recorded_s
from specviz.ui.render import Phase
from specviz.ui.request import MAX_PLAYBACK_S, SLOW_MOTION, RunRequest, slowdown
from specviz.ui.sessions import Sessions, Ticket
from specviz.ui.views import Frame, Recording, frame

CHART_EVERY_S = 2.0  # playback redraws the plotly charts at most this often (and at the end): each redraw of the four
# stalled Chromium's main thread 0.17–0.3 s on a busy 2-core machine, and a click waits for that
FIRST_CHARTS_S = 0.5  # …the first time this long after playback starts, once the first tokens are on the page


@dataclass
class Update:
    """What one step of a run changes on the page; None leaves a part as it is."""

    status: str | None = None
    numbers: str | None = None  # the #run-numbers element
    frame: Frame | None = None
    trace: Trace | None = None
    cursor: tuple[int, Phase] | None = None
    clear: bool = False  # empty the stream and its texts (a new measurement began)
    lesson: str | None = None  # the lesson panel's text (HTML)
    lesson_chart: object | None = None  # a figure for the lesson, when it has one


def loading_updates(name: str, ticket: Ticket) -> Iterator[Update]:
    """While the pair is fetched (a first use: a progress bar in bytes), converted and loaded in a background thread,
    what it is doing, twice a second; other visitors are served meanwhile. A Stop leaves the load going on."""
    loading = pair_cache.load_in_background(name)
    shown = None
    while True:
        said = pair_cache.status(name) or f"Loading the pair {name}… (once per process)"
        fraction = pair_cache.fetched_fraction(name)
        if (said, fraction) != shown:
            shown = (said, fraction)
            yield Update(status=said, numbers=texts.loading_html(said, fraction, ticket.number))
        if not loading.is_alive():
            failure = pair_cache.load_error(name)
            if failure is not None:
                raise failure  # the load's own sentence; never a second fetch in this thread
            return
        loading.join(LOADING_POLL_S)


LOADING_POLL_S = 0.5


def measure_request(request: RunRequest, ticket: Ticket, sessions: Sessions) -> Iterator[Update | Trace]:
    """Yield status updates while the pair loads, `γ auto` is measured and the slot is busy, then the measured trace
    (last); nothing more where the run was retired meanwhile."""
    settings = request.settings()
    check_prompt_text(request.prompt)
    if not pair_cache.is_loaded(request.pair):
        yield from loading_updates(request.pair, ticket)
    pair = pair_cache.get_pair(request.pair)
    if request.auto:
        chosen = yield from choosing_updates(pair, request.drafter, settings, ticket, sessions)
        if not sessions.is_current(ticket):
            return
        if chosen is not None:
            settings, chosen = chosen.applied(settings), replace(chosen, auto=True)
    else:
        chosen = gamma_auto().known(pair, request.drafter, settings.sampling)  # to tell whether ν moved since
    yield from background_updates(ticket, sessions)
    if slot_is_busy():
        yield Update(
            status="Waiting for another session's measurement…", numbers=texts.run_numbers_html(None, "waiting", ticket.number)
        )
    yield Update(
        status="Measuring the speculative run…, then the target alone…",
        numbers=texts.run_numbers_html(None, "measuring", ticket.number),
        clear=True,
    )
    yield recorder.measure_run(
        pair,
        request.prompt,
        settings,
        request.drafter,
        should_stop=lambda: not sessions.is_current(ticket),
        settle_s=recorder.SETTLE_S,
        setting=chosen,
    )


def gamma_auto():
    """γ auto's module (deployment/gamma_auto.py), imported once a pair is loaded: it loads torch, which the page's
    first load does without."""
    from specviz.deployment import gamma_auto as module

    return module


def background_updates(ticket: Ticket, sessions: Sessions, poll_s: float = LOADING_POLL_S) -> Iterator[Update]:
    """While this server works in the background on the cores a Run is timed on (loading a pair, or its compile worker
    building a native kernel), say so and wait: a Run is never timed beside it (serving/measuring_slot.py and
    compile_worker.paused wait too; this only tells the user why)."""
    shown = ""
    give_up_on_build = time.monotonic() + compile_worker.BUILD_WAIT_MAX_S
    while (doing := background_now() or building_now(give_up_on_build)) and sessions.is_current(ticket):
        if doing != shown:
            shown = doing
            yield Update(
                status=f"Waiting for this server to finish {doing} in the background: a Run is never timed beside it…",
                numbers=texts.run_numbers_html(None, "waiting", ticket.number),
            )
        time.sleep(poll_s)


def building_now(give_up_at: float) -> str:
    """What the compile worker does that a Run must not be timed beside (a kernel's build, which it may not be stopped
    in); "" when nothing, or once `give_up_at` (time.monotonic()) has passed (the Run is then timed and flagged)."""
    if time.monotonic() < give_up_at and compile_worker.building():
        return "building a 4-bit kernel for this CPU (once, about 25 s)"
    return ""


def choosing_updates(
    pair, drafter: str, settings, ticket: Ticket, sessions: Sessions
) -> Generator[Update, None, ChosenSetting | None]:
    """`γ auto`: the choice kept for this machine and pair, or measured now in the background (once) while the Run
    says so; None where measuring it failed (the Run drafts the γ on the page, and says so)."""
    auto = gamma_auto()
    chosen = auto.known(pair, drafter, settings.sampling)
    if chosen is not None:
        return chosen
    measuring = auto.prepare(pair, drafter, settings.sampling, timed=recorder.timed_quietly, own_work=recorder.own_work)
    said = (
        f"Measuring which γ pays for {pair.name} on this machine: verify passes of 1–8 rows and a short calibration "
        "run (once per machine and pair, then kept in specviz's cache)…"
    )
    yield Update(status=said, numbers=texts.run_numbers_html(None, "choosing", ticket.number))
    while measuring is not None and measuring.is_alive() and sessions.is_current(ticket):
        measuring.join(LOADING_POLL_S)
    chosen = auto.result(pair, drafter, settings.sampling)
    if chosen is None and sessions.is_current(ticket):
        yield Update(status=f"Could not measure which γ pays here; drafting γ = {settings.gamma} as set.")
    return chosen


def prepare_auto_setting(request: RunRequest) -> None:
    """Where the request drafts γ auto and its pair is loaded, measure the choice in the background now (once per
    machine and pair), so that its first Run need not wait for it."""
    if request.auto and pair_cache.is_loaded(request.pair):
        gamma_auto().prepare(
            pair_cache.get_pair(request.pair),
            request.drafter,
            request.settings().sampling,
            timed=recorder.timed_quietly,
            own_work=recorder.own_work,
        )


def where(trace: Trace) -> str:
    """The pair, device and sizes, for the status line (Markdown): every string as text, as a shared trace may hold any."""
    info = trace.pair
    if not info.known:
        return ""
    if not (info.device and info.dtype):
        return markdown_text(info.name)
    return (
        f"{markdown_text(info.name)} on {markdown_text(info.device)} ({markdown_text(info.dtype)}): "
        f"target {info.target_parameters / 1e6:.1f}M, draft {info.draft_parameters / 1e6:.1f}M parameters"
    )


def run_and_play(
    request: RunRequest,
    ticket: Ticket,
    sessions: Sessions,
    hardware_line: str | None = None,
    saved_batches: dict | None = None,
) -> Iterator[Update]:
    """The whole Run: measure, then play back at the chosen pace; stops quietly when a newer run or Stop retires it."""
    trace = None
    for item in measure_request(request, ticket, sessions):
        if isinstance(item, Trace):
            trace = item
        elif sessions.is_current(ticket):
            yield item
    if not sessions.is_current(ticket):
        return
    yield from play(trace, request.playback, ticket, sessions, hardware_line, saved_batches)


def play(
    trace: Trace,
    pace: str,
    ticket: Ticket,
    sessions: Sessions,
    hardware_line: str | None = None,
    saved_batches: dict | None = None,
) -> Iterator[Update]:
    """Animate a recorded trace at the chosen pace (the page's Playback choice): frames at its measured pace × the
    slowdown, charts every CHART_EVERY_S, everything at the end."""
    keep_going = lambda: sessions.is_current(ticket)  # noqa: E731
    recording = Recording.of(trace)
    if trace.summary is None or trace.summary.stop_reason == "stopped" or trace.baseline is None:
        yield Update(status="Stopped.", numbers=texts.run_numbers_html(None, "stopped", ticket.number), trace=trace)
        return
    factor = slowdown(pace, recorded_s(trace))
    numbers = texts.run_numbers_html(recording.final, "playing", ticket.number, trace)
    said = "real pace" if factor == 1 else f"{factor:.3g}× slower than real"
    if factor < 1:
        said = f"{1 / factor:.3g}× faster than real, to fit the {MAX_PLAYBACK_S:g} s limit on a playback"
    said = f"in {pace}, {said}" if pace == SLOW_MOTION else f"at {said}"
    yield Update(
        status=f"Playing back the measured run {said}… · {where(trace)}",
        numbers=numbers,
        trace=trace,
        frame=frame(recording, 0, "decide", factor, False),
    )
    next_charts = time.perf_counter() + FIRST_CHARTS_S
    for shown, phase in playback(trace, factor, keep_going, hold=slot_is_busy):
        with_charts = time.perf_counter() >= next_charts
        if with_charts:
            next_charts = time.perf_counter() + CHART_EVERY_S
        yield Update(frame=frame(recording, shown, phase, factor, with_charts, hardware_line))
    if not keep_going():
        return
    yield Update(
        status=f"Done. · run {ticket.number} · {where(trace)}",
        numbers=texts.run_numbers_html(recording.final, "done", ticket.number, trace),
        frame=frame(recording, len(trace.cycles), "decide", factor, True, hardware_line, saved_batches),
        cursor=(0, "decide"),  # Step now walks this run from cycle 1
    )


def step(
    trace: Trace | None, cursor: tuple[int, Phase], request: RunRequest, ticket: Ticket, sessions: Sessions
) -> Iterator[Update]:
    """One phase forward through the run on screen; with nothing recorded, record first; after the end, from cycle 1 again."""
    if trace is None or not trace.complete or trace.baseline is None:
        trace = None
        for item in measure_request(request, ticket, sessions):
            if isinstance(item, Trace):
                trace = item
            else:
                yield item
        cursor = (0, "decide")
        if trace is None:  # retired while it waited
            return
        if trace.baseline is None:
            yield Update(status="Stopped.", numbers=texts.run_numbers_html(None, "stopped", ticket.number))
            return
    position = next_cursor(trace, *cursor) or next_cursor(trace, 0, "decide")
    if position is None:
        yield Update(status="Step mode: this run has no cycles.")
        return
    shown, phase = position
    recording = Recording.of(trace)
    restarted = " (from the start again)" if cursor[0] == len(trace.cycles) and cursor[1] == "decide" else ""
    yield Update(
        status=f"Step mode: cycle {shown} of {len(trace.cycles)}, {phase}{restarted}.",
        numbers=texts.run_numbers_html(recording.final, "done", ticket.number, trace),
        frame=frame(recording, shown, phase, 1.0, True),
        trace=trace,
        cursor=position,
    )


def run_lesson(lesson: Lesson, playback_choice: str, ticket: Ticket, sessions: Sessions) -> Iterator[Update]:
    """Run the lesson's scenario like a Run, measure its comparison runs, then explain it from the numbers."""
    request = replace(lesson.request, playback=playback_choice)
    header = f"<h4>{html.escape(lesson.title)}</h4>"
    yield Update(lesson=header + "<p>Measuring the scenario, then playing it back…</p>")
    trace = None
    for update in run_and_play(request, ticket, sessions):
        trace = update.trace or trace
        yield update
    if trace is None or trace.baseline is None or not sessions.is_current(ticket):
        return
    chosen = trace.setting
    if lesson.advises and chosen is None:
        yield Update(lesson=header + "<p>Measuring which draft length pays for this pair here (a few seconds, once)…</p>")
        pair = pair_cache.get_pair(request.pair)
        chosen = yield from choosing_updates(pair, request.drafter, request.settings(), ticket, sessions)
        if not sessions.is_current(ticket):
            return
        # the numbers bar said "choosing" meanwhile: it shows the lesson's measured run again
        yield Update(numbers=texts.run_numbers_html(readings_of_trace(trace), "done", ticket.number, trace))
    advice = chosen.sentence if lesson.advises and chosen is not None and not request.auto else None  # γ auto: said once
    curve = dict(chosen.verify_costs) if lesson.advises and chosen is not None else None
    main = Measured("this run", request, trace, readings_of_trace(trace), advice, curve)
    compared = []
    for n, (label, extra) in enumerate(lesson.extra, start=1):
        yield Update(lesson=header + f"<p>Measuring the comparison: {html.escape(label)} ({n} of {len(lesson.extra)})…</p>")
        pair = pair_cache.get_pair(extra.pair)
        extra_trace = recorder.measure_run(
            pair,
            extra.prompt,
            extra.settings(),
            extra.drafter,
            lambda: not sessions.is_current(ticket),
            settle_s=recorder.SETTLE_S,
        )
        if not sessions.is_current(ticket) or extra_trace.baseline is None:
            return
        compared.append(Measured(label, extra, extra_trace, readings_of_trace(extra_trace)))
    chart = lesson.chart(main, compared) if lesson.chart else None
    why = slower_reason(main) or ""  # a lesson whose run read slower says why first, in measured terms
    yield Update(
        lesson=header + why + setting_note(lesson, main) + lesson.explain(main, compared),
        lesson_chart=chart,
        status=f"Lesson done. · run {ticket.number}",
    )
