"""Assembling a deployment's report: both methods over the prompts, α run and scored, τ, ν, speedup, memory, loads, batches.

The torch side of `python -m specviz report`: it reads its numbers through requests.py (both methods, request by
request), peaks.py (memory), load_timing.py (cold and warm loads) and device.py (batch costs). Nothing here is timed
inside a decoding run: load times and batch costs are measured before or after, never between a request's tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from specviz.analysis.readings import readings_of
from specviz.analysis.score import scored_alpha
from specviz.deployment.batch import BatchRow
from specviz.deployment.benchmark import MethodResult, same_output
from specviz.deployment.device import measure_batches
from specviz.deployment.load_timing import dtype_name, load_times
from specviz.deployment.peaks import PeakTracker, memory_report
from specviz.deployment.report import DeploymentReport, DraftingRow
from specviz.deployment.requests import Requests, run_requests
from specviz.engine import DecodeSettings
from specviz.engine.tree_shape import TreeShape
from specviz.models.loading import LoadedPair
from specviz.run.runner import run


def deployment_report(
    pair: LoadedPair,
    prompts: Sequence[str],
    settings: DecodeSettings,
    repeats: int,
    batches: Sequence[int] = (),
    cold_start: bool = True,
    prompt_labels: Sequence[str] = (),
    drafter: str = "model",
    trees: Sequence[TreeShape] = (),
    log: Callable[[str], None] = lambda line: None,
) -> DeploymentReport:
    """Everything `report` shows: both methods over the prompts, α run and scored, τ, ν, speedup, memory, loads, batches;
    with `trees`, the chain beside each token tree drafted with the same drafter."""
    warm = DecodeSettings(max_new_tokens=8, gamma=settings.gamma, sampling=settings.sampling)
    for mode in ("speculative", "autoregressive"):  # allocators, kernels, caches: not the first request's problem
        list(run(pair, prompts[0], warm, mode=mode, drafter=drafter))
    if trees:  # a tree's verify pass runs another path (the tree mask): warm it too
        list(run(pair, prompts[0], replace(warm, tree=trees[0]), drafter=drafter))
    log("running both methods…" if not trees else f"running both methods and {len(trees)} token tree(s)…")
    peaks = PeakTracker(pair.device, pair.draft.weight_bytes)
    requests = run_requests(pair, prompts, settings, repeats, drafter=drafter, peaks=peaks, trees=trees, log=log)
    tally = requests.speculative.tally
    spec, base = requests.speculative.pooled, requests.autoregressive.pooled
    m = readings_of(
        tally,
        gamma=settings.gamma,
        target_step_s=base.target_step_s,
        tokens_per_s=spec.tokens_per_s,
        baseline_tokens_per_s=base.tokens_per_s,
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
        dtype=dtype_name(pair.dtype),
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
        drafting=drafting_rows(requests, settings) if trees else (),
        acceptance=m.acceptance_metrics() if tally.cycles else None,
        verification=settings.verification,
        engine_commands=head_commands(pair.name, settings.gamma, requests, settings),
    )
    return report.with_verdict()


def drafting_rows(requests: Requests, settings: DecodeSettings) -> tuple[DraftingRow, ...]:
    """The chain, then each token tree: tokens and rows per target pass, ν over the target's own step, the speedup."""
    baseline = requests.autoregressive

    def row(setup: str, result: MethodResult) -> DraftingRow:
        m = readings_of(
            result.tally,
            gamma=0,  # no prediction here: the measured numbers side by side
            target_step_s=baseline.pooled.target_step_s,
            tokens_per_s=result.pooled.tokens_per_s,
            baseline_tokens_per_s=baseline.pooled.tokens_per_s,
        )
        same = same_output(result, baseline, settings)
        return DraftingRow(setup, m.tokens_per_cycle, result.tally.rows_per_pass, m.verify_cost, m.measured_speedup, same)

    chain = row(f"chain, γ = {settings.gamma}", requests.speculative)
    return (chain, *(row(f"tree {text}", result) for text, result in requests.trees.items()))


EXPORT_FOLDER = "eagle3-export"  # where the report's commands expect `export --out` to have written


def head_commands(pair_name: str, gamma: int, requests: Requests, settings: DecodeSettings) -> dict | None:
    """The engines' commands for the pair's EAGLE-3 head (None where it has none), drafting what ran fastest here: the
    chain of γ, or for SGLang a token tree the report measured faster."""
    from specviz.deployment.engine_commands import engine_commands
    from specviz.deployment.export import exportable_head, target_gguf_path
    from specviz.engine.tree_shape import TreeShape
    from specviz.models.catalogue import load_catalogue

    pairs = load_catalogue().pairs
    if pair_name not in pairs or exportable_head(pair_name, pairs[pair_name]) is None:
        return None
    chain = requests.speculative.pooled.tokens_per_s
    faster = {text: result.pooled.tokens_per_s for text, result in requests.trees.items() if result.pooled.tokens_per_s > chain}
    tree = TreeShape.parse(max(faster, key=faster.get)) if faster else None
    commands = engine_commands(
        f"{EXPORT_FOLDER}/head", f"{EXPORT_FOLDER}/target", target_gguf_path(pairs[pair_name]), gamma, tree
    )
    export = f"python -m specviz export --pair {pair_name} --format eagle3 --out {EXPORT_FOLDER}"
    return commands.to_json() | {"llama_cpp": [export, *commands.llama_cpp]}


def compile_note(pair: LoadedPair) -> str | None:
    """What compiling the pair's step cost in this process (a cold compile, or a restart reading Inductor's cache)."""
    from specviz.engine.compiled import compile_summary, fast_models

    reports = {role: fast.report for role, fast in fast_models(pair).items()}
    return compile_summary(reports) if reports else None
