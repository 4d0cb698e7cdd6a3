"""Traces survive a JSON round trip, and the views are pure functions of them."""

import pytest

from specviz.analysis.readings import TAU_OVER_STEP, readings_of_trace
from specviz.engine.tally import Tally
from specviz.run.trace import Trace
from specviz.ui import charts
from specviz.ui.playback import next_cursor
from specviz.ui.render import narration, race_html, stream_html
from specviz.ui.views import inspector_choices
from tests.tiny import record_tiny_trace


@pytest.fixture(scope="module")
def trace() -> Trace:
    return record_tiny_trace()


def test_json_round_trip_is_lossless(trace):
    again = Trace.from_json(trace.to_json())
    assert again == trace


def test_a_block_run_and_its_same_drafts_verdicts_round_trip():
    block = record_tiny_trace(verification="block")
    assert block.started.verification == "block" and any(cycle.verdicts for cycle in block.cycles)
    assert Trace.from_json(block.to_json()) == block


@pytest.mark.parametrize("text", ["{}", "[1, 2]", "not json", '{"format": "specviz-trace/1", "started": {"mode": 1}}'])
def test_bad_trace_files_are_rejected(text):
    with pytest.raises(ValueError):
        Trace.from_json(text)


def test_stream_shows_every_token_with_its_state(trace):
    html = stream_html(trace)
    n_tokens = len(trace.started.prompt_token_ids) + sum(len(c.positions) + 1 for c in trace.cycles)
    assert html.count("data-status=") == n_tokens
    assert html.count('data-status="accepted"') == sum(c.n_accepted for c in trace.cycles)
    assert html.count('data-status="bonus"') == sum(c.bonus_token_id is not None for c in trace.cycles)
    drafting = stream_html(trace, shown_cycles=1, phase="draft")
    assert drafting.count('data-status="drafted"') == len(trace.cycles[0].positions)


def test_narration_explains_rejections_with_the_numbers(trace):
    rejected = next(c for c in trace.cycles if c.resampled_token_id is not None and c.positions)
    text = narration(trace, rejected.index, "decide")
    position = rejected.positions[rejected.n_accepted]
    assert f"u = {position.u:.2f} > p/q = {position.accept_probability:.2f}" in text
    assert "residual" in text


def test_step_cursor_walks_every_phase(trace):
    cursor, seen = (0, "decide"), []
    while (cursor := next_cursor(trace, *cursor)) is not None:
        seen.append(cursor)
    assert len(seen) == 3 * len(trace.cycles)
    assert seen[0] == (1, "draft") and seen[-1] == (len(trace.cycles), "decide")


def test_readings_and_figures(trace):
    m = readings_of_trace(trace)
    accepted = sum(c.n_accepted for c in trace.cycles)
    rejections = sum(c.resampled_token_id is not None and bool(c.positions) for c in trace.cycles)
    assert m.alpha == pytest.approx(accepted / (accepted + rejections))
    assert m.measured_speedup == pytest.approx(trace.summary.tokens_per_s / trace.baseline.tokens_per_s)
    assert m.tau_source == TAU_OVER_STEP
    assert m.tau == pytest.approx(m.tally.draft_step_s / trace.baseline.step_s)
    so_far = charts.SoFar(trace.cycles, Tally.running(trace.cycles), m)
    for figure in (*(chart.draw(so_far) for chart in charts.LIVE_CHARTS), charts.theory_figure(0.8, 0.05, 4)):
        assert figure.data, "every chart draws something"
    choice = inspector_choices(trace.cycles)[0][1]
    assert charts.inspector_figure(trace, *map(int, choice.split(":"))).data
    assert "Greedy" not in race_html(trace, m, 1.0), "no greedy identity claim is made when sampling"
