"""The race on the main view and the deployment sections of "Theory & verdict", from a hand-built trace."""

from specviz.analysis.readings import readings_of_trace
from specviz.deployment.memory import MemoryReport, ModelMemory
from specviz.run.pair_info import PairInfo
from specviz.ui.deployment_view import clock_at, deployment_html, race_view, trace_report
from specviz.ui.views import Recording, frame
from tests.test_views import code_trace


def test_the_race_fills_in_with_the_playback_clock():
    trace = code_trace()
    first, first_numbers = race_view(trace, 1, finished=False)
    later, _ = race_view(trace, 2, finished=False)
    final, final_numbers = race_view(trace, len(trace.cycles), finished=True)
    assert max(first.data[1].y) == 3, "after cycle 1 the speculative curve holds its burst of 3 tokens, no more"
    assert max(later.data[1].y) == 4 and max(final.data[1].y) == trace.summary.new_tokens
    until_s = clock_at(trace, 1)
    assert max(first.data[0].x) <= until_s + 1e-12, "nothing is drawn past the playback's clock"
    assert max(first.data[0].y) == sum(1 for i in range(len(trace.baseline_steps)) if 0.001 + 0.0125 * (i + 1) <= until_s)
    assert "so far" in first_numbers and "the whole run" in final_numbers


def test_the_speculative_curve_is_a_staircase_of_bursts():
    figure, numbers = race_view(code_trace(), 3, finished=True)
    speculative = figure.data[1]
    assert speculative.line.shape == "hv", "tokens arrive in steps: a burst at once, then nothing until the next cycle"
    assert "ITL P50" in numbers and "TTFT" in numbers and "TPOT" in numbers


def test_theory_and_verdict_show_the_reports_sections_for_the_prompt_on_screen():
    trace = code_trace()
    memory = MemoryReport(ModelMemory("t", 100, 400, 8), ModelMemory("d", 10, 40, 2), 1000, 1200, "estimated from tensors")
    trace.pair = PairInfo(name="toy", device="cpu", dtype="float32", target_parameters=100, memory=memory.to_json())
    saved = {"batches": [{"batch": 1, "tau": 0.1, "verify_cost": 1.1, "predicted_speedup": 1.4}], "batch_alpha": 0.8}
    report = trace_report(trace, readings_of_trace(trace), saved)
    assert report.memory.added_bytes == 200 and [r.batch for r in report.batch_rows] == [1]
    html = deployment_html(report)
    for section in ("Verdict", "Latency", "Memory", "Cold start", "Batch size", "P99 latency", "memory +15–25 %"):
        assert section in html, f"the app shows the report's {section!r}"
    assert "No batch curve saved" in deployment_html(trace_report(trace, readings_of_trace(trace), None))


def test_the_last_frame_carries_the_race_and_the_deployment_sections():
    recording = Recording.of(code_trace())
    last = frame(recording, 3, "decide", 1.0, with_charts=False)
    assert last.race_chart is not None and last.deployment is not None and last.deployment_charts is not None
    between = frame(recording, 1, "decide", 1.0, with_charts=False)
    assert between.race_chart is None, "between chart redraws the race waits, like the other charts"
    assert frame(recording, 1, "decide", 1.0, with_charts=True).race_chart is not None
