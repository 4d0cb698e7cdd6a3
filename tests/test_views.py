"""The views a class sees: code laid out as code, narration at the edges, the verdict and the page's numbers."""

from dataclasses import replace

import pytest

from specviz.analysis.readings import readings_of, readings_of_trace
from specviz.engine.events import Cycle, DraftPosition, RunStarted, Step, Summary
from specviz.engine.tally import Tally
from specviz.run.pair_info import PairInfo
from specviz.run.trace import Trace
from specviz.ui import texts
from specviz.ui.as_text import markdown_text
from specviz.ui.render import narration, race_html, stream_html
from specviz.ui.views import Recording, frame


def position(text: str, status: str, token_id: int = 1) -> DraftPosition:
    tested = status != "unverified"
    return DraftPosition(
        token_id,
        text,
        status,
        q=0.5,
        p=0.5 if tested else None,
        accept_probability=1.0 if tested else None,
        u=None,
        overlap=0.5 if tested else None,
    )


def cycle(index: int, positions: list[DraftPosition], n_accepted: int, new_text: str, emitted: int | None = None) -> Cycle:
    bonus = n_accepted == len(positions)
    return Cycle(
        index=index,
        gamma=len(positions),
        positions=tuple(positions),
        n_accepted=n_accepted,
        resampled_token_id=None if bonus else 9,
        bonus_token_id=9 if bonus else None,
        new_token_text=new_text,
        bonus_top_p=((9, new_text, 0.9),),
        emitted_token_ids=tuple(range(n_accepted + 1 if emitted is None else emitted)),
        draft_s=0.002 * len(positions),
        verify_s=0.01,
        overhead_s=0.001,
        n_draft_forwards=len(positions),
        lossy=False,
    )


def started(prompt_texts=("def", " f", "():")) -> RunStarted:
    return RunStarted(
        "speculative",
        tuple(range(len(prompt_texts))),
        tuple(prompt_texts),
        2,
        0.0,
        0,
        1.0,
        0,
        "model",
        1.0,
        False,
        False,
        8,
        0.001,
    )


def code_trace() -> Trace:
    cycles = [
        cycle(0, [position("\n    ", "accepted"), position("return", "accepted")], 2, " x"),
        cycle(1, [position("\n", "rejected"), position("pass", "unverified")], 0, "\n\n"),
        cycle(2, [], 0, "def"),  # the last window shrank to nothing at the token limit
    ]
    tally = Tally.of(cycles)
    summary = Summary(
        "speculative", tuple(range(tally.emitted)), "", wall_s=0.05, prefill_s=0.001, stop_reason="max_new_tokens", tally=tally
    )
    baseline = Summary(
        "autoregressive",
        tuple(range(tally.emitted)),
        "",
        wall_s=0.08,
        prefill_s=0.001,
        stop_reason="max_new_tokens",
        step_s=0.0125,
    )
    steps = [Step(i, i, "t", 0.0125) for i in range(tally.emitted)]
    return Trace(
        pair=PairInfo(name="toy"),
        prompt="def f():",
        started=started(),
        cycles=cycles,
        summary=summary,
        baseline_steps=steps,
        baseline=baseline,
    )


def test_a_newline_token_ends_the_line_and_indentation_stays_thin_spaces():
    html = stream_html(code_trace())
    assert '<span class="sv-nl">↵</span>\n<span class="sv-ws">    </span>' in html, "newline then indentation, as code"
    assert html.count('data-status="accepted"') == 2 and html.count('data-status="rejected"') == 1
    assert '<span class="sv-txt">↵' not in html, "no lone ↵ boxes: the marker is thin and ends its line"
    assert "all 0" not in html


def test_the_prompt_shows_no_newline_markers():
    trace = replace(code_trace(), started=started(("def f():", "\n", "    return")))
    prompt_part = stream_html(trace, shown_cycles=0).split('class="sv-sep"')[0]
    assert "↵" not in prompt_part and "\n" in prompt_part


def test_narration_of_an_empty_last_window_is_a_plain_target_step():
    text = narration(code_trace(), 2, "decide")
    assert "all 0" not in text and "plain target step" in text and "'def'" in text


def test_verdict_follows_the_measured_speedup_not_only_the_theory():
    trace = code_trace()
    slow = replace(trace, baseline=replace(trace.baseline, wall_s=0.04))  # the target alone was faster
    fast_m, slow_m = readings_of_trace(trace), readings_of_trace(slow)
    assert fast_m.alpha > fast_m.tau, "the theory alone would say worth it in both cases"
    assert "Worth it here" in texts.verdict_html(fast_m) and "Not worth it here" in texts.verdict_html(slow_m)
    assert "**" not in texts.verdict_html(slow_m), "the verdict is formatted, not raw markdown"
    assert f"{slow_m.measured_speedup:.2f}×" in texts.verdict_html(slow_m)


def test_the_verdict_names_a_cpu_that_multiplies_half_precision_row_by_row():
    m = replace(readings_of_trace(code_trace()), verify_cost=2.6)
    avx2_bf16 = texts.verdict_html(m, info=PairInfo(cpu_capability="AVX2", dtype="bfloat16"))
    assert "reports AVX2, with no bfloat16 matrix kernel" in avx2_bf16
    for info in (
        PairInfo(cpu_capability="AVX2", dtype="float32"),
        PairInfo(cpu_capability="AVX512", dtype="bfloat16"),
        PairInfo(),
    ):
        assert "matrix kernel" not in texts.verdict_html(m, info=info), f"no such reason is known for {info}"
    cheap = replace(m, verify_cost=1.1)
    assert "matrix kernel" not in texts.verdict_html(cheap, info=PairInfo(cpu_capability="AVX2", dtype="bfloat16"))


def test_run_numbers_expose_the_same_numbers_as_the_readings():
    trace = code_trace()
    m = readings_of_trace(trace)
    html = texts.run_numbers_html(m, "done", 7, trace)
    assert 'id="run-numbers"' in html and 'data-state="done"' in html and 'data-run-id="7"' in html
    assert f'data-speedup="{m.measured_speedup:.4f}"' in html and f'data-alpha="{m.alpha:.4f}"' in html
    assert f'data-tokens-per-s="{m.tokens_per_s:.2f}"' in html
    assert "data-speedup" not in texts.run_numbers_html(None, "measuring", 8), "no numbers before they are measured"


def test_race_and_summary_and_verdict_say_the_same_speedup():
    trace = code_trace()
    last = frame(Recording.of(trace), len(trace.cycles), "decide", 1.0, with_charts=True)
    speedup = f"{readings_of_trace(trace).measured_speedup:.2f}×"
    for view in (last.race, last.verdict, last.summary):
        assert speedup in view, f"{speedup} missing from {view[:120]}"
    assert last.charts is not None and all(figure.data for figure in last.charts.values())


def test_readings_during_playback_are_so_far_and_final_at_the_end():
    recording = Recording.of(code_trace())
    first = recording.readings_at(1)
    assert first.tally.cycles == 1 and first.alpha == 1.0 and first.measured_speedup is None
    assert recording.readings_at(3) is recording.final


def test_tau_uses_the_target_step_when_the_baseline_was_measured():
    trace = code_trace()
    m = readings_of(Tally.of(trace.cycles), gamma=2, target_step_s=0.0125)
    assert m.tau == pytest.approx(0.002 / 0.0125) and m.verify_cost == pytest.approx(0.01 / 0.0125)
    whole = readings_of_trace(trace)
    assert race_html(trace, whole, 10.0).count("animation-delay") == whole.tally.emitted + len(trace.baseline_steps)


def test_a_dynamic_draft_says_where_and_why_it_stopped():
    trace = code_trace()
    stopped = replace(trace.cycles[0], draft_stop="confidence 0.31 < 0.40")
    trace = replace(trace, cycles=[stopped, *trace.cycles[1:]])
    assert "the draft stopped here: confidence 0.31 &lt; 0.40" in stream_html(trace)
    assert markdown_text("confidence 0.31 < 0.40") in narration(trace, 0, "draft"), "the narration is Markdown: text escaped"
    assert "stopped here" not in stream_html(code_trace()), "a full window needs no marker"
