"""Collecting a deployment's numbers from a loaded pair: requests' latency, memory, load times, batch rows, the report.

This is the torch side of specviz.deployment (with device.py, hardware.py and benchmark.py): it runs the engine,
loads models and starts the fresh processes cold starts are timed in. `run` and `report` read their numbers through
it, each method's requests kept as benchmark's MethodResult; the app's recorder reads memory from it. Nothing here is
timed inside a decoding run: load times and batch costs are measured before or after, never between a request's tokens.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from specviz.analysis.readings import readings_of
from specviz.analysis.score import scored_alpha
from specviz.deployment.batch import BatchRow, batch_rows
from specviz.deployment.benchmark import MethodResult
from specviz.deployment.device import cuda_peak_bytes, measure_batch_costs, reset_cuda_peak
from specviz.deployment.memory import LoadTimes, MemoryReport, ModelMemory, PairLoadTimes, estimated_memory_report
from specviz.deployment.report import DeploymentReport
from specviz.engine import DecodeSettings
from specviz.models.loading import LoadedPair, load_model
from specviz.runner import encode_prompt, run

CUDA_PEAK = "cuda max_memory_allocated"
ESTIMATED = "estimated from tensors"
COLD_SOURCE = "a fresh Python process, from disk: the target, then the draft (imports not counted)"
FIRST_LOAD_SOURCE = "the first load in this process (--cold-start times a fresh process)"
APP_LOAD_SOURCE = "the first load in the app's process"

# Models loaded one after the other in a fresh interpreter, as a deployment starts: each one's from_pretrained and
# move to the device, and the imports before them.
COLD_LOAD = """
import json, sys, time
started = time.perf_counter()
import torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging
logging.set_verbosity_error()
imported = time.perf_counter()
device, dtype, references = sys.argv[1], getattr(torch, sys.argv[2]), sys.argv[3:]
seconds, models = [], []
for reference in references:
    begun = time.perf_counter()
    models.append(AutoModelForCausalLM.from_pretrained(reference, dtype=dtype).to(device).eval())
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds.append(time.perf_counter() - begun)
print(json.dumps({"load_s": seconds, "import_s": imported - started}))
"""


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def model_memory(pair: LoadedPair) -> tuple[ModelMemory, ModelMemory]:
    """Each model's weight bytes and KV-cache bytes per token, in the pair's dtype."""
    return tuple(
        ModelMemory.of(loaded.reference, loaded.model.config, loaded.parameters, pair.dtype)
        for loaded in (pair.target, pair.draft)
    )


def memory_report(pair: LoadedPair, longest_length: int, gamma: int, peaks: Mapping | None = None) -> MemoryReport:
    """The pair's memory: CUDA's measured peaks when given ({"speculative": b, "autoregressive": b}), else the estimate."""
    target, draft = model_memory(pair)
    if peaks and peaks.get("speculative") and peaks.get("autoregressive"):
        return MemoryReport(target, draft, peaks["autoregressive"], peaks["speculative"], CUDA_PEAK)
    config = (pair.target.model.config, pair.draft.model.config)
    return estimated_memory_report(target, draft, *config, pair.dtype, longest_length, gamma)


@dataclass
class PeakTracker:
    """CUDA's allocator peak per method over many requests; on a CPU it stays empty and the report estimates.

    The draft's weights stay resident while the target runs alone, so the autoregressive peak is read minus them:
    what a deployment of the target alone would hold.
    """

    device: torch.device
    draft_weight_bytes: int
    peaks: dict[str, int] = field(default_factory=dict)

    def around(self, mode: str, request: Callable[[], list]) -> list:
        reset_cuda_peak(self.device)
        events = request()
        peak = cuda_peak_bytes(self.device)
        if peak is not None:
            if mode == "autoregressive":
                peak -= self.draft_weight_bytes
            self.peaks[mode] = max(self.peaks.get(mode, 0), peak)
        return events


def cold_load(
    references: Sequence[str], device: torch.device, dtype: torch.dtype, timeout_s: float = 900
) -> tuple[list[float], float]:
    """Each model's load seconds in a fresh Python process, loaded in this order, and the seconds of the imports."""
    result = subprocess.run(
        [sys.executable, "-c", COLD_LOAD, str(device), _dtype_name(dtype), *references],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if result.returncode != 0:
        said = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"loading {', '.join(references)} in a fresh process failed: {said}")
    timed = json.loads(result.stdout.strip().splitlines()[-1])
    return timed["load_s"], timed["import_s"]


def warm_load_s(reference: str, device: torch.device, dtype: torch.dtype) -> float:
    """Seconds to load a model again in this process (files in the page cache, code warm); the copy is freed at once."""
    loaded = load_model(reference, device, dtype)
    seconds = loaded.load_s
    del loaded
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return seconds


def load_times(pair: LoadedPair, cold_start: bool) -> tuple[PairLoadTimes, dict]:
    """Each model's cold and warm load, and how cold was measured (a fresh process, or this process's first load)."""
    models = (pair.target, pair.draft)
    if cold_start:
        cold, import_s = cold_load([m.reference for m in models], pair.device, pair.dtype)
        extra = {"cold_source": COLD_SOURCE, "import_s": import_s}
    else:
        cold, extra = [m.load_s for m in models], {"cold_source": FIRST_LOAD_SOURCE}
    warm = [warm_load_s(m.reference, pair.device, pair.dtype) for m in models]
    times = PairLoadTimes(LoadTimes(cold[0], warm[0]), LoadTimes(cold[1], warm[1]))
    return times, {**times.to_json(), **extra}


def measure_batches(pair: LoadedPair, gamma: int, batches: Sequence[int], alpha: float, repeats: int = 5) -> list[BatchRow]:
    """Step costs timed at each batch size on the pair's own weights, and the speedup they predict at α."""
    costs = measure_batch_costs(pair.target.model, pair.draft.model, pair.shared_vocab_size, gamma, batches, repeats=repeats)
    return batch_rows(costs, alpha, gamma)


@dataclass
class Requests:
    """Both methods over a prompt set, request by request (repeat-major): each one's latencies and summaries."""

    speculative: MethodResult = field(default_factory=lambda: MethodResult("speculative", None))
    autoregressive: MethodResult = field(default_factory=lambda: MethodResult("autoregressive", None))
    longest_length: int = 0  # prompt + new tokens, the longest any request reached


def run_requests(
    pair: LoadedPair,
    prompts: Sequence[str],
    settings: DecodeSettings,
    repeats: int,
    drafter: str = "model",
    peaks: PeakTracker | None = None,
    log: Callable[[str], None] = lambda line: None,
) -> Requests:
    """Every prompt `repeats` times by both methods, alternating which runs first (a slow drift hits both alike)."""
    requests = Requests()
    for repeat in range(repeats):
        for index, prompt in enumerate(prompts):
            length = len(encode_prompt(pair, prompt, settings.max_new_tokens, settings.gamma))
            order = ("autoregressive", "speculative") if (repeat + index) % 2 else ("speculative", "autoregressive")
            for mode in order:
                request = lambda mode=mode, prompt=prompt: list(run(pair, prompt, settings, mode=mode, drafter=drafter))  # noqa: E731
                summary = getattr(requests, mode).add(peaks.around(mode, request) if peaks else request())
                requests.longest_length = max(requests.longest_length, length + summary.new_tokens)
        log(f"  repeat {repeat + 1}/{repeats} done")
    return requests


def deployment_report(
    pair: LoadedPair,
    prompts: Sequence[str],
    settings: DecodeSettings,
    repeats: int,
    batches: Sequence[int] = (),
    cold_start: bool = True,
    prompt_labels: Sequence[str] = (),
    log: Callable[[str], None] = lambda line: None,
) -> DeploymentReport:
    """Everything `report` shows: both methods over the prompts, α run and scored, τ, ν, speedup, memory, loads, batches."""
    warm = DecodeSettings(max_new_tokens=8, gamma=settings.gamma, sampling=settings.sampling)
    for mode in ("speculative", "autoregressive"):  # allocators, kernels, caches: not the first request's problem
        list(run(pair, prompts[0], warm, mode=mode))
    log("running both methods…")
    peaks = PeakTracker(pair.device, pair.draft.weight_bytes)
    requests = run_requests(pair, prompts, settings, repeats, peaks=peaks, log=log)
    tally = requests.speculative.tally
    spec, base = requests.speculative.summaries, requests.autoregressive.summaries
    rate = lambda summaries: sum(s.new_tokens for s in summaries) / sum(s.wall_s for s in summaries)  # noqa: E731
    m = readings_of(
        tally,
        gamma=settings.gamma,
        target_step_s=sum(s.step_s * s.new_tokens for s in base) / max(1, sum(s.new_tokens for s in base)),
        tokens_per_s=rate(spec),
        baseline_tokens_per_s=rate(base),
    )
    log("scoring α teacher-forced…")
    alpha_scored = scored_alpha(pair, prompts, settings.sampling)
    log("loading each model cold and warm…")
    times, load_json = load_times(pair, cold_start)
    rows: list[BatchRow] = []
    batch_alpha = m.alpha if m.alpha is not None else alpha_scored
    if batches and batch_alpha is not None:
        log(f"timing batch sizes {', '.join(map(str, batches))}…")
        rows = measure_batches(pair, settings.gamma, batches, batch_alpha)
    report = DeploymentReport(
        pair=pair.name,
        device=str(pair.device),
        dtype=_dtype_name(pair.dtype),
        prompts=len(prompts),
        gamma=settings.gamma,
        speculative=tuple(requests.speculative.latencies),
        autoregressive=tuple(requests.autoregressive.latencies),
        alpha_run=m.alpha,
        alpha_scored=alpha_scored,
        tau=m.tau,
        verify_cost=m.verify_cost,
        speedup=m.measured_speedup,
        mean_acceptance_length=tally.mean_acceptance_length,
        target_parameters=pair.target.parameters,
        draft_parameters=pair.draft.parameters,
        memory=memory_report(pair, requests.longest_length, settings.gamma, peaks.peaks),
        load_times=times,
        batch_alpha=batch_alpha if rows else None,
        batch_rows=tuple(rows),
        prompt_labels=tuple(prompt_labels),
        load_source=load_json["cold_source"],
        compile_note=compile_note(pair),
    )
    return report.with_verdict()


def compile_note(pair: LoadedPair) -> str | None:
    """What compiling the pair's step cost in this process (a cold compile, or a restart reading Inductor's cache)."""
    from specviz.engine.compiled import compile_summary, fast_models

    reports = {role: fast.report for role, fast in fast_models(pair).items()}
    return compile_summary(reports) if reports else None
