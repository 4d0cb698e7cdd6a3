"""Compiling happens in a worker process (serving/compile_worker.py); the serving process only loads packages.

What is checked here without compiling anything: a worker that stops leaves no package and is reported in one
sentence while the pair keeps serving eager; a pair switches engines between requests, never inside one; and a
request says which engine ran it. (The compiled path end to end, from an empty cache in a browser, is
tests/test_first_start.py; compiling itself, tests/test_fast_path.py.)
"""

from __future__ import annotations

import logging
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


def test_a_timed_run_stops_the_worker_and_every_process_it_started_then_lets_it_go_on(monkeypatch):
    """`paused` (a measured Run, γ auto's measurement) stops the worker's whole process group: on 2 cores the lowest
    priority still took a core from the run's two threads. Nested holders keep it stopped until the last leaves."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    if sys.platform != "linux":
        pytest.skip("reads process states from /proc")
    worker = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'while True: pass']); "
         "print(flush=True)\nwhile True: pass"],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    worker.stdout.readline()  # its child has started

    def states() -> set[str]:
        found = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == worker.pid:  # the process group
                found.add(fields[0])
        return found

    monkeypatch.setattr(compile_worker, "_worker", worker)
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
