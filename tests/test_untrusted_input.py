"""A shared trace, a pasted text and a script's request are untrusted: each wrong value is one sentence naming the field
and its range, strings are shown as text, playback time is bounded, and no exception text reaches a user (issue 29).

The same cases through a served app's API are in test_untrusted_api.py, and in Chromium in test_ui_browser.py.
"""

from __future__ import annotations

import json
import random

import gradio as gr
import pytest

from specviz.checked import InputError
from specviz.run.runner import check_prompt_text
from specviz.run.trace import Trace
from specviz.run.trace_schema import MAX_TRACE_BYTES, read_trace_text
from specviz.ui import charts, texts
from specviz.ui.deployment_view import trace_report
from specviz.ui.guard import SOMETHING_WENT_WRONG, in_sentences
from specviz.ui.playback import recorded_s, timeline
from specviz.ui.render import narration, stream_html
from specviz.ui.request import MAX_PLAYBACK_S, PLAYBACK, THEORY_FIELDS, RunRequest, checked, slowdown
from specviz.ui.runs import where
from specviz.ui.score_panel import score_views
from specviz.ui.views import Recording, frame, inspector_choices
from tests.hostile import BROKEN_FILES, BROKEN_TRACES, MARKUP, broken_trace, markup_trace


@pytest.mark.parametrize("name", BROKEN_TRACES)
def test_a_broken_trace_is_one_sentence_naming_the_field(name):
    with pytest.raises(InputError) as caught:
        Trace.from_json(broken_trace(name).decode())
    said = str(caught.value)
    assert BROKEN_TRACES[name][1] in said, f"{name}: expected {BROKEN_TRACES[name][1]!r} in the answer, got {said!r}"
    assert "<" not in said and "Error" not in said, f"the sentence repeats no text of the file and names no exception: {said!r}"


@pytest.mark.parametrize("name", BROKEN_FILES)
def test_a_file_that_is_no_trace_is_one_sentence(name, tmp_path):
    path = tmp_path / "trace.json"
    path.write_bytes(BROKEN_FILES[name][0])
    with pytest.raises(InputError) as caught:
        Trace.from_json(read_trace_text(path))
    assert BROKEN_FILES[name][1] in str(caught.value), f"{name}: got {caught.value!r}"


def test_a_file_over_the_size_limit_is_not_read(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b" " * (MAX_TRACE_BYTES + 1))
    with pytest.raises(InputError, match="larger than 8 MiB"):
        read_trace_text(path)


def every_view(trace: Trace, charted: bool = True) -> list[str]:
    """Everything the page shows of a trace during and after playback, as text (charted: every chart too, slower)."""
    recording = Recording.of(trace)
    shown = [where(trace), texts.details_markdown(trace.pair), stream_html(trace)]
    for n in range(1, len(trace.cycles) + 1):
        shown += [narration(trace, n - 1, phase) for phase in ("draft", "verify", "decide")]
        shown.append(frame(recording, n, "decide", 1.0, False).summary)
    last = frame(recording, len(trace.cycles), "decide", 1.0, charted, saved_batches=None)
    shown += [last.verdict or "", last.deployment or "", last.race or "", last.stream]
    choices = inspector_choices(trace.cycles)  # their labels go to a Dropdown, which shows them as text
    for _, value in choices if charted else choices[:2]:
        charts.inspector_figure(trace, *(int(part) for part in value.split(":")))
    trace_report(trace, recording.final)
    return shown


def test_strings_from_a_trace_are_shown_as_text_never_as_markup():
    trace = Trace.from_json(json.dumps(markup_trace()))
    assert trace.pair.name == MARKUP, "the trace keeps its strings as they are: escaping is the views' job"
    for view in every_view(trace):
        assert "<img" not in view and "<b>b" not in view, f"markup from the file reached the page: {view[:300]!r}"
    markdown = where(trace) + texts.details_markdown(trace.pair) + narration(trace, 0, "draft")
    assert "&lt;img src=x onerror=alert\\(1\\)&gt; \\*\\*bold\\*\\*" in markdown, "Markdown views escape HTML and Markdown"


def test_any_change_to_a_trace_is_refused_in_a_sentence_or_plays_without_an_error():
    """200 random changes of one field (huge, negative, wrong type, empty): the schema refuses or every view renders
    (every twentieth with every chart: plotly is slow)."""
    good, rng = markup_trace(), random.Random(29)
    replacements = [10**30, -1, 1e300, float("nan"), "text", None, [], {}, [1, 2], True, 0, 2.5, 10**6]
    refused = 0
    for attempt in range(200):
        raw = json.loads(json.dumps(good))
        node, path = raw, []
        while isinstance(node, dict | list) and node and (not path or rng.random() < 0.75):
            key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
            if not isinstance(node[key], dict | list):
                break
            node, path = node[key], [*path, key]
        key = rng.choice(list(node)) if isinstance(node, dict) and node else (rng.randrange(len(node)) if node else None)
        if key is None:
            continue
        node[key] = rng.choice(replacements)
        try:
            trace = Trace.from_json(json.dumps(raw))
        except InputError:
            refused += 1
            continue
        every_view(
            trace, charted=attempt % 20 == 0
        )  # any exception fails the test, with the change that caused it in the traceback
    assert refused > 60, f"most changes should be refused by the schema; only {refused} of 200 were"


def test_playback_is_bounded_whatever_the_timings():
    raw = markup_trace()
    for cycle in raw["cycles"]:
        cycle["draft_s"] = cycle["verify_s"] = cycle["overhead_s"] = 86_400.0  # the schema's largest duration
    trace = Trace.from_json(json.dumps(raw))
    for pace in PLAYBACK:
        factor = slowdown(pace, recorded_s(trace))
        assert timeline(trace, factor)[-1][0] <= MAX_PLAYBACK_S + 1e-6, f"{pace}: playback must end within {MAX_PLAYBACK_S} s"
    assert slowdown("50× slower", 0.4) == 50.0, "a short run still plays at the chosen pace"


RUN = {"pair": "pycode-distilled", "prompt": "def f(x):"}
WRONG_RUN_VALUES = [  # (field, value, what the answer must say)
    ("prompt", None, "Prompt must be text of at most 20,000 characters (got nothing)."),
    ("prompt", ["a"], "Prompt must be text of at most 20,000 characters (got a list of 1 items)."),
    ("prompt", "x" * 20_001, "Prompt is 20,001 characters; the limit is 20,000."),
    ("gamma", "abc", "γ (drafts per cycle) must be a whole number from 1 to 16 (got text)."),
    ("gamma", 2.5, "γ (drafts per cycle) must be a whole number from 1 to 16 (got 2.5)."),
    ("gamma", 10**400, "γ (drafts per cycle) must be a whole number from 1 to 16 (got a whole number of about 401 digits)."),
    ("gamma", True, "γ (drafts per cycle) must be a whole number from 1 to 16 (got true)."),
    ("gamma", None, "γ (drafts per cycle) must be a whole number from 1 to 16 (got nothing)."),
    ("seed", "x", "Seed must be a whole number from 0 to 9,223,372,036,854,775,807 (got text)."),
    ("seed", -1, "Seed must be a whole number from 0 to 9,223,372,036,854,775,807 (got -1)."),
    ("temperature", float("nan"), "Temperature must be a number from 0 to 2 (got nan)."),
    ("temperature", 10**400, "Temperature must be a number from 0 to 2"),
    ("top_p", 0, "top-p must be a number above 0 and at most 1 (got 0)."),
    ("max_new_tokens", 10**9, "Max new tokens must be a whole number from 1 to 256 (got 1000000000)."),
    ("pair", "../../etc/passwd", "Pair must be one of 'pycode-distilled'"),
    ("drafter", {"a": 1}, "Drafting strategy must be one of 'model'"),
    ("playback", "<img src=x>", "Playback must be one of 'real pace'"),
]


@pytest.mark.parametrize(("field", "value", "said"), WRONG_RUN_VALUES, ids=[f"{f}={str(v)[:12]}" for f, v, _ in WRONG_RUN_VALUES])
def test_a_wrong_run_value_is_one_sentence_naming_the_field_and_its_range(field, value, said):
    with pytest.raises(InputError) as caught:
        RunRequest.from_values(RUN | {field: value})
    assert said in str(caught.value)
    assert "<img" not in str(caught.value), "the sentence never repeats text it was sent"


def test_a_request_without_its_prompt_and_a_request_that_is_no_record_are_sentences():
    with pytest.raises(InputError, match="The request is missing Prompt."):
        RunRequest.from_values({"pair": "pycode-distilled"})
    with pytest.raises(InputError, match="The request must name its fields."):
        RunRequest.from_values(["pycode-distilled", "def f(x):"])


def test_theory_values_are_checked():
    with pytest.raises(InputError, match=r"α must be a number from 0 to 0.99 \(got text\)."):
        checked({"alpha": "abc", "tau": 0.05, "gamma_value": 5}, THEORY_FIELDS)
    assert checked({"alpha": 0.8, "tau": 0.05, "gamma_value": 5.0}, THEORY_FIELDS)["gamma_value"] == 5


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"text": "x" * 200_000}, "Text to score is 200,000 characters; the limit is 20,000."),
        ({"prompt_set": "/etc/passwd"}, "Prompt set must be one of"),
        ({"gamma": "abc"}, "γ for the prediction must be a whole number from 1 to 16 (got text)."),
        ({"own_continuation": None}, "must be true or false (got nothing)."),
    ],
)
def test_scoring_answers_a_wrong_value_before_any_model_runs(changes, said):
    values = dict(pair_name="pycode-distilled", text="x = 1", prompt_set="my text (below)", temperature=0.0, gamma=4)
    views = score_views(**(values | {"own_continuation": False} | changes))
    assert said in views["summary"] and views["strip"] == "", f"expected {said!r}, got {views['summary']!r}"


def test_the_last_resort_handler_logs_and_shows_a_plain_sentence(caplog):
    def broken_function():
        raise KeyError("secret internal detail")

    def broken_generator():
        yield 1
        raise AttributeError("'int' object has no attribute 'get'")

    for handler in (in_sentences(broken_function), lambda: list(in_sentences(broken_generator)())):
        with pytest.raises(gr.Error) as caught:
            handler()
        assert caught.value.message == SOMETHING_WENT_WRONG, "no exception text reaches the user"
    assert "secret internal detail" in caplog.text, "the server's log keeps the traceback"
    with pytest.raises(gr.Error, match="γ"):
        in_sentences(lambda: RunRequest.from_values(RUN | {"gamma": 0}))()


def test_a_refused_input_is_one_line_in_the_log_not_a_traceback(caplog):
    def refuse_an_empty_prompt():
        check_prompt_text("   ")

    def refuse_in_gradios_words():
        raise gr.Error("Nothing to export yet: run a prompt first.")

    for handler in (refuse_an_empty_prompt, refuse_in_gradios_words):
        caplog.clear()
        with pytest.raises(gr.Error) as caught:
            in_sentences(handler)()
        assert caught.value.print_exception is False, "gradio prints the traceback of a gr.Error unless told not to"
        lines = [record for record in caplog.records if record.name == "specviz"]
        assert len(lines) == 1 and lines[0].exc_info is None, f"one line, no traceback: {caplog.text!r}"
        assert caught.value.message in lines[0].getMessage(), "the line says what the user was told"


def test_an_unexpected_error_leaves_one_traceback_in_the_log(caplog):
    def broken():
        raise KeyError("secret internal detail")

    with pytest.raises(gr.Error) as caught:
        in_sentences(broken)()
    assert caught.value.print_exception is False, "the guard logged the traceback; gradio must not print it again"
    assert [record.exc_info is not None for record in caplog.records if record.name == "specviz"] == [True]
