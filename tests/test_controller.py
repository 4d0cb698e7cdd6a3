"""The app's controller without a browser: requests, live frames, step cursor, traces."""

import pytest

from specviz.engine import SettingsError
from specviz.runner import PromptError
from specviz.trace import Trace
from specviz.ui.controller import RunRequest, live_run, record

PROMPT = "def parse(text):\n"


def test_verification_modes_map_to_settings():
    assert RunRequest("pycode-distilled", PROMPT, temperature=0.9, verification="greedy").settings().sampling.greedy
    lenient = RunRequest("pycode-distilled", PROMPT, verification="lenient", lenience=0.3).settings()
    assert lenient.lossy and lenient.lenience == 0.3
    exact = RunRequest("pycode-distilled", PROMPT, verification="exact", lenience=0.3).settings()
    assert not exact.lossy, "the lenience slider only counts in lenient mode"


@pytest.mark.parametrize(
    "overrides,error",
    [
        ({"gamma": 0}, SettingsError),
        ({"gamma": 17}, SettingsError),
        ({"top_p": 0.0}, SettingsError),
        ({"prompt": ""}, PromptError),
    ],
)
def test_bad_requests_raise_clear_errors(overrides, error):
    with pytest.raises(error):
        list(live_run(RunRequest(**{"pair": "pycode-distilled", "prompt": PROMPT, **overrides})))


def test_live_run_streams_cycles_then_the_baseline():
    frames = list(live_run(RunRequest("pycode-distilled", PROMPT, max_new_tokens=24, playback="real pace")))
    stages = [frame.stage for frame in frames]
    assert stages[0] == "speculative" and stages[-1] == "done" and "baseline" in stages
    trace = frames[-1].trace
    assert trace.summary.new_tokens == trace.baseline.new_tokens == 24
    assert trace.summary.new_token_ids == trace.baseline.new_token_ids, "greedy: the race must end in identical texts"
    assert Trace.from_json(trace.to_json()) == trace


def test_slow_motion_shows_every_phase_without_changing_the_timings():
    frames = list(live_run(RunRequest("pycode-distilled", PROMPT, max_new_tokens=6, playback="10× slower")))
    phases = [frame.phase for frame in frames if frame.stage == "speculative" and frame.shown_cycles]
    assert phases[:3] == ["draft", "verify", "decide"]
    trace = frames[-1].trace
    assert trace.summary.wall_s == pytest.approx(
        trace.summary.prefill_s + sum(c.draft_s + c.verify_s + c.overhead_s for c in trace.cycles), rel=0.05
    )


def test_stop_ends_the_run_without_a_baseline():
    calls = iter(range(1000))
    frames = list(live_run(RunRequest("pycode-distilled", PROMPT, max_new_tokens=64), should_stop=lambda: next(calls) >= 3))
    trace = frames[-1].trace
    assert trace.summary.stop_reason == "stopped" and trace.baseline is None


def test_record_is_a_complete_trace():
    trace = record(RunRequest("pycode-distilled", PROMPT, max_new_tokens=10, playback="50× slower"))
    assert trace.complete and trace.baseline is not None
