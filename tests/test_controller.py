"""The app's controller and measurement without a browser: requests by name, sessions, measuring, playback, step mode.

Playback's pacing is checked on a fake clock (sleeping advances it), so these tests never wait for real time and
never depend on how busy the machine is; benchmarks/controller_timings.py prints the same things in wall time.
"""

import threading

import pytest

from specviz.checked import InputError
from specviz.engine import DecodeSettings
from specviz.run.runner import PromptError
from specviz.run.trace import Trace
from specviz.serving import measuring_slot, recorder
from specviz.ui import playback as playback_module
from specviz.ui import runs
from specviz.ui.playback import next_cursor, playback, recorded_s, timeline
from specviz.ui.request import DEFAULT_PLAYBACK, SLOW_MOTION, SLOW_MOTION_S, RunRequest, slowdown
from specviz.ui.sessions import Sessions
from tests.fake_clock import FakeClock

PROMPT = "def parse(text):\n    return"


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(playback_module, "time", fake)
    return fake


@pytest.fixture
def no_settle(monkeypatch) -> None:
    """The app waits for other programs to go quiet before timing (up to 8 s on a busy machine); these tests need no fair timing."""
    monkeypatch.setattr(recorder, "SETTLE_S", 0.0)


class RefusingSlot:
    """A measuring slot another session holds: whoever tries to take it fails the test instead of waiting."""

    def __enter__(self):
        raise AssertionError("bad input reached the measuring slot: it would have waited for another session")

    def __exit__(self, *exc) -> None:
        pass

    acquire = __enter__

    def locked(self) -> bool:
        return True


def test_requests_are_built_by_name_and_modes_map_to_settings():
    request = RunRequest.from_values({"prompt": PROMPT, "pair": "pycode-distilled", "gamma": 6, "unknown": 1, "seed": None})
    assert request.gamma == 6 and request.seed == 0, "unknown names are ignored, None keeps the default"
    assert RunRequest("p", PROMPT, temperature=0.9, verification="greedy").settings().sampling.greedy
    lenient = RunRequest("p", PROMPT, verification="lenient", lenience=0.3).settings()
    assert lenient.lossy and lenient.lenience == 0.3
    assert not RunRequest("p", PROMPT, verification="exact", lenience=0.3).settings().lossy, (
        "lenience only counts in lenient mode"
    )


@pytest.mark.parametrize("seconds", [0.05, 0.4, 5.0, 30.0])
def test_slow_motion_fits_any_run_into_a_few_seconds_but_never_plays_faster_than_real(seconds):
    assert DEFAULT_PLAYBACK == SLOW_MOTION, "a new user's first Run plays in slow motion"
    factor = slowdown(SLOW_MOTION, seconds)
    assert factor >= 1.0, "playback is never faster than the run was"
    assert seconds * factor == pytest.approx(max(SLOW_MOTION_S, seconds)), f"a {seconds} s run plays {seconds * factor:.1f} s"
    assert slowdown("10× slower", seconds) == 10.0 and slowdown("real pace", seconds) == 1.0, "the other choices are factors"


@pytest.mark.parametrize("overrides", [{"gamma": 0}, {"gamma": 17}, {"top_p": 0.0}, {"temperature": "hot"}])
def test_bad_settings_raise_one_sentence(overrides):
    with pytest.raises(InputError):
        RunRequest(**{"pair": "pycode-distilled", "prompt": PROMPT, **overrides}).settings()


def test_sessions_retire_older_runs_and_forget_idle_sessions():
    sessions = Sessions(max_sessions=3)
    first = sessions.start("a")
    second = sessions.start("a")
    assert not sessions.is_current(first) and sessions.is_current(second), "a newer run retires the older one"
    assert not sessions.was_stopped(first), "a run retired by a newer run ends quietly"
    sessions.stop("a")
    assert not sessions.is_current(second), "Stop retires the current run"
    assert sessions.was_stopped(second), "a run retired by Stop says so last"
    third = sessions.start("a")
    assert not sessions.was_stopped(second) and not sessions.was_stopped(third), "after Stop, a new run takes over again"
    for name in "bcde":
        sessions.start(name)
    assert len(sessions) == 3, "the table is pruned, oldest first"


@pytest.fixture(scope="module")
def recorded(bundled_pair) -> Trace:
    return recorder.measure_run(bundled_pair, PROMPT, DecodeSettings(max_new_tokens=24, gamma=4))


def test_a_measurement_records_both_runs_and_greedy_texts_agree(recorded):
    assert recorded.summary.new_tokens == recorded.baseline.new_tokens == 24
    assert recorded.summary.new_token_ids == recorded.baseline.new_token_ids, "greedy: the race must end in identical texts"
    assert len(recorded.round_speedups) % 2 == 1 and len(recorded.round_speedups) <= recorder.MOST_ROUNDS, (
        "an odd number of rounds, so the median is a measured round"
    )
    median = sorted(recorded.round_speedups)[len(recorded.round_speedups) // 2]
    assert recorded.summary.tokens_per_s / recorded.baseline.tokens_per_s == pytest.approx(median), (
        "the trace is the median round"
    )
    assert Trace.from_json(recorded.to_json()) == recorded


def test_bad_input_is_refused_before_the_measuring_slot(bundled_pair, monkeypatch):
    """Another session holds the slot; a bad prompt must still be answered without waiting for it."""
    monkeypatch.setattr(measuring_slot, "MEASURING_SLOT", RefusingSlot())
    with pytest.raises(PromptError):
        recorder.measure_run(bundled_pair, "x" * 30_000, DecodeSettings())
    with pytest.raises(PromptError):
        recorder.measure_run(bundled_pair, "word " * 5000, DecodeSettings())


def test_the_slot_serialises_measurements(bundled_pair):
    inside, overlaps = [], []
    original = recorder._round

    def watched(*args, **kwargs):
        inside.append(1)
        overlaps.append(len(inside))
        try:
            return original(*args, **kwargs)
        finally:
            inside.pop()

    recorder._round = watched
    try:
        threads = [
            threading.Thread(target=recorder.measure_run, args=(bundled_pair, PROMPT, DecodeSettings(max_new_tokens=8)))
            for _ in range(3)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        recorder._round = original
    assert max(overlaps) == 1, "two measurements ran at once"


def test_stop_during_measurement_records_no_baseline(bundled_pair):
    checks = iter(range(1000))
    trace = recorder.measure_run(bundled_pair, PROMPT, DecodeSettings(max_new_tokens=64), should_stop=lambda: next(checks) >= 3)
    assert trace.summary.stop_reason == "stopped" and trace.baseline is None and trace.round_speedups == ()


def test_playback_follows_the_recorded_pace_times_the_slowdown(recorded, clock):
    factor, interval = 20.0, 0.02
    moments = timeline(recorded, factor)
    assert moments[-1][0] == pytest.approx(factor * recorded_s(recorded))
    assert recorded_s(recorded) == pytest.approx(recorded.summary.wall_s, rel=0.05), "the timeline is the engine's own clock"
    due = {(shown, phase): at for at, shown, phase in moments}
    shown_at = []
    for position in playback(recorded, factor, frame_interval_s=interval):
        assert due[position] <= clock.now <= due[position] + interval + 1e-9, (
            f"{position} is due at {due[position]:.3f} s: it must be shown then or within one frame interval, "
            f"not at {clock.now:.3f} s"
        )
        shown_at.append((position, clock.now))
    assert shown_at[-1][0] == (len(recorded.cycles), "decide"), "playback always ends on the last decision"
    assert [p[0] for p, _ in shown_at] == sorted(p[0] for p, _ in shown_at), "cycles only move forward"


def test_playback_sends_at_most_one_frame_per_interval_skipping_phases_already_past(recorded, clock):
    interval = 0.25  # longer than the gaps between the recorded phases at 5×: some must be skipped
    shown_at = [(position, clock.now) for position in playback(recorded, 5.0, frame_interval_s=interval)]
    gaps = [later - earlier for (_, earlier), (_, later) in zip(shown_at, shown_at[1:])]
    assert min(gaps) >= interval - 1e-9, f"two frames {min(gaps):.3f} s apart: at most one per {interval} s"
    assert len(shown_at) < len(timeline(recorded, 5.0)), "phases already past are skipped, not queued"
    assert shown_at[-1][0] == (len(recorded.cycles), "decide"), "the last decision is never skipped"


def test_playback_stops_within_50_ms(recorded, clock):
    list(playback(recorded, 50.0, keep_going=lambda: clock.now < 0.1))
    assert clock.now <= 0.1 + 0.05 + 1e-9, f"playback went on until {clock.now:.3f} s after being stopped at 0.1 s"


def test_playback_moves_on_where_the_clock_can_only_just_tell_a_moment_from_now(recorded, clock, monkeypatch):
    """Started at clock S, at clock P the next moment m lies ahead by the reckoning P − S < m but not by the clock's
    (S + m ≤ P, float rounding): playback shows it instead of waiting for a deadline that has already passed (this
    hung a Run's playback under the fake clock)."""
    start, now, moment = 1.3436424411240122, 2.1910761780612447, 0.8474337369372326
    assert moment > now - start and start + moment <= now, "the numbers no longer make the case"
    monkeypatch.setattr(playback_module, "timeline", lambda trace, slowdown: [(0.0, 0, "decide"), (moment, 1, "decide")])
    clock.now = start
    calls = iter(range(10_000))
    shown = list(playback(recorded, 1.0, keep_going=lambda: next(calls, None) is not None, frame_interval_s=now - start))
    assert shown == [(0, "decide"), (1, "decide")], f"playback stalled before the second moment, showed {shown}"


def test_a_run_measures_first_then_plays_and_a_newer_run_retires_it(bundled_pair, clock, no_settle):
    sessions = Sessions()
    ticket = sessions.start("s")
    request = RunRequest("pycode-distilled", PROMPT, max_new_tokens=16, playback="real pace")
    updates = list(runs.run_and_play(request, ticket, sessions))
    measuring_at = next(i for i, u in enumerate(updates) if u.status and "Measuring" in u.status)
    assert all(u.frame is None for u in updates[: measuring_at + 1]), "nothing is drawn before the measurement is done"
    assert updates[measuring_at].clear, "the old run's tokens leave the stream while the new one is measured"
    assert updates[measuring_at + 1].trace is not None, "the first frame after measuring carries the whole recorded trace"
    assert 'data-state="playing"' in next(u.numbers for u in updates if u.trace is not None)
    assert updates[-1].status.startswith("Done.") and 'data-state="done"' in updates[-1].numbers
    assert updates[-1].cursor == (0, "decide"), "Step then walks this run from cycle 1"

    ticket = sessions.start("s")
    slow = runs.run_and_play(RunRequest("pycode-distilled", PROMPT, max_new_tokens=16, playback="50× slower"), ticket, sessions)
    first_frames = [next(slow) for _ in range(4)]
    assert any(u.frame is not None for u in first_frames)
    sessions.start("s")  # the user pressed Run again
    rest = list(slow)
    assert rest == [], f"a retired run sends nothing more to the page, it sent {len(rest)} updates"


def test_step_walks_the_run_on_screen_and_wraps(recorded):
    sessions = Sessions()
    ticket = sessions.start("s")
    request = RunRequest("pycode-distilled", PROMPT)
    (update,) = runs.step(recorded, (0, "decide"), request, ticket, sessions)
    assert update.cursor == (1, "draft") and update.trace is recorded, "Step after a Run starts at cycle 1 of that run"
    (update,) = runs.step(recorded, (len(recorded.cycles), "decide"), request, ticket, sessions)
    assert update.cursor == (1, "draft") and "from the start again" in update.status


def test_step_with_nothing_recorded_records_first(no_settle):
    sessions = Sessions()
    updates = list(
        runs.step(None, (0, "decide"), RunRequest("pycode-distilled", PROMPT, max_new_tokens=8), sessions.start("s"), sessions)
    )
    assert any("Measuring" in (u.status or "") for u in updates)
    assert updates[-1].cursor == (1, "draft") and updates[-1].trace.complete


def test_step_cursor_walks_every_phase(recorded):
    cursor, seen = (0, "decide"), []
    while (cursor := next_cursor(recorded, *cursor)) is not None:
        seen.append(cursor)
    assert len(seen) == 3 * len(recorded.cycles)


def test_playback_freezes_while_another_session_is_measured(recorded, clock):
    factor, held_s = 5.0, 0.4
    due = {(shown, phase): at for at, shown, phase in timeline(recorded, factor)}
    shown = []
    for position in playback(recorded, factor, frame_interval_s=0.02, hold=lambda: clock.now < held_s):
        assert clock.now >= due[position] + held_s, f"{position} was shown during the hold or before its moment"
        shown.append(position)
    assert shown[-1] == (len(recorded.cycles), "decide"), "the playback clock resumes where it froze"


@pytest.fixture
def kept_settings(tmp_path, monkeypatch):
    """γ auto's choices kept in a file of this test's own, none measured yet, with no wait for quiet."""
    from specviz.deployment import gamma_auto

    monkeypatch.setattr(gamma_auto, "settings_path", lambda: tmp_path / "settings.json")
    monkeypatch.setattr(gamma_auto, "_chosen", {})
    monkeypatch.setattr(recorder, "SETTLE_S", 0.0)
    monkeypatch.setattr(recorder, "SETTLE_MAX_S", 0.0)
    return tmp_path / "settings.json"


def test_a_first_run_with_gamma_auto_waits_for_the_measured_setting_drafts_it_and_says_so(clock, no_settle, kept_settings):
    sessions = Sessions()
    request = RunRequest("pycode-distilled", PROMPT, gamma=9, auto=True, max_new_tokens=16, playback="real pace")
    updates = list(runs.run_and_play(request, sessions.start("s"), sessions))
    statuses = [u.status or "" for u in updates]
    choosing = next(i for i, said in enumerate(statuses) if said.startswith("Measuring which γ pays for pycode-distilled"))
    assert 'data-state="choosing"' in updates[choosing].numbers, "the wait is visible on the numbers bar"
    assert choosing < next(i for i, said in enumerate(statuses) if said.startswith("Measuring the speculative run"))
    trace = next(u.trace for u in updates if u.trace is not None)
    chosen = trace.setting
    assert chosen is not None and chosen.auto and kept_settings.exists(), "measured, kept, and carried in the trace"
    drafted = f"tree {trace.started.tree}" if trace.started.tree else f"γ {trace.started.gamma}"
    assert drafted == chosen.label, "it drafts the measured choice, not the slider's γ"
    numbers = updates[-1].numbers
    assert f'data-auto="{chosen.label}"' in numbers and "γ auto, on this machine" in numbers
    assert 'data-threads="' in numbers and 'data-engine="' in numbers

    again = list(runs.run_and_play(request, sessions.start("s"), sessions))
    assert not any((u.status or "").startswith("Measuring which γ pays") for u in again), "measured once, then reused"
    assert next(u.trace for u in again if u.trace is not None).setting.label == chosen.label


def test_a_run_whose_verify_cost_moved_since_the_setting_was_chosen_is_flagged(recorded):
    from dataclasses import replace

    from specviz.analysis.readings import readings_of_trace
    from specviz.run.chosen_setting import ChosenSetting
    from specviz.ui.texts import run_numbers_html

    m = readings_of_trace(recorded)
    rows = recorded.started.gamma + 1
    steady = ChosenSetting(gamma=4, verify_costs={1: 1.0, rows: m.verify_cost * 1.1}, measured_at="2026-01-01T00:00:00+00:00")
    moved = replace(steady, verify_costs={1: 1.0, rows: m.verify_cost * 2.5})
    quiet_html = run_numbers_html(m, "done", 1, replace(recorded, setting=steady))
    moved_html = run_numbers_html(m, "done", 1, replace(recorded, setting=moved))
    assert "ν moved" not in quiet_html and "data-nu-moved" not in quiet_html
    assert "ν moved" in moved_html and "not to be trusted" in moved_html and "data-nu-moved=" in moved_html
    assert Trace.from_json(replace(recorded, setting=moved).to_json()).setting == moved, "the setting travels in the trace"
