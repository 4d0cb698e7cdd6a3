"""The app times a run only once other programs are quiet, and flags a run timed while they were not.

The waiting and the arithmetic are checked on a fake clock and fake /proc readings, so no test here depends on
how busy the machine is; benchmarks/controller_timings.py spins real processes and prints what settle() and
LoadMeter make of them. Reading /proc itself is checked against CPU time a child process reports for itself.
"""

import subprocess
import sys

import pytest

from specviz.analysis.readings import readings_of_trace
from specviz.process import machine_load
from specviz.process.machine_load import POLL_S, LoadMeter, OtherLoad, cpu_between, process_cpu_s, settle, snapshot
from specviz.run.trace import Trace
from specviz.ui.texts import run_numbers_html
from tests.fake_clock import FakeClock
from tests.tiny import record_tiny_trace

needs_proc = pytest.mark.skipif(machine_load.snapshot() is None, reason="no /proc on this system")
BURN = """import sys, time
while time.process_time() < {cpu_s}: pass
print("burned", flush=True)
sys.stdin.read()  # stay alive, idle, until the test closes our stdin
"""


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(machine_load, "time", fake)
    return fake


def others_using(monkeypatch, clock: FakeClock, cores: float) -> None:
    """/proc as it reads while another program keeps `cores` cores busy."""
    monkeypatch.setattr(machine_load, "snapshot", lambda: {(4242, 1): cores * clock.now})


@needs_proc
def test_a_process_cpu_seconds_are_read_from_proc():
    before = snapshot()
    child = subprocess.Popen(
        [sys.executable, "-c", BURN.format(cpu_s=0.3)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "burned"
        started_at, cpu_s = process_cpu_s(child.pid)
        after = snapshot()
    finally:
        child.stdin.close()
        child.wait()
    assert cpu_s >= 0.3 - 2 / machine_load.TICKS_PER_S, f"the child used 0.3 CPU-seconds by its own clock; /proc read {cpu_s}"
    assert (child.pid, started_at) in after and cpu_between(before, after) >= cpu_s, "a process that started counts all of it"


def test_load_is_other_programs_cpu_seconds_over_the_window(monkeypatch, clock):
    others_using(monkeypatch, clock, cores=1.5)
    with LoadMeter(settle_s=0.5) as meter:
        clock.sleep(2.0)
    assert meter.result == OtherLoad(pytest.approx(1.5), 0.5), f"1.5 busy cores for 2 s, measured {meter.result}"
    assert meter.result.busy


def test_settle_waits_while_other_programs_are_busy(monkeypatch, clock):
    others_using(monkeypatch, clock, cores=machine_load.quiet_cores() + 1)
    waited = settle(min_s=0.1, max_s=1.5)
    assert 1.5 <= waited <= 1.5 + POLL_S, f"settle should wait the whole 1.5 s while others are busy, it waited {waited:.2f} s"


def test_settle_ends_once_other_programs_are_quiet(monkeypatch, clock):
    others_using(monkeypatch, clock, cores=machine_load.quiet_cores() / 2)
    waited = settle(min_s=0.5, max_s=8.0)
    assert waited == pytest.approx(0.5 + POLL_S), f"quiet after the minimum wait: one poll, then time; it waited {waited:.2f} s"


def test_settle_gives_up_waiting_when_the_run_is_stopped(monkeypatch, clock):
    others_using(monkeypatch, clock, cores=machine_load.quiet_cores() + 1)
    waited = settle(min_s=0.0, max_s=30.0, should_stop=lambda: True)
    assert waited < POLL_S, "a stopped run must not hold the measuring slot while waiting for quiet"


def test_processes_that_end_or_start_in_the_window_do_not_skew_the_load():
    before = {(10, 1): 50.0, (11, 2): 7.0, (12, 3): 1.0}  # (pid, start time): CPU seconds so far
    after = {(11, 2): 7.5, (12, 9): 0.25, (13, 4): 0.5}  # 10 ended; pid 12 was reused by a new process; 13 started
    assert cpu_between(before, after) == pytest.approx(0.5 + 0.25 + 0.5), "ended processes count nothing, new ones all"


def test_a_busy_measurement_is_flagged_on_the_page():
    recorded = record_tiny_trace()
    busy = Trace(**{**recorded.__dict__, "other_load": OtherLoad(1.3, 8.0)})
    quiet = Trace(**{**recorded.__dict__, "other_load": OtherLoad(0.05, 0.5)})
    busy_html = run_numbers_html(readings_of_trace(busy), "done", 1, busy)
    quiet_html = run_numbers_html(readings_of_trace(quiet), "done", 1, quiet)
    assert 'data-other-load="1.30"' in busy_html and "1.3 cores" in busy_html
    assert 'data-other-load="0.05"' in quiet_html and "Other programs" not in quiet_html


def test_traces_recorded_before_the_load_was_measured_still_load_and_damaged_ones_are_refused():
    recorded = Trace.from_json(record_tiny_trace().to_json())
    measured = '"other_load": {"other_cores": 0.12, "settle_s": 0.5, "own_work": ""}'
    assert measured in recorded.to_json()
    old = Trace.from_json(recorded.to_json().replace(measured, '"x": 0'))
    assert old.other_load is None and "data-other-load" not in run_numbers_html(readings_of_trace(old), "done", 1, old)
    before_own_work = Trace.from_json(
        recorded.to_json().replace(measured, '"other_load": {"other_cores": 0.12, "settle_s": 0.5}')
    )
    assert before_own_work.other_load == OtherLoad(0.12, 0.5), "a trace from before own_work reads as nothing else ran"
    with pytest.raises(ValueError, match="trace.other_load must be a record"):
        Trace.from_json(recorded.to_json().replace(measured, '"other_load": "x"'))


def test_a_pair_loading_in_this_process_is_flagged_though_no_other_program_ran():
    recorded = record_tiny_trace()
    loading = Trace(**{**recorded.__dict__, "other_load": OtherLoad(0.0, 0.5, "loading a pair in the background")})
    html_text = run_numbers_html(readings_of_trace(loading), "done", 1, loading)
    assert loading.other_load.busy and "This server was loading a pair in the background" in html_text
    with LoadMeter(own_work=lambda: "loading a pair") as meter:
        pass
    assert meter.result.own_work == "loading a pair" and meter.result.busy


def test_the_page_names_the_memory_read_rate_around_a_run_and_says_when_it_lay_at_two_levels():
    """The numbers bar says which state the machine was timed in (its memory read rate around the rounds), that a Run
    straddled two levels, or that it was timed at another level than γ auto's choice (docs/performance.md)."""
    from specviz.run.chosen_setting import ChosenSetting

    recorded = record_tiny_trace()

    def numbers(rates, setting=None):
        trace = Trace(**{**recorded.__dict__, "memory_read_gb_s": rates, "setting": setting})
        return run_numbers_html(readings_of_trace(trace), "done", 1, trace)

    steady = numbers((35.2, 36.0))
    assert 'data-read-gb-s="35.2/36.0"' in steady and "memory read 35–36 GB/s around it" in steady
    assert "changed speed" not in steady and "Compare Runs" not in steady
    assert "changed speed during this Run" in numbers((35.0, 64.0))
    chosen = ChosenSetting(gamma=2, verify_costs={1: 1.0}, measured_at="2026-12-07T10:00:00+00:00", auto=True, read_gb_s=35.0)
    elsewhere = numbers((64.2, 64.4), chosen)
    assert "γ auto chose this setting while memory read 35 GB/s and this Run was timed at 64 GB/s" in elsewhere
    assert "Compare Runs" not in numbers((36.0, 36.0), chosen)
    assert "data-read-gb-s" not in numbers(()), "a trace from before the rate was taken shows nothing"
    again = Trace.from_json(Trace(**{**recorded.__dict__, "memory_read_gb_s": (35.2, 36.0)}).to_json())
    assert again.memory_read_gb_s == (35.2, 36.0), "the rates travel in the trace"
