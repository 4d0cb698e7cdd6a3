"""Compiling a pair's packages in a child process, so the serving process only ever loads finished ones.

Exporting a model for AOTInductor traces its modules, and tracing patches module calls for the whole process: a
request running beside it in the same process breaks the trace, and the trace breaks the request (on an empty cache
the app's first Run never finished). So the app never compiles. A worker (`python -m specviz.serving.compile_worker
PAIR --threads N --report FILE`) loads the pair as the app did, compiles the packages the cache lacks into specviz's
cache folder (each written whole or not at all, engine/aot_step.compile_package), writes what it cost to FILE as JSON
and exits; everything it says goes to a log file in specviz's cache. A missing or malformed report is one sentence.

In the app, workers run one at a time and at the lowest priority, in a session (process group) of their own, started
without `preexec_fn` (unsafe in a threaded server), and a measured run stops the worker's group while its clock runs
(`paused`: SIGSTOP, then SIGCONT): on 2 cores the lowest priority still took a core from the run's two threads (three
identical compiled Runs read 1.61–2.03× while the server compiled its other pairs, benchmarks/results/first_start.json).
A worker is never stopped while it may hold a lock the server waits on: a native kernel's build takes its lock inside
a critical section of specviz/process/pause_gate.py (kernels/build.load_library). A timed section waits for it to
leave the section (`wait_for_build` before its warm-up, `paused(wait_s=...)` for its clock, the page saying why:
`building`), up to BUILD_WAIT_MAX_S each; past that it is timed beside the build and flagged, as it is whenever anything else took the processor (process/machine_load.py). The rest of its pair's
load is stopped like its compiling: it once ran whole inside a critical section, and a Run timed beside it on an
empty cache read its pair at 6 tokens/s instead of about 200 (benchmarks/results/first_start.json, before this change). Inductor's own cache locks are
taken only while compiling, and the server never compiles, so a worker stopped there blocks nobody. The app loads the
packages between requests once the worker has finished (serving/pair_cache.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from specviz.process import pause_gate
from specviz.process.logs import configure as configure_logging

log = logging.getLogger(__name__)

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds `specviz/`
Done = Callable[[dict | None, str | None], None]  # (each model's compile report, or None; why it stopped, or None)


@dataclass(frozen=True)
class CompileJob:
    pair: str
    threads: int  # the serving process's torch thread count: Inductor writes it into the package (and its key)
    done: Done


_jobs: queue.Queue[CompileJob] = queue.Queue()
_runner: threading.Thread | None = None
_runner_lock = threading.Lock()
_working = threading.Event()  # set while a worker process runs


@dataclass
class RunningWorker:
    """The running worker, whose process group `paused` stops, and the gate it shares with this process."""

    process: subprocess.Popen
    gate: Path  # specviz/process/pause_gate.py: the worker holds it while it must not be stopped
    held: IO | None = None  # the gate, while this process keeps the worker stopped


_worker: RunningWorker | None = None
_pause_lock = threading.Lock()
_pauses = 0  # how many timed sections want the worker stopped now

BUILD_WAIT_MAX_S = 120.0  # a timed section waits this long at most for a kernel's build to end (~25 s on 2 cores)
GATE_POLL_S = 0.1


@contextlib.contextmanager
def paused(wait_s: float = 0.0, should_stop: Callable[[], bool] = lambda: False) -> Iterator[None]:
    """The running worker, with every process it started, stopped for the duration (a timed run's clock); nothing
    where no worker runs. Inside a critical section (it may hold a lock this process waits on) it is not stopped: the
    first holder waits up to `wait_s` for it to leave (or until `should_stop`), and past that the worker runs on and
    the run is flagged like any other load. Nested and concurrent holders are counted: the worker continues when the
    last one leaves."""
    global _pauses
    with _pause_lock:
        _pauses += 1
        first = _pauses == 1
    try:
        if first:
            _stop_when_stoppable(time.monotonic() + wait_s, should_stop)
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _worker is not None:
                _resume(_worker)


def wait_for_build(wait_s: float, should_stop: Callable[[], bool] = lambda: False) -> None:
    """Return once the worker is outside a critical section (a kernel's build), after `wait_s` at most or once
    `should_stop`: a Run waits here before it warms up, so that neither its warm-up nor its clock runs beside a build."""
    deadline = time.monotonic() + wait_s
    while building() and time.monotonic() < deadline and not should_stop():
        time.sleep(GATE_POLL_S)


def _stop_when_stoppable(deadline: float, should_stop: Callable[[], bool]) -> None:
    """SIGSTOP to the running worker's group once this process holds the gate, which the worker holds inside a
    critical section: polled until `deadline` (a time.monotonic()) or `should_stop`, without `_pause_lock`, so that
    other sessions' `building` and the worker's own end are not held up meanwhile."""
    with _pause_lock:
        worker = _worker
    if worker is None or os.name != "posix":
        return
    held = pause_gate.try_hold(worker.gate)
    while held is None and worker.process.poll() is None and time.monotonic() < deadline and not should_stop():
        time.sleep(GATE_POLL_S)
        held = pause_gate.try_hold(worker.gate)
    if held is None:
        if worker.process.poll() is None:
            log.info("the compile worker is in a critical section (building a kernel): not stopped, the run is flagged")
        return
    with _pause_lock:
        if worker is _worker:
            _stop_holding(worker, held)
            return
    pause_gate.release(held)  # that worker ended meanwhile (a new one started stopped, in _run)


def _stop_holding(worker: RunningWorker, held: IO) -> None:
    """SIGSTOP to the worker's process group, keeping `held` (the gate) until `_resume`; under `_pause_lock`."""
    if worker.held is not None or worker.process.poll() is not None:
        pause_gate.release(held)
        return
    worker.held = held
    _signal_group(worker, signal.SIGSTOP)


def _resume(worker: RunningWorker) -> None:
    """SIGCONT to the worker's group, then the gate back (the worker may enter a critical section again)."""
    if worker.held is None:
        return
    _signal_group(worker, signal.SIGCONT)
    pause_gate.release(worker.held)
    worker.held = None


def _signal_group(worker: RunningWorker, number: int) -> None:
    try:
        os.killpg(worker.process.pid, number)  # its group: Inductor's C++ compiles run in child processes
    except (ProcessLookupError, PermissionError):
        pass


def building() -> bool:
    """Whether the worker is inside a critical section now (building a native kernel): a Run waits for it to leave."""
    with _pause_lock:
        worker = _worker
        if worker is None or worker.held is not None or worker.process.poll() is not None or os.name != "posix":
            return False
        probe = pause_gate.try_hold(worker.gate)
        if probe is None:
            return True
        pause_gate.release(probe)
        return False


def busy() -> bool:
    """Whether a worker is compiling now: its processor time shows in every run measured meanwhile (flagged)."""
    return _working.is_set()


def submit(pair: str, threads: int, done: Done) -> None:
    """Compile the pair's missing packages in a worker process after the ones already asked for; `done` is called
    from a background thread when the worker has exited."""
    global _runner
    _jobs.put(CompileJob(pair, threads, done))
    with _runner_lock:
        if _runner is None or not _runner.is_alive():
            _runner = threading.Thread(target=_run_jobs, name="specviz-compile-jobs", daemon=True)
            _runner.start()


def _run_jobs() -> None:
    while True:
        job = _jobs.get()
        reports, failure = run_worker(job.pair, job.threads)
        job.done(reports, failure)


def log_path(pair: str) -> Path:
    from specviz.models.sources import cache_root

    return cache_root() / "logs" / f"compile-{pair}.log"


def run_worker(pair: str, threads: int) -> tuple[dict | None, str | None]:
    """Run one worker to its end: (each model's compile report, None), or (None, one sentence saying why it stopped)."""
    log_file_path = log_path(pair)
    log_file_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="specviz-compile-") as scratch:
        report, gate = Path(scratch) / "report.json", Path(scratch) / "gate"
        command = [
            sys.executable, "-m", "specviz.serving.compile_worker", pair,
            "--threads", str(threads), "--report", str(report), "--parent", str(os.getpid()),
        ]  # fmt: skip
        environment = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")])),
            pause_gate.ENVIRONMENT: str(gate),
        }
        exit_code = _run(pair, command, environment, gate, log_file_path)
        if isinstance(exit_code, str):
            return None, exit_code
        return read_report(pair, report, exit_code, log_file_path)


def _run(pair: str, command: list[str], environment: dict, gate: Path, log_file_path: Path) -> int | str:
    """The worker run to its end, stopped while timed sections ask: its exit code, or why it could not start."""
    global _worker
    with log_file_path.open("w") as log_file:
        _working.set()
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=environment,
                start_new_session=os.name == "posix",  # a process group of its own, for `paused` (no preexec_fn: threads)
            )
        except OSError as error:
            _working.clear()
            return f"the compile worker for {pair} could not start ({error}), so {pair} keeps running eager"
        try:
            if os.name == "posix":
                with contextlib.suppress(OSError):
                    os.setpriority(os.PRIO_PROCESS, process.pid, 19)  # the lowest; what it starts inherits it
            with _pause_lock:
                _worker = RunningWorker(process, gate)
                if _pauses and os.name == "posix":  # started while a run's clock runs: it waits for that run
                    held = pause_gate.try_hold(gate)  # free: a worker just started is in no critical section yet
                    if held is not None:
                        _stop_holding(_worker, held)
            return process.wait()
        finally:
            with _pause_lock:
                if _worker is not None:
                    _resume(_worker)
                _worker = None
            _working.clear()


def read_report(pair: str, report: Path, exit_code: int, log_file_path: Path) -> tuple[dict | None, str | None]:
    """The worker's reports from the file it wrote, checked; or one sentence naming what went wrong and what the worker
    said last (its log holds the rest)."""
    failed = (
        f"compiling {pair}'s packages stopped (the worker exited with {exit_code}; its log is {log_file_path}), "
        f"so {pair} keeps running eager"
    )
    if exit_code != 0 or not report.is_file():
        return None, failed if exit_code != 0 else failed.replace("stopped (", "left no report (", 1)
    try:
        reports = json.loads(report.read_text())
    except (OSError, ValueError) as error:
        return (
            None,
            f"the compile worker for {pair} wrote a report that is not JSON ({error}; its log is {log_file_path}), so {pair} keeps running eager",
        )
    if not isinstance(reports, dict) or not all(isinstance(value, dict) for value in reports.values()):
        return (
            None,
            f"the compile worker for {pair} wrote a report of the wrong shape (its log is {log_file_path}), so {pair} keeps running eager",
        )
    return reports, None


def _tie_to_parent(parent: int | None) -> None:
    """In the worker: killed with the app on Linux (never left behind), and gone at once if the app already is."""
    if parent is None or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the app exited before the line above: nobody would kill this worker
        sys.exit(1)


def remove_abandoned_scratch(folder: Path, older_than_s: float = 1800) -> None:
    """A worker killed while it compiled leaves its scratch folder (never a package: those appear whole, by rename)."""
    import shutil
    import time

    for scratch in folder.glob("tmp*"):
        if scratch.is_dir() and time.time() - scratch.stat().st_mtime > older_than_s:
            shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """The worker: load the pair, compile the packages its models lack, write their reports as JSON."""
    parser = argparse.ArgumentParser(description="Compile a catalogue pair's fast-path packages into specviz's cache.")
    parser.add_argument("pair")
    parser.add_argument("--threads", type=int, required=True, help="the serving process's torch thread count")
    parser.add_argument("--report", type=Path, required=True, help="the file to write the reports to (JSON)")
    parser.add_argument("--parent", type=int, help="the app's process id: the worker dies with it (Linux)")
    args = parser.parse_args(argv)
    _tie_to_parent(args.parent)
    configure_logging()

    import torch

    from specviz.engine.aot_step import package_folder
    from specviz.engine.compiled import fast_models
    from specviz.models.catalogue import load_catalogue
    from specviz.models.loading import load_pair

    torch.set_num_threads(args.threads)
    catalogue = load_catalogue()
    # Loading may be stopped like compiling: the one lock it can take that the server waits on, a native kernel's build
    # lock, is taken inside the build's own critical section (kernels/build.load_library); the server loaded this pair
    # before it asked for its packages, so its files are fetched already.
    pair = load_pair(args.pair, catalogue.get(args.pair), catalogue.offline_pairs(), progress=log.info)
    remove_abandoned_scratch(package_folder())  # the pair loaded: Inductor's cache folder is specviz's now
    wanted = {role: fast for role, fast in fast_models(pair).items() if fast.report.compiled}
    reports = {role: vars(fast.warm_up()) for role, fast in wanted.items()}
    partial = args.report.with_suffix(".partial")
    partial.write_text(json.dumps(reports))
    os.replace(partial, args.report)  # whole or not at all
    return 0 if all(report["compiled"] for report in reports.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
