"""Compiling a pair's packages in a child process, so the serving process only ever loads finished ones.

Exporting a model for AOTInductor traces its modules, and tracing patches module calls for the whole process: a
request running beside it in the same process breaks the trace, and the trace breaks the request (on an empty cache
the app's first Run never finished). So the app never compiles. A worker (`python -m specviz.serving.compile_worker
PAIR --threads N`) loads the pair as the app did, compiles the packages the cache lacks into specviz's cache folder
(each written whole or not at all, engine/aot_step.compile_package), prints what it cost as one JSON line and exits.

In the app, workers run one at a time and at the lowest priority, in a process group of their own, and a measured
run stops the worker's group while its clock runs (`paused`: SIGSTOP, then SIGCONT): on 2 cores the lowest priority
still took a core from the run's two threads (three identical compiled Runs read 1.61–2.03× while the server compiled
its other pairs, benchmarks/results/first_start.json). A run is still flagged if anything else took the processor
(run/machine_load.py). The app loads the packages between requests once the worker has finished
(serving/pair_cache.py). The worker's own output goes to a log file in specviz's cache.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

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
_worker: subprocess.Popen | None = None  # the running worker, whose process group `paused` stops
_pause_lock = threading.Lock()
_pauses = 0  # how many timed sections hold the worker stopped now


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The running worker, with every process it started, stopped for the duration (a timed run's clock); nothing
    where no worker runs. Nested and concurrent holders are counted: the worker continues when the last one leaves."""
    global _pauses
    with _pause_lock:
        _pauses += 1
        if _pauses == 1:
            _signal_worker(signal.SIGSTOP)
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0:
                _signal_worker(signal.SIGCONT)


def _signal_worker(number: int) -> None:
    worker = _worker
    if worker is None or worker.poll() is not None or os.name != "posix":
        return
    try:
        os.killpg(worker.pid, number)  # its group: Inductor's C++ compiles run in child processes
    except (ProcessLookupError, PermissionError):
        pass


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
    log = log_path(pair)
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "specviz.serving.compile_worker", pair, "--threads", str(threads)]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")]))}
    global _worker
    with log.open("w") as log_file:
        _working.set()
        try:
            worker = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
                env=environment,
                preexec_fn=_lowest_priority if os.name == "posix" else None,
                start_new_session=os.name == "posix",  # a process group of its own, for `paused`
            )
            with _pause_lock:
                _worker = worker
                if _pauses:  # started while a run's clock runs: it waits for that run
                    _signal_worker(signal.SIGSTOP)
            output, _ = worker.communicate()
        except OSError as error:
            return None, f"the compile worker for {pair} could not start ({error}), so {pair} keeps running eager"
        finally:
            with _pause_lock:
                _worker = None
            _working.clear()
    lines = output.strip().splitlines()
    if worker.returncode != 0 or not lines:
        return None, (
            f"compiling {pair}'s packages stopped (the worker exited with {worker.returncode}; its log is {log}), "
            f"so {pair} keeps running eager"
        )
    return json.loads(lines[-1]), None


def _lowest_priority() -> None:
    """In the worker, before it runs: the lowest priority, and (on Linux) killed with the app, never left behind."""
    os.nice(19)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def remove_abandoned_scratch(folder: Path, older_than_s: float = 1800) -> None:
    """A worker killed while it compiled leaves its scratch folder (never a package: those appear whole, by rename)."""
    import shutil
    import time

    for scratch in folder.glob("tmp*"):
        if scratch.is_dir() and time.time() - scratch.stat().st_mtime > older_than_s:
            shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """The worker: load the pair, compile the packages its models lack, print their reports as one JSON line."""
    parser = argparse.ArgumentParser(description="Compile a catalogue pair's fast-path packages into specviz's cache.")
    parser.add_argument("pair")
    parser.add_argument("--threads", type=int, required=True, help="the serving process's torch thread count")
    args = parser.parse_args(argv)

    import torch

    from specviz.engine.aot_step import package_folder
    from specviz.engine.compiled import fast_models
    from specviz.models.catalogue import load_catalogue
    from specviz.models.loading import load_pair

    torch.set_num_threads(args.threads)
    catalogue = load_catalogue()
    pair = load_pair(args.pair, catalogue.get(args.pair), catalogue.offline_pairs(), progress=lambda message: None)
    remove_abandoned_scratch(package_folder())  # the pair loaded: Inductor's cache folder is specviz's now
    wanted = {role: fast for role, fast in fast_models(pair).items() if fast.report.compiled}
    reports = {role: vars(fast.warm_up()) for role, fast in wanted.items()}
    print(json.dumps(reports))
    return 0 if all(report["compiled"] for report in reports.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
