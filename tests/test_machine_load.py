"""The app times a run only once other programs are quiet, and flags a run timed while they were not."""

import subprocess
import sys
import time

import pytest

from specviz.analysis import machine_load
from specviz.analysis.machine_load import LoadMeter, OtherLoad, settle
from specviz.analysis.measures import measure
from specviz.trace import Trace
from specviz.ui.texts import run_numbers_html
from tests.test_trace_and_views import record_tiny_trace

needs_proc = pytest.mark.skipif(machine_load.others_cpu_s() is None, reason="no /proc on this system")
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
    assert meter.result.cores is not None and meter.result.cores > 0.5, (
        f"a process spinning on one core should count as > 0.5 cores of other load, measured {meter.result.cores}"
    )
    assert meter.result.busy


@needs_proc
def test_settle_waits_while_another_program_is_busy():
    process = busy_process(10.0)
    try:
        waited = settle(min_s=0.1, max_s=1.5)
    finally:
        process.kill()
        process.wait()
    assert waited >= 1.5, f"settle should wait the whole 1.5 s while another process spins, it waited {waited:.2f} s"


def test_a_busy_measurement_is_flagged_on_the_page(recorded_trace):
    busy = Trace(**{**recorded_trace.__dict__, "other_load": OtherLoad(1.3, 8.0).to_json()})
    quiet = Trace(**{**recorded_trace.__dict__, "other_load": OtherLoad(0.05, 0.5).to_json()})
    busy_html = run_numbers_html(measure(busy), "done", 1, busy)
    quiet_html = run_numbers_html(measure(quiet), "done", 1, quiet)
    assert 'data-other-load="1.30"' in busy_html and "1.3 cores" in busy_html
    assert 'data-other-load="0.05"' in quiet_html and "Other programs" not in quiet_html


@pytest.fixture(scope="module")
def recorded_trace() -> Trace:
    return record_tiny_trace()
