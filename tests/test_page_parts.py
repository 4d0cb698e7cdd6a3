"""The page's parts (specviz/ui/parts/): every part of a run's update lands on the component that shows it, Stop has
the last word, and each event's handler lives in the part that builds its components, none in app.py."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import gradio as gr
import pytest

from specviz.run.pair_info import PairInfo
from specviz.run.trace import Trace
from specviz.ui import charts, texts
from specviz.ui.parts import inspector, lessons, live_charts, race, status_line, stream, traces, verdict
from specviz.ui.parts.screen import Recorded, Screen
from specviz.ui.parts.stream import MEASURING_STREAM
from specviz.ui.runs import Update
from specviz.ui.sessions import Sessions
from specviz.ui.views import Frame

ROOT = Path(__file__).resolve().parents[1]
FIGURE, BATCH, MEMORY, LESSON_CHART = object(), object(), object(), object()  # figures, by identity
TRACE = Trace(pair=PairInfo(name="toy"), prompt="def f():")
EVERY_PART = Update(
    status="status",
    numbers="numbers",
    frame=Frame(
        stream="stream",
        summary="summary",
        narration="narration",
        charts={chart.key: FIGURE for chart in charts.LIVE_CHARTS},
        tree="tree",
        race="lanes",
        verdict="verdict",
        inspector=[("cycle 1 · draft 1", "0:0")],
        race_chart="race chart",
        race_numbers="race numbers",
        deployment="deployment",
        deployment_charts=(BATCH, None),
    ),
    trace=TRACE,
    cursor=(1, "draft"),
    lesson="lesson",
    lesson_chart=LESSON_CHART,
)
WHERE = {  # each field of an Update and of its Frame → the element that shows it (None: the session's state)
    "status": "status",
    "numbers": "run-numbers-box",
    "trace": None,
    "cursor": None,
    "clear": "stream",
    "lesson": "lesson",
    "lesson_chart": "lesson-chart",
    "frame": None,
    "stream": "stream",
    "summary": "summary",
    "narration": "narration",
    "charts": None,  # one element per live chart, by its key
    "tree": "tree",
    "race": "race-lanes",
    "verdict": "verdict",
    "inspector": "inspector",
    "race_chart": "race-chart",
    "race_numbers": "race-numbers",
    "deployment": "deployment",
    "deployment_charts": "batch-chart",
}


@pytest.fixture(scope="module")
def screen() -> Screen:
    """The parts that show a run, built as app.py builds them (their tabs aside)."""
    with gr.Blocks() as demo:
        recorded = Recorded.build()
        status = status_line.build(demo, "pycode-distilled")
        shown = [lessons.panel(), stream.build(), race.build(), live_charts.build(), inspector.build(recorded.trace)]
        shown += [verdict.build(), traces.build(recorded.trace)]
    return Screen(status, recorded, shown, Sessions())


def by_element(updates: dict) -> dict:
    return {component.elem_id or type(component).__name__: value for component, value in updates.items()}


def test_every_field_of_a_run_update_has_a_part_that_shows_it():
    fields = {field.name for cls in (Update, Frame) for field in dataclasses.fields(cls)}
    assert fields == set(WHERE), f"a new field needs a part that shows it, and a line here: {sorted(fields ^ set(WHERE))}"


def test_each_part_of_an_update_lands_on_its_component(screen):
    shown = screen.show(EVERY_PART)
    assert set(shown) == screen.outputs(), "an update that sets every part reaches every component a run writes to"
    seen = by_element(shown)
    for name in ("status", "numbers", "lesson"):
        assert seen[WHERE[name]] == getattr(EVERY_PART, name)
    for name in ("stream", "summary", "narration", "tree", "race", "verdict", "race_chart", "race_numbers", "deployment"):
        assert seen[WHERE[name]] == getattr(EVERY_PART.frame, name), f"the frame's {name} goes to #{WHERE[name]}"
    assert all(seen[chart.key] is FIGURE for chart in charts.LIVE_CHARTS), "each live chart gets its own figure"
    assert seen["inspector"] == gr.update(choices=EVERY_PART.frame.inspector, value=None), "new choices, none picked"
    assert seen["lesson-chart"] == gr.update(value=LESSON_CHART, visible=True)
    assert seen["batch-chart"] == gr.update(value=BATCH, visible=True)
    assert seen["memory-chart"] == gr.update(value=None, visible=False), "a chart with no figure is hidden"
    assert seen["details"] == texts.details_markdown(TRACE.pair)
    states = [value for component, value in shown.items() if isinstance(component, gr.State)]
    assert TRACE in states and (1, "draft") in states, "the session keeps the trace on screen and Step's cursor"


def test_an_empty_update_changes_nothing_and_a_new_measurement_clears_the_stream(screen):
    assert screen.show(Update()) == {}, "parts left None are not sent"
    cleared = by_element(screen.show(Update(clear=True)))
    assert cleared == {"stream": MEASURING_STREAM, "tree": "", "narration": "", "summary": ""}


def test_stop_has_the_last_word_on_the_status_line(screen):
    stopped = by_element(screen.stop(None))
    assert stopped == {"status": "Stopped.", "run-numbers-box": texts.run_numbers_html(None, "stopped")}
    ticket = screen.start(None)
    screen.stop(None)
    played = list(screen.play(iter([Update(status="Playing back…")]), ticket))
    assert by_element(played[-1]) == stopped, "a run that Stop retired ends on the stopped page"
    ticket = screen.start(None)
    newer = screen.start(None)
    played = list(screen.play(iter([Update(status="Playing back…")]), ticket))
    assert len(played) == 1, "a run retired by a newer run leaves the page to it"
    assert screen.sessions.is_current(newer)


def test_app_only_lays_the_parts_out():
    tree = ast.parse((ROOT / "app.py").read_text())
    listeners = {"click", "change", "input", "upload", "load", "submit", "select", "then"}
    wired = [
        node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in listeners
    ]
    assert not wired, f"app.py wires events itself ({wired}): a part's events belong beside its components"


def test_every_event_is_handled_in_the_part_that_builds_it_under_its_api_name():
    import app

    demo = app.build_page()
    modules = {function.name: getattr(function.fn, "__wrapped__", function.fn).__module__ for function in demo.fns.values()}
    assert all(module.startswith("specviz.ui.parts.") for module in modules.values()), modules
    api = {"run_clicked", "step_clicked", "stop_clicked", "lesson_clicked", "import_trace", "export_trace", "inspect"}
    api |= {"theory_view", "score_clicked", "preset_picked", "pair_defaults", "page_loaded", "hardware_loaded"}
    names = {dependency["api_name"] for dependency in demo.get_config_file()["dependencies"]}
    assert api <= names, f"scripts and tests/test_untrusted_api.py call these endpoints by name: {sorted(api - names)}"
