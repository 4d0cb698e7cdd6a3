"""The benchmark behind `python -m specviz bench`: autoregressive vs our speculative decoding (chains, and token trees
where asked) vs transformers' assisted generation, on the same pair, prompts and settings, `repeats` times; rows of
pooled rates, tallies and latencies.

Every request of a method, over the prompts and the repeats, is pooled into one summary
(analysis/prompt_set.py), the same recipe `report` uses.

distill's last stage reads its draft through the same `bench`, so a model card and the command cannot disagree.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import torch

from specviz.analysis.prompt_set import PromptSetSummary, TimedRequest
from specviz.analysis.readings import Spread, readings_of, spread_of
from specviz.analysis.same_drafts import same_drafts_tallies
from specviz.analysis.tree_theory import expected_tokens_of_shape, measured_rank_acceptance
from specviz.deployment.latency import LatencyStats, latency_tail
from specviz.drafting.registry import Twin, strategy
from specviz.engine import Cycle, DecodeSettings, Summary, Tally
from specviz.engine.kv_cache import synchronize
from specviz.engine.tree_shape import TreeShape
from specviz.models.loading import LoadedPair
from specviz.run.runner import encode_prompt, run
from specviz.run.timing_conditions import collector_paused, slice_order, warm_up

NO_LATENCY = latency_tail([]).to_json()  # the latency keys, every one None
TRANSFORMERS_DEFAULT = Twin(  # None: transformers fills in its own defaults (20 drafts, constant, confidence 0.4)
    assistant_config={"num_assistant_tokens": None, "num_assistant_tokens_schedule": None, "assistant_confidence_threshold": None}
)


@dataclass
class MethodResult:
    """One method at one γ (or one token tree), over all prompts, for every repeat."""

    method: str
    gamma: int | None
    tree: str | None = None  # the token tree's shape ("2x2x1:1"); None for a chain
    verification: str = "exact"  # how its drafts were judged (engine/verifiers.py)
    timed: list[TimedRequest] = field(default_factory=list)  # every request (repeat × prompt): tokens and seconds
    outputs: list[list[int]] = field(default_factory=list)  # first repeat, per prompt
    summaries: list[Summary] = field(default_factory=list)  # every repeat, per prompt
    latencies: list[LatencyStats] = field(default_factory=list)  # every request (repeat × prompt), from its events
    tree_outcomes: list[tuple[tuple[int, ...], tuple[int, ...]]] = field(
        default_factory=list
    )  # a tree's (parents, path) per cycle
    engines: set[str] = field(default_factory=set)  # what the target ran on, per request (engine/events.RunStarted)
    threads: set[int] = field(default_factory=set)  # torch's CPU threads, per request (engine/events.RunStarted)
    same_drafts: dict[str, Tally] = field(default_factory=dict)  # per verifier, its verdicts on this method's own drafts

    @property
    def tally(self) -> Tally:
        """Every request's counts, folded."""
        return sum((s.tally for s in self.summaries), Tally())

    def add(self, events: list) -> Summary:
        """One request's events: its latency and summary kept; the summary returned."""
        summary: Summary = events[-1]
        self.engines.add(getattr(events[0], "engine", "") or "unknown")
        self.threads.add(getattr(events[0], "threads", 0))
        self.tree_outcomes += [(e.parents, e.accepted_nodes) for e in events if getattr(e, "is_tree", False)]
        judged = same_drafts_tallies([e for e in events if isinstance(e, Cycle)])
        self.same_drafts = {name: self.same_drafts.get(name, Tally()) + tally for name, tally in judged.items()}
        self.latencies.append(LatencyStats.of_events(events))
        self.summaries.append(summary)
        self.timed.append(TimedRequest.of(summary))
        return summary

    @property
    def pooled(self) -> PromptSetSummary:
        """Every request so far, pooled: the one recipe for a prompt set's rates."""
        return PromptSetSummary.of(self.timed)


def run_ours(
    pair: LoadedPair, prompts: list[str], settings: DecodeSettings, mode: str, drafter: str, result: MethodResult, record: bool
) -> None:
    """Our engine over every prompt once, each request's events kept in `result`."""
    for prompt in prompts:
        summary = result.add(list(run(pair, prompt, settings, mode=mode, drafter=drafter)))
        if record:
            result.outputs.append(list(summary.new_token_ids))


@contextmanager
def assistant_settings(model: torch.nn.Module, config: dict) -> Iterator[None]:
    """Set the draft's generation_config for one call and restore it after.

    transformers reads num_assistant_tokens & co. from the *assistant's* generation_config, not from
    generate()'s keyword arguments, and its "heuristic" schedule writes back into it.
    """
    generation_config = model.generation_config
    saved = {key: getattr(generation_config, key, None) for key in config}
    for key, value in config.items():
        setattr(generation_config, key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            setattr(generation_config, key, value)


def run_transformers(
    pair: LoadedPair, prompts: list[str], settings: DecodeSettings, twin: Twin, result: MethodResult, record: bool
) -> None:
    """transformers' own assisted generation (or prompt lookup) on the same pair and prompts."""
    sampling = settings.sampling
    sampling_kwargs = (
        {"do_sample": False}
        if sampling.greedy
        else {"do_sample": True, "temperature": sampling.temperature, "top_k": sampling.top_k or None, "top_p": sampling.top_p}
    )
    drafting = dict(twin.generate_kwargs)
    if twin.uses_draft_model:
        drafting["assistant_model"] = pair.draft.model
    for prompt in prompts:
        ids = torch.tensor([encode_prompt(pair, prompt, settings.max_new_tokens, settings.gamma)], device=pair.device)
        torch.manual_seed(settings.seed)
        with assistant_settings(pair.draft.model, twin.assistant_config):
            started = time.perf_counter()
            output = pair.target.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=settings.max_new_tokens,
                pad_token_id=pair.tokenizer.pad_token_id or pair.tokenizer.eos_token_id,
                **sampling_kwargs,
                **drafting,
            )
            synchronize(pair.device)
            wall_s = time.perf_counter() - started
        new_ids = output[0, ids.shape[1] :].tolist()
        result.timed.append(TimedRequest(len(new_ids), wall_s))
        if record:
            result.outputs.append(new_ids)


def same_output(result: MethodResult, baseline: MethodResult, settings: DecodeSettings) -> bool | None:
    """Greedy and exact: did the method write what the target alone wrote, prompt for prompt? (None under sampling.)"""
    if not settings.sampling.greedy or settings.lossy:
        return None
    return result.outputs == baseline.outputs


def repeat_speedups(result: MethodResult, baseline: MethodResult, repeats: int) -> Spread | None:
    """Each repeat's speedup (its requests pooled, over the target alone's requests of the same repeat, which ran
    interleaved with them): their median and spread (analysis/readings.Spread)."""
    if repeats < 1 or not result.timed or len(result.timed) % repeats or len(baseline.timed) % repeats:
        return None
    ours, theirs = len(result.timed) // repeats, len(baseline.timed) // repeats
    return spread_of(
        [
            readings_of(
                Tally(),
                gamma=0,
                tokens_per_s=PromptSetSummary.of(result.timed[r * ours : (r + 1) * ours]).tokens_per_s,
                baseline_tokens_per_s=PromptSetSummary.of(baseline.timed[r * theirs : (r + 1) * theirs]).tokens_per_s,
            ).measured_speedup
            for r in range(repeats)
        ]
    )


def spread_fields(pooled_speedup: float | None, repeated: Spread | None) -> dict:
    """A row's speedup: the median repeat's where there were several (± the farthest repeat from it), else the
    pooled one; both kept."""
    several = repeated is not None and repeated.spread is not None
    return {
        "speedup": repeated.median if several else pooled_speedup,
        "speedup_spread": repeated.spread if several else None,
        "speedup_by_repeat": list(repeated.values) if repeated is not None else [],
        "speedup_pooled": pooled_speedup,
    }


def speculative_row(
    result: MethodResult, baseline: MethodResult, step_s: float, same: bool | None = None, repeats: int = 1
) -> dict:
    """Measured speed next to what Leviathan's formula predicts from our own measured α and τ.

    With a variable window (dynamic drafting) the prediction uses the mean drafts per cycle as γ. A token tree gets
    no prediction: Leviathan's formula is a chain's. Its ν is its own verify pass (every node) over a target step.
    """
    tally = result.tally
    gamma = result.gamma
    if gamma is None and tally.cycles and result.tree is None:  # a variable window: predict at the mean drafts per cycle
        gamma = max(1, round(tally.drafts_per_cycle))
    ours, theirs = result.pooled, baseline.pooled
    m = readings_of(
        tally,
        gamma=gamma or 0,
        target_step_s=step_s,
        tokens_per_s=ours.tokens_per_s,
        baseline_tokens_per_s=theirs.tokens_per_s,
        decode_tokens_per_s=ours.decode_tokens_per_s,
        baseline_decode_tokens_per_s=theirs.decode_tokens_per_s,
    )
    per_cycle_ms = 1000 / max(1, tally.cycles)
    return {
        "method": result.method,
        "gamma": result.gamma,
        "tree": result.tree,
        "verification": result.verification,
        "tokens_per_s": m.tokens_per_s,
        **spread_fields(m.measured_speedup, repeat_speedups(result, baseline, repeats)),
        "alpha": m.alpha,
        "alpha_analytic": m.alpha_analytic,
        "tau": m.tau,
        "predicted_speedup": m.predicted_speedup,
        "decode_speedup": m.decode_speedup,
        "measured_over_predicted": m.measured_over_predicted,
        "tokens_per_cycle": m.tokens_per_cycle,
        "predicted_tokens_per_cycle": predicted_tokens_per_pass(result),
        "rows_per_pass": tally.rows_per_pass,
        "drafts_per_cycle": tally.drafts_per_cycle,
        **m.acceptance_metrics(),
        "draft_ms_per_cycle": tally.draft_s * per_cycle_ms,
        "verify_ms_per_cycle": tally.verify_s * per_cycle_ms,
        "other_ms_per_cycle": tally.overhead_s * per_cycle_ms,
        "verify_cost": m.verify_cost,
        "predicted_with_verify_cost": m.predicted_with_verify_cost,
        "same_as_target": same,
        "engine": engine_of(result),
        "threads": threads_of(result),
        **latency_tail(result.latencies).to_json(),
        "same_drafts": {  # every verifier on this row's own drafts, cycle by cycle (analysis/same_drafts.py); {} if not asked
            name: {"alpha": t.alpha, "tokens_per_cycle": t.mean_acceptance_length, "cycles": t.cycles}
            for name, t in result.same_drafts.items()
        },
    }


def engine_of(result: MethodResult) -> str | None:
    """What the target ran on in every request of the method ("compiled", "eager", "transformers"), or a mix."""
    return "+".join(sorted(result.engines)) or None


def threads_of(result: MethodResult) -> int | None:
    """The torch thread count every request of the method was timed with; None where they differ or none ran."""
    return next(iter(result.threads)) if len(result.threads) == 1 else None


def predicted_tokens_per_pass(result: MethodResult) -> float | None:
    """A static tree's expected tokens per pass (analysis/tree_theory.py) from the acceptance this run measured per
    depth and per rank of the draft's choice: the theory beside the measured value. None for chains (their
    prediction is Leviathan's, in predicted_speedup) and for dynamic trees (their shape changes every cycle)."""
    if result.tree is None:
        return None
    shape = TreeShape.parse(result.tree)
    acceptance = measured_rank_acceptance(result.tree_outcomes)
    if shape.budget is not None or acceptance is None:
        return None
    return expected_tokens_of_shape(shape.branching, shape.expanded, acceptance)


def transformers_row(result: MethodResult, baseline: MethodResult, same: bool | None = None, repeats: int = 1) -> dict:
    tokens_per_s = result.pooled.tokens_per_s
    pooled = readings_of(Tally(), gamma=0, tokens_per_s=tokens_per_s, baseline_tokens_per_s=baseline.pooled.tokens_per_s)
    return {
        "method": result.method,
        "gamma": result.gamma,
        "tokens_per_s": tokens_per_s,
        **spread_fields(pooled.measured_speedup, repeat_speedups(result, baseline, repeats)),
        "alpha": None,
        "tau": None,
        "predicted_speedup": None,
        "same_as_target": same,
        **NO_LATENCY,  # generate() returns the whole output at once: no token arrival times to read
    }


def bench(
    pair: LoadedPair,
    prompts: list[str],
    settings: DecodeSettings,
    gammas: list[int],
    drafter: str = "model",
    repeats: int = 3,
    with_transformers: bool = True,
    with_dynamic: bool = True,
    trees: Sequence[TreeShape] = (),
    log: Callable[[str], None] = lambda line: None,
    verifications: Sequence[str] = (),
    read_rate: Callable[[], float] | None = None,
) -> dict:
    """Every method over the same prompts and settings, `repeats` times; rows of pooled rates and tallies.
    `read_rate` (the machine's memory read rate in GB/s, analysis/cache_fit.py) is taken before each repeat and after
    the last, outside every timed request: on a VM the rate, and a verify pass's cost with it, can move between two
    levels while a benchmark runs (docs/performance.md, "The machine's two states").

    Rows: autoregressive; per γ our speculative decoding with `drafter` and transformers' twin of it; per tree
    shape our speculative decoding drafting that tree (`speculative-tree`); then (for a model drafter) our dynamic
    drafting and transformers' assisted generation with its defaults. Within a repeat every method runs back to back.
    """
    chosen = strategy(drafter)
    twin = chosen.transformers_twin if with_transformers else None
    dynamic = with_dynamic and chosen.needs_draft_model
    at = {gamma: replace(settings, gamma=gamma) for gamma in gammas}
    shaped = {shape.text: replace(settings, tree=shape) for shape in trees}

    # warm up every shape timed below, as the page's measured Run does (run/timing_conditions.py): untimed, once per
    # process and engine
    warm = replace(settings, max_new_tokens=8, gamma=gammas[0])
    for shaped_settings in [*at.values(), *shaped.values()]:
        warm_up(pair, prompts[0], shaped_settings, drafter)
    if twin:
        run_transformers(pair, prompts[:1], warm, twin(gammas[0]), MethodResult("warmup", None), False)

    baseline = MethodResult("autoregressive", None)
    ours = {gamma: MethodResult("speculative", gamma, verification=settings.verification) for gamma in gammas}
    if verifications:  # the first γ's chains (one per verification) also judge their own drafts every way, untimed
        at[gammas[0]] = replace(at[gammas[0]], compare_verifiers=True)
    judged = {name: replace(at[gammas[0]], verification=name) for name in verifications}
    ours_judged = {name: MethodResult(f"speculative-{name}", gammas[0], verification=name) for name in verifications}
    theirs = {gamma: MethodResult("transformers-assisted", gamma) for gamma in gammas}
    ours_trees = {text: MethodResult("speculative-tree", None, tree=text) for text in shaped}
    ours_dynamic = MethodResult("speculative-dynamic", None)
    theirs_default = MethodResult("transformers-assisted-default", None)
    # the methods interleaved request by request, in alternating order (run/timing_conditions.slice_order), so that
    # every method sees the same machine state and a change of the machine's speed slows all alike
    methods: list[tuple[MethodResult, Callable[[str, bool], None]]] = [
        (baseline, lambda prompt, record: run_ours(pair, [prompt], at[gammas[0]], "autoregressive", drafter, baseline, record))
    ]
    for gamma in gammas:
        methods.append((ours[gamma], lambda p, r, g=gamma: run_ours(pair, [p], at[g], "speculative", drafter, ours[g], r)))
        if twin:
            methods.append((theirs[gamma], lambda p, r, g=gamma: run_transformers(pair, [p], at[g], twin(g), theirs[g], r)))
    for name, judged_settings in judged.items():
        methods.append(
            (
                ours_judged[name],
                lambda p, r, s=judged_settings, n=name: run_ours(pair, [p], s, "speculative", drafter, ours_judged[n], r),
            )
        )
    for text, tree_settings in shaped.items():
        methods.append(
            (
                ours_trees[text],
                lambda p, r, s=tree_settings, t=text: run_ours(pair, [p], s, "speculative", drafter, ours_trees[t], r),
            )
        )
    if dynamic:
        methods.append((ours_dynamic, lambda p, r: run_ours(pair, [p], settings, "speculative", "dynamic", ours_dynamic, r)))
        if with_transformers:
            methods.append(
                (theirs_default, lambda p, r: run_transformers(pair, [p], settings, TRANSFORMERS_DEFAULT, theirs_default, r))
            )
    read_gb_s = []
    for repeat in range(repeats):
        if read_rate is not None:
            read_gb_s.append(read_rate())
        with collector_paused():  # as on the page: no collection inside a timed request (run/timing_conditions.py)
            for number, prompt in enumerate(prompts):
                for _, timed_request in slice_order(methods, repeat * len(prompts) + number):
                    timed_request(prompt, repeat == 0)
        log(f"  repeat {repeat + 1}/{repeats} done")
    if read_rate is not None:
        read_gb_s.append(read_rate())

    step_s = baseline.pooled.target_step_s
    rows = [
        {
            "method": "autoregressive",
            "gamma": None,
            "tokens_per_s": baseline.pooled.tokens_per_s,
            "speedup": 1.0,
            "decode_speedup": 1.0,
            "alpha": None,
            "tau": None,
            "predicted_speedup": None,
            "target_step_ms": 1000 * step_s if step_s is not None else None,
            "engine": engine_of(baseline),
            "threads": threads_of(baseline),
            **latency_tail(baseline.latencies).to_json(),
        }
    ]
    same = lambda result: same_output(result, baseline, settings)  # noqa: E731
    compared = [*ours.values(), *ours_judged.values(), *ours_trees.values()]
    for gamma in gammas:
        rows.append(speculative_row(ours[gamma], baseline, step_s, same(ours[gamma]), repeats))
        if twin:
            rows.append(transformers_row(theirs[gamma], baseline, same(theirs[gamma]), repeats))
            compared.append(theirs[gamma])
    rows.extend(speculative_row(result, baseline, step_s, same(result), repeats) for result in ours_judged.values())
    rows.extend(speculative_row(result, baseline, step_s, same(result), repeats) for result in ours_trees.values())
    if dynamic:
        rows.append(speculative_row(ours_dynamic, baseline, step_s, same(ours_dynamic), repeats))
        compared.append(ours_dynamic)
        if with_transformers:
            rows.append(transformers_row(theirs_default, baseline, same(theirs_default), repeats))
            compared.append(theirs_default)
    greedy_identical = transformers_identical = None
    if settings.sampling.greedy and not settings.lossy:
        theirs_compared = [result for result in compared if result.method.startswith("transformers")]
        greedy_identical = all(same(result) for result in compared if result not in theirs_compared)
        transformers_identical = all(same(result) for result in theirs_compared) if theirs_compared else None
    # ours against our own plain decoding (what exactness promises); transformers' rows run its own eager forward,
    # which a compiled bf16 target matches only up to rounding (engine/compiled.py): reported apart
    return {
        "rows": rows,
        "greedy_identical": greedy_identical,
        "transformers_identical": transformers_identical,
        "engine": engine_of(baseline),  # what the target alone ran on: every row of ours ran the same (each row says)
        "threads": threads_of(baseline),
        "settings": settings_json(settings),
        "memory_read_gb_s": read_gb_s or None,  # before each repeat and after the last
    }


def settings_json(settings: DecodeSettings) -> dict:
    """What every row was decoded with besides its γ or tree: the page's trace records the same (RunStarted)."""
    return {
        "max_new_tokens": settings.max_new_tokens,
        "temperature": settings.sampling.temperature,
        "top_k": settings.sampling.top_k,
        "top_p": settings.sampling.top_p,
        "seed": settings.seed,
        "lenience": settings.lenience,
        "verification": settings.verification,
    }


def row_key(row: dict) -> tuple:
    """What names a row across `bench` processes: its method, γ, tree and verification."""
    return (row.get("method"), row.get("gamma"), row.get("tree"), row.get("verification"))


def merge_processes(results: list[dict]) -> dict:
    """Several `bench` processes' results as one (`bench --processes N`): each row's speedup (and its speedup while
    decoding) the median process's, ± the farthest process from it (analysis/readings.Spread), every process's kept;
    the other fields the first's."""
    merged = {**results[0], "rows": [], "processes": len(results)}
    for row in results[0]["rows"]:
        same = [next((r for r in result["rows"] if row_key(r) == row_key(row)), None) for result in results]
        processes = spread_of([r.get("speedup") if r is not None else None for r in same])
        decoding = spread_of([r.get("decode_speedup") if r is not None else None for r in same])
        merged["rows"].append(
            {
                **row,
                "speedup": processes.median if processes is not None else row.get("speedup"),
                "speedup_spread_processes": processes.spread if processes is not None else None,
                "speedup_by_process": list(processes.values) if processes is not None else [],
                "decode_speedup": decoding.median if decoding is not None else row.get("decode_speedup"),
                "decode_speedup_by_process": list(decoding.values) if decoding is not None else [],
            }
        )
    merged["memory_read_gb_s_by_process"] = [result.get("memory_read_gb_s") for result in results]
    for key in ("greedy_identical", "transformers_identical"):  # identical in every process, or not
        values = [result.get(key) for result in results]
        merged[key] = None if any(value is None for value in values) else all(values)
    return merged
