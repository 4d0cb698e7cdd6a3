"""The app's controller in wall time, without a browser: what the tests check on a fake clock, timed for real.

    python benchmarks/controller_timings.py

Prints (never asserts: this machine's speed varies from run to run) how closely playback keeps the recorded
pace, how soon it stops, how long a hold adds, how soon a retired run's generator ends, how fast bad input and
an offline hub model are refused, and what machine_load makes of processes spinning beside it. Each line says
what the app promises, so a reader can judge the number.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.results import write_results  # noqa: E402

SPIN = "import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"
PROMPT = "def parse(text):\n    return"


def timed(function) -> tuple[float, object]:
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


def playback_numbers(trace) -> dict:
    from specviz.ui.playback import playback, recorded_s

    slowdown = 3.0 / recorded_s(trace)  # a 3 s playback, however fast this machine recorded the run
    took, _ = timed(lambda: list(playback(trace, slowdown, frame_interval_s=0.02)))
    stop_at = time.perf_counter() + 0.1
    stopped, _ = timed(lambda: list(playback(trace, slowdown, keep_going=lambda: time.perf_counter() < stop_at)))
    hold_until = time.perf_counter() + 0.4
    held, _ = timed(lambda: list(playback(trace, slowdown, frame_interval_s=0.02, hold=lambda: time.perf_counter() < hold_until)))
    return {
        "recorded_s": recorded_s(trace),
        "pace_3s_took_s": took,  # promise: 3 s, plus at most a frame interval
        "stop_after_0.1_s_took_s": stopped,  # promise: within 50 ms of the stop
        "hold_0.4_s_added_s": held - 3.0,  # promise: the hold, no less
    }


def takeover_s(pair_name: str) -> float:
    """A run retired by a newer one: seconds until its generator has ended (the app's takeover on the server side)."""
    from specviz.ui import runs
    from specviz.ui.request import RunRequest
    from specviz.ui.sessions import Sessions

    sessions = Sessions()
    ticket = sessions.start("s")
    slow = runs.run_and_play(RunRequest(pair_name, PROMPT, max_new_tokens=16, playback="50× slower"), ticket, sessions)
    for _ in range(4):
        next(slow)
    sessions.start("s")
    took, _ = timed(lambda: list(slow))
    return took


def refusals(pair) -> dict:
    """Bad input while another session holds the measuring slot, and a hub model on an offline machine."""
    import os

    from specviz.engine import DecodeSettings
    from specviz.models.catalogue import Pair, PairError
    from specviz.models.loading import load_pair
    from specviz.run.runner import PromptError
    from specviz.serving import recorder

    held, release = threading.Event(), threading.Event()

    def hold_the_slot():
        with recorder.MEASURING_SLOT:
            held.set()
            release.wait()

    holder = threading.Thread(target=hold_the_slot)
    holder.start()
    held.wait()
    started = time.perf_counter()
    for prompt in ("x" * 30_000, "word " * 5000):
        try:
            recorder.measure_run(pair, prompt, DecodeSettings())
        except PromptError:
            pass
    bad_input_s = time.perf_counter() - started
    release.set()
    holder.join()

    os.environ["HF_HUB_OFFLINE"] = "1"
    started = time.perf_counter()
    try:
        load_pair("hub", Pair(target="nobody/not-a-cached-model-7b", draft="nobody/not-a-cached-model-1b", description="x"), [])
    except PairError:
        pass
    return {"bad_input_refused_s": bad_input_s, "offline_hub_refused_s": time.perf_counter() - started}


def machine_load_numbers() -> dict:
    from specviz.process.machine_load import LoadMeter, quiet_cores, settle

    def spinning(n: int, seconds: float) -> list[subprocess.Popen]:
        processes = [subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=seconds)]) for _ in range(n)]
        time.sleep(0.3)  # past their start-up
        return processes

    def end(processes: list[subprocess.Popen]) -> None:
        for process in processes:
            process.kill()
            process.wait()

    processes = spinning(1, 3.0)
    try:
        with LoadMeter() as meter:
            time.sleep(1.0)
    finally:
        end(processes)
    processes = spinning(int(quiet_cores()) + 1, 10.0)
    try:
        waited = settle(min_s=0.1, max_s=1.5)
    finally:
        end(processes)
    stopped, _ = timed(lambda: settle(min_s=0.0, max_s=30.0, should_stop=lambda: True))
    return {
        "one_spinning_process_cores": meter.result.other_cores,  # ≈ 1 on an idle machine, plus any other job's share
        "settle_with_spinners_waited_s": waited,  # promise: the whole 1.5 s
        "settle_when_stopped_s": stopped,  # promise: at once
    }


def main() -> None:
    from specviz.engine import DecodeSettings
    from specviz.serving import pair_cache, recorder

    name = pair_cache.catalogue().default
    pair = pair_cache.get_pair(name)  # the app's cache: takeover_s's run finds it there
    trace = recorder.measure_run(pair, PROMPT, DecodeSettings(max_new_tokens=24, gamma=4))
    report = {"pair": name, **playback_numbers(trace), "retired_run_ended_s": takeover_s(name), **refusals(pair)}
    report |= machine_load_numbers()
    print(json.dumps(report, indent=2))
    write_results("controller_timings", report)


if __name__ == "__main__":
    main()
