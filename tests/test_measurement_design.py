"""How specviz times a speedup on a noisy machine (issue 51), held without timing anything: the order methods are
interleaved in, how many rounds a Run measures, the median and spread every view reports, a Run that waits for the
server's background work (and background work that waits for a Run), and `bench --processes`' merge.

Nothing here reads a clock's real time: the waits are driven by events, so the tests pass on any machine.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from specviz.analysis.prompt_set import TimedRequest
from specviz.analysis.readings import Spread, median_index, spread_of
from specviz.cli.bench import auto_line, child_argv, measured_of
from specviz.deployment.benchmark import MethodResult, merge_processes, repeat_speedups
from specviz.run.timing_conditions import rounds_that_fit, slice_order
from specviz.serving import measuring_slot
from specviz.ui import runs
from specviz.ui.sessions import Sessions


def test_slices_alternate_the_order_so_each_method_is_first_as_often_as_last():
    methods = ["autoregressive", "speculative γ 2", "speculative γ 4"]
    orders = [slice_order(methods, index) for index in range(4)]
    assert orders[0] == methods and orders[1] == methods[::-1] and orders[2] == methods and orders[3] == methods[::-1]
    for method in methods:
        positions = [order.index(method) for order in orders]
        assert sum(positions) == (len(methods) - 1) * len(orders) / 2, f"{method} sits on average in the middle: {positions}"


@pytest.mark.parametrize(
    ("first_s", "budget_s", "expected"),
    [
        (1.0, 4.0, 3),  # four fit: odd, so three
        (0.5, 4.0, 5),  # eight fit: at most five
        (3.0, 4.0, 1),  # one fits
        (9.0, 4.0, 1),  # none fits: the one already measured
        (1.0, 0.0, 1),  # no budget (the tests' and lessons' single round)
    ],
)
def test_a_run_measures_an_odd_number_of_rounds_within_its_budget(first_s, budget_s, expected):
    assert rounds_that_fit(first_s, budget_s, most=5) == expected


def test_the_spread_is_the_farthest_round_from_the_median():
    rounds = spread_of([1.40, 1.48, 1.51])
    assert rounds.median == 1.48 and rounds.spread == pytest.approx(0.08)
    assert rounds.relative == pytest.approx(0.08 / 1.48)
    assert rounds.text() == "1.48× ± 0.08"
    assert rounds.steady, "every round within 10 % of the median"
    assert not Spread((1.0, 1.5, 1.6)).steady, "a round 0.5 from a median of 1.5 is a third away"


def test_a_single_round_has_no_spread_and_stopped_rounds_are_left_out():
    assert spread_of([1.3]).spread is None and spread_of([1.3]).text() == "1.30×"
    assert spread_of([None, 1.2, None]).values == (1.2,)
    assert spread_of([]) is None and spread_of([None]) is None


def test_the_median_is_always_a_measured_round():
    assert median_index([3.0, 1.0, 2.0]) == 2
    assert median_index([4.0, 1.0, 3.0, 2.0]) == 3, "of an even count, the lower middle one (2.0)"
    assert Spread((4.0, 1.0, 3.0, 2.0)).median == 2.0


def test_bench_speedups_per_repeat_pair_each_repeat_with_the_baseline_requests_beside_it():
    baseline, ours = MethodResult("autoregressive", None), MethodResult("speculative", 4)
    # two prompts × three repeats: the target alone at 100 tokens/s throughout, ours at 150, 160 and 120
    for rate in (150, 160, 120):
        for _ in range(2):
            baseline.timed.append(TimedRequest(100, 1.0))
            ours.timed.append(TimedRequest(rate, 1.0))
    repeated = repeat_speedups(ours, baseline, repeats=3)
    assert repeated.values == pytest.approx((1.5, 1.6, 1.2))
    assert repeated.median == pytest.approx(1.5) and repeated.spread == pytest.approx(0.3)


def test_bench_processes_merge_to_the_median_process_per_row():
    def result(speedup: float, identical: bool = True) -> dict:
        rows = [
            {"method": "autoregressive", "gamma": None, "speedup": 1.0},
            {"method": "speculative", "gamma": 4, "tree": None, "verification": "exact", "speedup": speedup},
        ]
        rows[1]["decode_speedup"] = speedup * 1.1
        return {"rows": rows, "greedy_identical": identical, "transformers_identical": None, "engine": "compiled"}

    merged = merge_processes([result(1.5), result(1.2), result(1.45, identical=False)])
    row = merged["rows"][1]
    assert row["speedup"] == 1.45 and row["speedup_spread_processes"] == pytest.approx(0.25)
    assert row["speedup_by_process"] == [1.5, 1.2, 1.45] and merged["processes"] == 3
    assert row["decode_speedup"] == pytest.approx(1.45 * 1.1), "the speedup while decoding: the median process's too"
    assert row["decode_speedup_by_process"] == pytest.approx([1.65, 1.32, 1.595])
    assert merged["greedy_identical"] is False, "identical only if every process wrote the target's own output"
    assert merged["transformers_identical"] is None


def test_gamma_auto_is_set_beside_the_speedup_it_predicts_while_decoding():
    rows = [
        {"method": "autoregressive", "gamma": None, "speedup": 1.0, "decode_speedup": 1.0},
        {"method": "speculative", "gamma": 2, "tree": None, "speedup": 1.14, "decode_speedup": 1.30},
        {"method": "speculative", "gamma": 3, "tree": None, "speedup": 1.10, "decode_speedup": 1.25},
    ]
    measured = measured_of(rows, SimpleNamespace(gamma=2, tree=None))
    assert measured == {"measured_speedup": 1.14, "measured_decode_speedup": 1.30}, "γ 2's row, not γ 3's"
    line = auto_line("γ 2", 1.32, measured)
    assert "predicted 1.32× while decoding, measured 1.30× (0.98 of it); 1.14× with the prompt's prefill" in line
    assert "measured n/a" in auto_line("γ 4", 1.32, measured_of(rows, SimpleNamespace(gamma=4, tree=None)))


def test_each_bench_process_runs_the_same_command_without_processes_and_with_json():
    assert child_argv(["bench", "--processes", "5", "--gamma", "4"]) == ["bench", "--gamma", "4", "--json"]
    assert child_argv(["bench", "--processes=3", "--json"]) == ["bench", "--json"]


@pytest.fixture
def quick_polls(monkeypatch):
    monkeypatch.setattr(measuring_slot, "POLL_S", 0.01)


def test_a_measurement_waits_for_background_work_and_is_told_what_it_waits_for(quick_polls):
    loading, release, measured = threading.Event(), threading.Event(), threading.Event()
    told: list[str] = []

    def load() -> None:
        with measuring_slot.background_work("loading pycode-plain"):
            loading.set()
            release.wait(10)

    def measure() -> None:
        with measuring_slot.measuring(waiting=told.append):
            measured.set()

    loader = threading.Thread(target=load)
    loader.start()
    assert loading.wait(10)
    measurer = threading.Thread(target=measure)
    measurer.start()
    assert not measured.wait(0.2), "a measurement must not start while the server loads a pair"
    assert told and told[-1] == "loading pycode-plain", f"the waiting measurement is told why: {told}"
    release.set()
    assert measured.wait(10), "…and starts once the load is done"
    loader.join(10)
    measurer.join(10)
    assert measuring_slot.background_now() == "" and not measuring_slot.slot_is_busy()


def test_background_work_waits_while_a_measurement_runs(quick_polls):
    inside, release, started = threading.Event(), threading.Event(), threading.Event()

    def measure() -> None:
        with measuring_slot.measuring():
            inside.set()
            release.wait(10)

    def load() -> None:
        with measuring_slot.background_work("loading a pair"):
            started.set()

    measurer = threading.Thread(target=measure)
    measurer.start()
    assert inside.wait(10)
    loader = threading.Thread(target=load)
    loader.start()
    assert not started.wait(0.2), "a load must not start while a Run is timed"
    release.set()
    assert started.wait(10), "…and starts when the Run's clock stops"
    measurer.join(10)
    loader.join(10)


def test_a_run_says_it_waits_for_the_background_load(quick_polls):
    sessions = Sessions()
    ticket = sessions.start("a")
    loading, release = threading.Event(), threading.Event()

    def load() -> None:
        with measuring_slot.background_work("loading qwen2.5-coder-0.5b-1.5b"):
            loading.set()
            release.wait(10)

    loader = threading.Thread(target=load)
    loader.start()
    assert loading.wait(10)
    updates = runs.background_updates(ticket, sessions, poll_s=0.01)
    first = next(updates)
    assert "loading qwen2.5-coder-0.5b-1.5b" in first.status and "never timed beside it" in first.status
    release.set()
    assert list(updates) == [], "once the load is done the wait ends without another word"
    loader.join(10)


def test_every_timed_section_runs_on_the_servers_one_timed_thread(bundled_pair, monkeypatch):
    """The two modes' fix (serving/torch_threads.py): Runs asked for by different request threads, and γ auto's
    calibration, all run on the same long-lived thread, so one OpenMP team is alive while the clock runs; a bad prompt
    is refused in the asking thread, without queueing for that thread."""
    from specviz.engine.settings import DecodeSettings
    from specviz.serving import recorder, torch_threads

    ran_on: list[threading.Thread] = []
    monkeypatch.setattr(recorder, "_record", lambda *args: ran_on.append(threading.current_thread()))
    askers = [threading.Thread(target=recorder.measure_run, args=(bundled_pair, "def f():", DecodeSettings())) for _ in range(2)]
    for asker in askers:
        asker.start()
        asker.join(30)
    ran_on.append(recorder.timed_quietly(threading.current_thread))  # γ auto's calibration and the score panel's timing
    assert len(ran_on) == 3 and len(set(ran_on)) == 1, f"every timed section on one thread, got {ran_on}"
    assert ran_on[0].name.startswith(torch_threads.TIMED_THREAD_NAME) and ran_on[0] not in askers
    with pytest.raises(ValueError):
        recorder.measure_run(bundled_pair, "x" * 30_000, DecodeSettings())
    assert len(ran_on) == 3, "a refused prompt never reaches the timed thread"


def test_a_loads_torch_work_runs_on_threads_that_end_with_each_stage(bundled_pair, monkeypatch):
    """A pair's load (converting, compiled packages, warm-up runs) runs each stage on a thread of its own that has
    ended when the stage returns: a load that steps aside for a Run leaves no OpenMP team alive beside the timed one."""
    from specviz.models import loading
    from specviz.serving import pair_cache

    stages: list[tuple[str, threading.Thread]] = []

    def stage(name, result=None):
        def run(*args, **kwargs):
            stages.append((name, threading.current_thread()))
            return result

        return run

    monkeypatch.setattr(pair_cache, "fetch_in_subprocess", lambda name: None)
    monkeypatch.setattr(loading, "load_pair", stage("load", bundled_pair))
    monkeypatch.setattr(pair_cache, "compile_in_background", stage("compile"))
    monkeypatch.setattr(pair_cache, "_run_through", stage("warm-up"))
    monkeypatch.setattr(pair_cache, "pair_load_times", lambda pair: {})
    monkeypatch.setattr(pair_cache, "_admit", lambda name, pair: pair_cache._loaded.__setitem__(name, pair))
    name = "a-pair-loaded-in-stages"
    monkeypatch.setitem(pair_cache._loaded, name, None)
    del pair_cache._loaded[name]  # monkeypatch removes what the load adds
    monkeypatch.setattr(pair_cache, "catalogue", lambda: SimpleNamespace(get=lambda _name: None, offline_pairs=dict))
    assert pair_cache.get_pair(name) is bundled_pair
    assert [what for what, _ in stages] == ["load", "compile"] + ["warm-up"] * 4
    threads = [thread for _, thread in stages]
    assert len(set(threads)) == len(threads), "each stage on a thread of its own"
    assert threading.current_thread() not in threads and not any(thread.is_alive() for thread in threads)


def test_the_server_and_the_commands_keep_openmps_default_wait_policy():
    """No OpenMP setting of ours: the server's one timed thread spins between regions as a command's main thread does
    (the sleeping mode cost the coder target a quarter of its pace, docs/performance.md "Two modes")."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    environment = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    code = "import os, sys, app, specviz.cli; print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], env=environment, cwd=root, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "None False", f"no wait policy set and torch not loaded by the page, got {done.stdout!r}"


def test_a_run_queued_for_the_timed_thread_already_holds_a_load_back(quick_polls):
    """A Run announced while it waits for the timed thread (behind another measurement) counts as waiting: a load that
    reaches its next pause point steps aside until the Run is done, instead of starting another stage meanwhile."""
    entered, at_pause_point, stepped_aside = threading.Event(), threading.Event(), []

    def load() -> None:
        with measuring_slot.background_work("loading a big pair"):
            entered.set()
            at_pause_point.wait(10)
            stepped_aside.append(measuring_slot.pause_point())

    loader = threading.Thread(target=load)
    loader.start()
    assert entered.wait(10)
    with measuring_slot.announced():
        at_pause_point.set()
        for _ in range(1000):  # until the load has left the running work at its pause point
            if not measuring_slot.background_now():
                break
            threading.Event().wait(0.01)
        assert measuring_slot.background_now() == "", "the load stepped aside for the announced Run"
        assert loader.is_alive(), "…and waits while the Run is announced"
    loader.join(10)
    assert stepped_aside == [True], "the load resumed once the Run was done"


def test_a_background_load_steps_aside_at_its_next_stage_for_a_waiting_run(quick_polls):
    """A Run waits for one stage of a load at most: at the load's next pause point it no longer counts as running."""
    stage_started, finish_stage, measured, load_done = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    order: list[str] = []

    def load() -> None:
        with measuring_slot.background_work("loading a big pair"):
            order.append("stage 1")
            stage_started.set()
            finish_stage.wait(10)
            if measuring_slot.pause_point():  # returns once the Run is done
                order.append("resumed after stepping aside")
            order.append("stage 2")
        load_done.set()

    def measure() -> None:
        with measuring_slot.measuring():
            order.append("measured")
            measured.set()

    loader = threading.Thread(target=load)
    loader.start()
    assert stage_started.wait(10)
    measurer = threading.Thread(target=measure)
    measurer.start()
    assert not measured.wait(0.1), "the Run waits while the stage under way runs"
    finish_stage.set()
    assert measured.wait(10) and load_done.wait(10)
    assert order == ["stage 1", "measured", "resumed after stepping aside", "stage 2"], f"the load stepped aside: {order}"
    assert not measuring_slot.pause_point(), "outside background work a pause point does nothing"
    loader.join(10)
    measurer.join(10)


def test_a_run_measures_alternating_rounds_and_keeps_the_median_one(bundled_pair, monkeypatch):
    """The recorder's rounds, with the runs faked: five fit the budget, each numbered for slice_order, and the trace is
    the median round's, carrying every round's speedup (its spread)."""
    from types import SimpleNamespace

    from specviz.engine import DecodeSettings
    from specviz.serving import recorder

    speedups = iter([1.30, 1.60, 1.45, 1.10, 1.50])
    numbered: list[int] = []

    def fake_round(pair, prompt, settings, drafter, should_stop, index, peaks=None):
        numbered.append(index)
        summary = SimpleNamespace(new_tokens=8, index=index)
        return SimpleNamespace(
            started=None, cycles=[], summary=summary, baseline_steps=[], baseline=summary, seconds=0.5, speedup=next(speedups)
        )

    monkeypatch.setattr(recorder, "_round", fake_round)
    monkeypatch.setattr(recorder, "warm_up", lambda *args, **kwargs: False)
    trace = recorder.measure_run(bundled_pair, "def main():\n", DecodeSettings(max_new_tokens=8, gamma=2))
    assert numbered == [0, 1, 2, 3, 4], "rounds numbered in order: slice_order alternates S A and A S by the number"
    assert trace.round_speedups == (1.30, 1.60, 1.45, 1.10, 1.50)
    assert trace.summary.index == 2, "the trace played back is the median round's (1.45×)"
    assert spread_of(trace.round_speedups).text() == "1.45× ± 0.35"


def test_bench_says_each_rows_spread_and_warns_past_ten_percent():
    from specviz.cli.bench import spread_lines

    steady = {"method": "speculative", "gamma": 4, "tree": None, "speedup_by_repeat": [1.45, 1.48, 1.50]}
    moved = {"method": "speculative-tree", "gamma": None, "tree": "2x1:1", "speedup_by_repeat": [1.0, 1.5, 1.6]}
    lines = spread_lines([{"method": "autoregressive", "gamma": None}, steady], repeats=3)
    assert lines == ["speculative (γ 4): 1.48× ± 0.03 over 3 repeats"], lines
    warned = spread_lines([steady, moved], repeats=3)
    assert warned[-1].startswith("⚠ unsteady") and "speculative-tree (tree 2x1:1) 33 %" in warned[-1], warned


def test_a_run_takes_the_memory_read_rate_just_before_and_after_its_rounds_never_inside(bundled_pair, monkeypatch):
    """Which state the machine was in (docs/performance.md, "The machine's two states"): the read rate is taken right
    before the first round and after the last, never between rounds, and travels in the trace."""
    from types import SimpleNamespace

    from specviz.analysis import cache_fit
    from specviz.engine import DecodeSettings
    from specviz.serving import recorder

    events: list[str] = []
    taken: list[float] = []

    def fake_round(pair, prompt, settings, drafter, should_stop, index, peaks=None):
        events.append("round")
        summary = SimpleNamespace(new_tokens=8, index=index)
        return SimpleNamespace(
            started=None, cycles=[], summary=summary, baseline_steps=[], baseline=summary, seconds=0.5, speedup=1.2
        )

    def read_rate() -> float:
        events.append("rate")
        taken.append(35.0 + 29 * len(taken))
        return taken[-1]

    monkeypatch.setattr(recorder, "_round", fake_round)
    monkeypatch.setattr(recorder, "warm_up", lambda *args, **kwargs: False)
    monkeypatch.setattr(cache_fit, "read_rate_now_gb_s", read_rate)
    trace = recorder.measure_run(bundled_pair, "def main():\n", DecodeSettings(max_new_tokens=8, gamma=2))
    rounds = events.count("round")
    assert rounds > 1 and events == ["rate", *["round"] * rounds, "rate"], events
    assert trace.memory_read_gb_s == tuple(taken) == (35.0, 64.0)
