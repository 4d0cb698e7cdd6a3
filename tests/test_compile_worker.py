"""Compiling happens in a worker process (serving/compile_worker.py); the serving process only loads packages.

What is checked here without compiling anything: a worker that stops leaves no package and is reported in one
sentence while the pair keeps serving eager; a pair switches engines between requests, never inside one; and a
request says which engine ran it. (The compiled path end to end, from an empty cache in a browser, is
tests/test_first_start.py; compiling itself, tests/test_fast_path.py.)
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from specviz.engine import DecodeSettings
from specviz.engine.autoregressive import autoregressive_decode
from specviz.engine.compiled import FastDecoder, FastModel, fast_models, pair_engine
from specviz.engine.static_cache import Rows
from specviz.serving import compile_worker, pair_cache
from tests.tiny import fake_vocabulary, tiny_llama

VOCAB = 61


def group_states(group: int) -> set[str]:
    """The states (R, S, T for stopped, …) of the processes in a process group, from /proc (Linux)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group:
            found.add(fields[0])
    return found


@pytest.fixture(scope="module")
def model():
    return tiny_llama(VOCAB, seed=0)


def test_a_worker_that_stops_is_one_sentence_and_leaves_no_package(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    reports, failure = compile_worker.run_worker("no-such-pair", threads=1)
    assert reports is None
    assert failure.startswith("compiling no-such-pair's packages stopped") and failure.endswith("keeps running eager")
    assert failure.count(".") <= 2 and "\n" not in failure  # one sentence (a path may hold dots)
    assert "unknown pair 'no-such-pair'" in compile_worker.log_path("no-such-pair").read_text()  # the why, in its log
    assert not list(tmp_path.rglob("*.pt2"))


def test_a_failed_compile_keeps_the_pair_eager_and_says_so_once(model, caplog):
    fast = FastModel(model, compile_step=False)
    fast.report.compiled = True  # wanted, but the worker made nothing
    pair = SimpleNamespace(target=SimpleNamespace(model=model), draft=None)
    object.__setattr__(model, "_specviz_fast_path", fast)
    try:
        with caplog.at_level(logging.INFO, logger="specviz"):
            pair_cache._compiling["toy"] = "compiling…"
            pair_cache._adopt_packages("toy", pair, None, "compiling toy's packages stopped, so toy keeps running eager")
        assert pair_engine(pair) == "eager" and "toy" not in pair_cache._compiling
        said = [record.getMessage() for record in caplog.records]
        assert said == ["specviz: compiling toy's packages stopped, so toy keeps running eager."], said
        assert pair_cache.compile_report("toy")["target"]["compiled"] is True  # wanted; engine says what runs
    finally:
        object.__delattr__(model, "_specviz_fast_path")
        pair_cache._compile_reports.pop("toy", None)


def test_a_request_keeps_the_engine_it_started_with(model):
    """A package that loads while a request runs serves the requests after it: the running one stays eager."""
    fast = FastModel(model, compile_step=False)
    running = FastDecoder(fast, VOCAB)
    assert running.engine == "eager"
    eager_step = running._step
    calls = []

    class Package:  # stands in for a package loaded meanwhile (the eager stack, counted)
        def __call__(self, x, *tensors):
            calls.append(len(x))
            rows, cache = Rows(*tensors[:5]), list(tensors[5:])
            return fast.forward.layers_forward(x, rows, cache)

    fast.package = Package()
    running.feed([1, 2, 3])
    assert calls == [] and running._step is eager_step  # the running request did not switch
    later = FastDecoder(fast, VOCAB)
    assert later.engine == "compiled"
    later.feed([1, 2, 3])
    assert calls == [3]


def test_a_run_names_its_engine(model):
    fast = FastModel(model, compile_step=False)
    settings = DecodeSettings(max_new_tokens=3, gamma=2)
    started = next(iter(autoregressive_decode(FastDecoder(fast, VOCAB), [1, 2, 3], settings, fake_vocabulary())))
    assert started.engine == "eager"
    no_fast_path = SimpleNamespace(target=SimpleNamespace(model=torch.nn.Linear(1, 1)), draft=None)
    assert fast_models(no_fast_path) == {} and pair_engine(no_fast_path) == "transformers"


def test_a_timed_run_stops_the_worker_and_every_process_it_started_then_lets_it_go_on(monkeypatch, tmp_path):
    """`paused` (a measured Run, γ auto's measurement) stops the worker's whole process group: on 2 cores the lowest
    priority still took a core from the run's two threads. Nested holders keep it stopped until the last leaves."""
    import subprocess
    import sys
    import time

    if sys.platform != "linux":
        pytest.skip("reads process states from /proc")
    worker = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'while True: pass']); "
         "print(flush=True)\nwhile True: pass"],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    worker.stdout.readline()  # its child has started

    def states() -> set[str]:
        return group_states(worker.pid)

    monkeypatch.setattr(compile_worker, "_worker", compile_worker.RunningWorker(worker, gate=tmp_path / "gate"))
    try:
        assert len(states()) == 1 and "T" not in states()
        with compile_worker.paused():
            with compile_worker.paused():
                time.sleep(0.2)
                assert states() == {"T"}, "the worker and its child are stopped"
            time.sleep(0.1)
            assert states() == {"T"}, "still stopped while an outer run's clock runs"
        time.sleep(0.2)
        assert "T" not in states(), "both go on once the last run is timed"
    finally:
        import os
        import signal

        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()


# The worker for the two tests below: it holds the kernel build's lock file (torch's FileBaton, as
# torch.utils.cpp_extension takes it) inside a critical section, says so, holds it a while, lets it go, leaves the
# section, says so, and spins. Run as a real process with the gate in its environment, as run_worker starts one.
HOLDS_A_BUILD_LOCK = """
import sys, time
from torch.utils.file_baton import FileBaton
from specviz.process import pause_gate
baton = FileBaton(sys.argv[1])
with pause_gate.critical_section():
    assert baton.try_acquire()
    print("building", flush=True)
    started = time.monotonic()
    while time.monotonic() - started < float(sys.argv[2]):
        pass
    baton.release()
print("built", flush=True)
while True:
    pass
"""


def start_building(tmp_path: Path, hold_s: float) -> tuple[subprocess.Popen, Path]:
    """A worker process inside a critical section, holding tmp_path/lock for hold_s seconds (wall clock, spinning)."""
    lock = tmp_path / "lock"
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDS_A_BUILD_LOCK, str(lock), str(hold_s)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, compile_worker.pause_gate.ENVIRONMENT: str(tmp_path / "gate")},
    )
    assert process.stdout.readline().strip() == "building"
    return process, lock


@pytest.mark.skipif(sys.platform != "linux", reason="reads process states from /proc")
def test_a_worker_is_not_stopped_while_it_holds_a_lock_the_server_may_wait_on(monkeypatch, tmp_path):
    """A timed run starts while the worker builds a kernel (holding the build's lock file); the server then loads a
    pair that needs that kernel and waits on the same lock. Stopped there, the worker would hold the lock until the run
    ended, or for ever if the run itself waited: so it is not stopped inside its critical section, the server's wait
    ends within the build's time, and once the worker has left the section the next timed run stops it."""
    from torch.utils.file_baton import FileBaton

    process, lock = start_building(tmp_path, hold_s=1.0)
    monkeypatch.setattr(compile_worker, "_worker", compile_worker.RunningWorker(process, gate=tmp_path / "gate"))
    try:
        with compile_worker.paused():
            time.sleep(0.2)
            assert "T" not in group_states(process.pid), "stopped inside its critical section"
            waiting = FileBaton(str(lock), wait_seconds=0.05)
            assert not waiting.try_acquire(), "the worker holds the build lock, as a build does"
            started = time.monotonic()
            while lock.exists() and time.monotonic() - started < 30:  # what torch's loader does: FileBaton.wait
                time.sleep(0.05)
            assert not lock.exists(), "the server waited on the build lock while a timed run kept the worker stopped"
        assert process.stdout.readline().strip() == "built"
        with compile_worker.paused():
            time.sleep(0.2)
            assert group_states(process.pid) == {"T"}, "outside its critical section the worker is stopped as before"
        time.sleep(0.2)
        assert "T" not in group_states(process.pid), "and goes on after"
    finally:
        os.killpg(process.pid, 9)
        process.wait()


@pytest.mark.skipif(sys.platform != "linux", reason="reads process states from /proc")
def test_a_run_waits_for_a_kernel_build_to_end_then_stops_the_worker(monkeypatch, tmp_path):
    """A Run that arrives while the worker builds a kernel is not timed beside it: the page says what it waits for,
    `wait_for_build` and `paused(wait_s)` return once the worker has left its critical section (bounded, and at once
    for a Run stopped meanwhile), and the worker is stopped for the clock."""
    from specviz.ui import runs

    process, lock = start_building(tmp_path, hold_s=4.0)
    monkeypatch.setattr(compile_worker, "_worker", compile_worker.RunningWorker(process, gate=tmp_path / "gate"))
    try:
        assert compile_worker.building(), "inside its critical section the worker is building"
        assert "kernel" in runs.building_now(time.monotonic() + 60), "the page's status names what it waits for"
        assert runs.building_now(time.monotonic() - 1) == "", "and gives up once the longest build's time has passed"
        started = time.monotonic()
        compile_worker.wait_for_build(0.3)
        assert 0.25 < time.monotonic() - started < 2 and compile_worker.building(), "the wait for a build is bounded"
        started = time.monotonic()
        with compile_worker.paused(wait_s=60, should_stop=lambda: time.monotonic() - started > 0.1):
            assert time.monotonic() - started < 2, "a Run stopped meanwhile waits no more"
            assert "T" not in group_states(process.pid), "and the worker, still building, was not stopped"
        with compile_worker.paused(wait_s=60):
            assert not lock.exists(), "the wait ended only once the build had let its lock go"
            time.sleep(0.2)
            assert group_states(process.pid) == {"T"}, "then the worker is stopped while the clock runs"
            assert not compile_worker.building(), "a stopped worker is not building"
        assert process.stdout.readline().strip() == "built", "let go on, it carries on after its build"
        compile_worker.wait_for_build(60)  # nothing to wait for now
        time.sleep(0.2)
        assert "T" not in group_states(process.pid) and not compile_worker.building(), "and runs on"
    finally:
        os.killpg(process.pid, 9)
        process.wait()


@pytest.mark.skipif(sys.platform != "linux", reason="reads process states from /proc")
def test_a_worker_stopped_outside_a_critical_section_waits_at_the_gate_to_enter_one(monkeypatch, tmp_path):
    """The other order: the server holds the gate (the worker stopped); a worker let go on enters its next critical
    section only after the server has given the gate back, so it is never stopped inside one."""
    gate = tmp_path / "gate"
    held = compile_worker.pause_gate.try_hold(gate)
    assert held is not None
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from specviz.process import pause_gate\nwith pause_gate.critical_section():\n    print('in', flush=True)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, compile_worker.pause_gate.ENVIRONMENT: str(gate)},
    )
    try:
        time.sleep(1.0)
        assert process.poll() is None, "it entered a critical section while the server held the gate"
        compile_worker.pause_gate.release(held)
        assert process.stdout.readline().strip() == "in" and process.wait(timeout=30) == 0
    finally:
        process.kill()
        process.wait()


def test_the_workers_report_is_read_defensively(tmp_path):
    """Whatever the worker left (nothing, half a file, a list), the server says in one sentence what went wrong and
    where the worker's log is, and the pair keeps running eager."""
    log_file = tmp_path / "compile-toy.log"
    report = tmp_path / "report.json"
    assert compile_worker.read_report("toy", report, 0, log_file) == (
        None,
        f"compiling toy's packages left no report (the worker exited with 0; its log is {log_file}), so toy keeps running eager",
    )
    report.write_text('{"target": {"compiled": tr')
    reports, failure = compile_worker.read_report("toy", report, 0, log_file)
    assert reports is None and "not JSON" in failure and str(log_file) in failure and failure.endswith("keeps running eager")
    report.write_text("[1, 2]")
    reports, failure = compile_worker.read_report("toy", report, 0, log_file)
    assert reports is None and "wrong shape" in failure
    report.write_text('{"target": {"compiled": true, "seconds": {"compile": 1.5}}}')
    assert compile_worker.read_report("toy", report, 0, log_file) == (
        {"target": {"compiled": True, "seconds": {"compile": 1.5}}},
        None,
    )
    assert compile_worker.read_report("toy", report, 1, log_file)[1].startswith(
        "compiling toy's packages stopped (the worker exited with 1"
    )


def w4a8_kernel_can_build() -> bool:
    """The w4a8 kernel (specviz/kernels/) builds with g++ on AVX-512 VNNI or AVX2 (read from /proc/cpuinfo, so that
    asking loads nothing)."""
    import shutil

    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return False
    return ("avx512_vnni" in flags or "avx2" in flags) and shutil.which("g++") is not None


@pytest.mark.slow
@pytest.mark.skipif(not w4a8_kernel_can_build(), reason="the w4a8 kernel builds with g++ on AVX-512 VNNI or AVX2")
def test_a_timed_run_while_the_real_worker_builds_a_kernel_keeps_no_other_pair_waiting(tmp_path, monkeypatch):
    """The real thing, at its smallest: from an empty cache, the app's worker for one bundled pair in the w4a8 form
    builds the kernel (about a minute on 2 cores, holding the build's lock file); a timed run starts meanwhile, and
    inside it the server loads the other bundled pair in w4a8, which waits on that lock. The load finishes inside the
    timed run (the worker was not stopped mid-build), and the worker ends with its report. (With the gate ignored,
    the load waited 400 s and failed.)"""
    import threading

    root = Path(__file__).resolve().parents[1]
    cache = tmp_path / "cache"
    catalogue = tmp_path / "models.yaml"
    catalogue.write_text(
        "default: built-a\npairs:\n"
        + "".join(
            f"  {name}:\n    target: {root}/assets/pycode-target\n    draft: {root}/assets/{draft}\n"
            f'    description: "a bundled pair in w4a8"\n    weights: w4a8\n'
            for name, draft in (("built-a", "pycode-draft"), ("built-b", "pycode-draft-plain"))
        )
    )
    for name, value in (("SPECVIZ_CATALOGUE", str(catalogue)), ("SPECVIZ_CACHE", str(cache)), ("SPECVIZ_COMPILE", "0")):
        monkeypatch.setenv(name, value)
    finished: dict = {}
    worker = threading.Thread(target=lambda: finished.update(result=compile_worker.run_worker("built-a", threads=1)))
    worker.start()
    started = time.monotonic()
    while not [path for path in cache.rglob("*lock*") if path.is_file()] and time.monotonic() - started < 180:
        time.sleep(0.05)
    locks = [path for path in cache.rglob("*lock*") if path.is_file()]
    assert locks, f"the worker took no lock file in {cache} within 3 minutes (does the kernel build still take one?)"
    try:
        with compile_worker.paused():
            stopped = "T" in group_states(compile_worker._worker.process.pid) if compile_worker._worker else False
            load_other = (
                "from specviz.models.catalogue import load_catalogue; from specviz.models.loading import load_pair; "
                "c = load_catalogue(); p = load_pair('built-b', c.get('built-b'), c.offline_pairs()); "
                "print(type(p.target.model.model.layers[0].mlp.down_proj).__name__, p.target.form)"
            )
            loading = subprocess.run([sys.executable, "-c", load_other], capture_output=True, text=True, timeout=400)
        assert not stopped, f"the worker was stopped while it held {locks}"
        assert loading.returncode == 0, loading.stderr[-2000:]
        assert loading.stdout.split()[-1:] == ["w4a8"] and not loading.stdout.startswith("Linear"), (
            f"the other pair did not load in w4a8 (so nothing waited on the kernel): {loading.stdout!r}"
        )
    finally:
        worker.join(timeout=400)
    assert finished.get("result") == ({}, None), (
        f"the worker's end: {finished}, its log: {compile_worker.log_path('built-a').read_text()[-2000:]}"
    )
