"""The app times a run only once other programs are quiet, and flags a run timed while they were not."""

import subprocess
import sys
import time

import pytest

from specviz import machine_load
from specviz.analysis.readings import readings_of_trace
from specviz.machine_load import LoadMeter, OtherLoad, cpu_between, quiet_cores, settle
from specviz.trace import Trace
from specviz.ui.texts import run_numbers_html
from tests.tiny import record_tiny_trace

needs_proc = pytest.mark.skipif(machine_load.snapshot() is None, reason="no /proc on this system")
SPIN = "import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"


def busy_process(seconds: float) -> subprocess.Popen:
    """Another program keeping one core busy for `seconds`."""
    process = subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=seconds)])
    time.sleep(0.3)  # past its start-up
    return process


@needs_proc
def test_a_busy_program_is_measured_as_load():
    process = busy_process(3.0)
    try:
        with LoadMeter() as meter:
            time.sleep(1.0)
    finally:
        process.kill()
        process.wait()
    assert meter.result.other_cores is not None and meter.result.other_cores > 0.5, (
        f"a process spinning on one core should count as > 0.5 cores of other load, measured {meter.result.other_cores}"
    )


@needs_proc
def test_settle_waits_while_other_programs_are_busy():
    processes = [busy_process(10.0) for _ in range(int(quiet_cores()) + 1)]  # more than the quiet threshold, on any machine
    try:
        waited = settle(min_s=0.1, max_s=1.5)
    finally:
        for process in processes:
            process.kill()
            process.wait()
    assert waited >= 1.5, f"settle should wait the whole 1.5 s while other processes spin, it waited {waited:.2f} s"


def test_settle_gives_up_waiting_when_the_run_is_stopped():
    started = time.perf_counter()
    settle(min_s=0.0, max_s=30.0, should_stop=lambda: True)
    assert time.perf_counter() - started < 5, "a stopped run must not hold the measuring slot while waiting for quiet"


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
    old = Trace.from_json(recorded.to_json().replace('"other_load": {"other_cores": 0.12, "settle_s": 0.5}', '"x": 0'))
    assert old.other_load is None and "data-other-load" not in run_numbers_html(readings_of_trace(old), "done", 1, old)
    with pytest.raises(ValueError, match="damaged specviz trace"):
        Trace.from_json(recorded.to_json().replace('"other_load": {"other_cores": 0.12, "settle_s": 0.5}', '"other_load": "x"'))
