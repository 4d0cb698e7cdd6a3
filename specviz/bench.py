"""`python -m specviz bench`: autoregressive vs our speculative decoding vs transformers' assisted generation."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field

import torch

from specviz.engine import Summary, Tally
from specviz.engine.kv_cache import synchronize
from specviz.loading import LoadedPair
from specviz.measures import measures_of
from specviz.prompts import load_prompt_set
from specviz.runner import encode_prompt, run


@dataclass
class MethodResult:
    """One method at one γ, over all prompts, for every repeat."""

    method: str
    gamma: int | None
    tokens_per_s: list[float] = field(default_factory=list)  # end to end: prefill + decoding
    decode_tokens_per_s: list[float] = field(default_factory=list)  # decoding alone, what the theory models
    outputs: list[list[int]] = field(default_factory=list)  # first repeat, per prompt
    summaries: list[Summary] = field(default_factory=list)  # every repeat, per prompt

    @property
    def median_tokens_per_s(self) -> float:
        return statistics.median(self.tokens_per_s)

    @property
    def median_decode_tokens_per_s(self) -> float | None:
        return statistics.median(self.decode_tokens_per_s) if self.decode_tokens_per_s else None


def run_ours(
    pair: LoadedPair, prompts: list[str], args: argparse.Namespace, mode: str, gamma: int, result: MethodResult, record: bool
) -> None:
    from specviz.cli import settings_from

    tokens, wall, prefill = 0, 0.0, 0.0
    for prompt in prompts:
        events = list(run(pair, prompt, settings_from(args, gamma), mode=mode, drafter=args.drafter))
        summary: Summary = events[-1]
        tokens += summary.new_tokens
        wall += summary.wall_s
        prefill += summary.prefill_s
        result.summaries.append(summary)
        if record:
            result.outputs.append(list(summary.new_token_ids))
    result.tokens_per_s.append(tokens / wall)
    result.decode_tokens_per_s.append(tokens / (wall - prefill))


def run_transformers(
    pair: LoadedPair, prompts: list[str], args: argparse.Namespace, gamma: int, result: MethodResult, record: bool
) -> None:
    """transformers' own assisted generation (or prompt lookup) on the same pair, prompts and γ."""
    tokens, wall = 0, 0.0
    sampling = (
        {"do_sample": False}
        if args.temperature == 0
        else {
            "do_sample": True,
            "temperature": args.temperature,
            "top_k": args.top_k or None,
            "top_p": args.top_p,
        }
    )
    if args.drafter == "model":
        drafting = {
            "assistant_model": pair.draft.model,
            "num_assistant_tokens": gamma,
            "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": 0.0,
        }
    else:
        drafting = {"prompt_lookup_num_tokens": gamma}
    for prompt in prompts:
        ids = torch.tensor([encode_prompt(pair, prompt, args.max_new_tokens, gamma)], device=pair.device)
        torch.manual_seed(args.seed)
        started = time.perf_counter()
        output = pair.target.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=args.max_new_tokens,
            pad_token_id=pair.tokenizer.pad_token_id or pair.tokenizer.eos_token_id,
            **sampling,
            **drafting,
        )
        synchronize(pair.device)
        wall += time.perf_counter() - started
        new_ids = output[0, ids.shape[1] :].tolist()
        tokens += len(new_ids)
        if record:
            result.outputs.append(new_ids)
    result.tokens_per_s.append(tokens / wall)


def speculative_row(result: MethodResult, baseline: MethodResult, step_s: float) -> dict:
    """Measured speed next to what Leviathan's formula predicts from our own measured α and τ."""
    tally = sum((s.tally for s in result.summaries), Tally())
    m = measures_of(
        tally,
        gamma=result.gamma,
        target_step_s=step_s,
        tokens_per_s=result.median_tokens_per_s,
        baseline_tokens_per_s=baseline.median_tokens_per_s,
    )
    decode_speedup = result.median_decode_tokens_per_s / baseline.median_decode_tokens_per_s
    return {
        "method": "speculative",
        "gamma": result.gamma,
        "tokens_per_s": m.tokens_per_s,
        "speedup": m.measured_speedup,
        "alpha": m.alpha,
        "alpha_analytic": m.alpha_analytic,
        "tau": m.tau,
        "predicted_speedup": m.predicted_speedup,
        "decode_speedup": decode_speedup,
        "measured_over_predicted": decode_speedup / m.predicted_speedup if m.predicted_speedup else None,
        "tokens_per_cycle": m.tokens_per_cycle,
        "mean_acceptance_length": tally.mean_acceptance_length,
        "acceptance_histogram": list(tally.accepted_histogram),
        "acceptance_by_position": tally.acceptance_by_position,
        "draft_ms_per_cycle": 1000 * tally.draft_s / max(1, tally.cycles),
        "verify_ms_per_cycle": 1000 * tally.verify_s / max(1, tally.cycles),
        "other_ms_per_cycle": 1000 * tally.overhead_s / max(1, tally.cycles),
        "verify_cost": m.verify_cost,
        "predicted_with_verify_cost": m.predicted_with_verify_cost,
    }


def command_bench(args: argparse.Namespace) -> int:
    from specviz.cli import UsageError, resolve_pair, settings_from

    try:
        gammas = [int(g) for g in str(args.gamma).split(",")]
    except ValueError:
        raise UsageError(f"--gamma takes an integer or a comma-separated list (got {args.gamma!r})") from None
    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1 (got {args.repeats})")
    for gamma in gammas:
        settings_from(args, gamma)  # validates every setting before any model is loaded
    prompts = load_prompt_set(args.prompts)
    pair = resolve_pair(args)
    log = (lambda *a: None) if args.json else print
    log(
        f"pair {pair.name} on {pair.device} ({pair.dtype}), {len(prompts)} prompts, {args.max_new_tokens} new tokens, "
        f"temperature {args.temperature}, {args.repeats} repeats"
    )

    # warm up every path once (allocators, kernels, caches)
    warm = argparse.Namespace(**{**vars(args), "max_new_tokens": 8})
    run_ours(pair, prompts[:1], warm, "autoregressive", 1, MethodResult("warmup", None), False)
    run_ours(pair, prompts[:1], warm, "speculative", gammas[0], MethodResult("warmup", None), False)
    if not args.no_hf:
        run_transformers(pair, prompts[:1], warm, gammas[0], MethodResult("warmup", None), False)

    baseline = MethodResult("autoregressive", None)
    ours = {gamma: MethodResult("speculative", gamma) for gamma in gammas}
    theirs = {gamma: MethodResult("transformers-assisted", gamma) for gamma in gammas}
    for repeat in range(args.repeats):
        record = repeat == 0
        run_ours(pair, prompts, args, "autoregressive", gammas[0], baseline, record)
        for gamma in gammas:
            run_ours(pair, prompts, args, "speculative", gamma, ours[gamma], record)
            if not args.no_hf:
                run_transformers(pair, prompts, args, gamma, theirs[gamma], record)
        log(f"  repeat {repeat + 1}/{args.repeats} done")

    step_s = statistics.mean(s.step_s for s in baseline.summaries)
    rows = [
        {
            "method": "autoregressive",
            "gamma": None,
            "tokens_per_s": baseline.median_tokens_per_s,
            "speedup": 1.0,
            "decode_speedup": 1.0,
            "alpha": None,
            "tau": None,
            "predicted_speedup": None,
            "target_step_ms": 1000 * step_s,
        }
    ]
    for gamma in gammas:
        rows.append(speculative_row(ours[gamma], baseline, step_s))
        if not args.no_hf:
            rows.append(
                {
                    "method": "transformers-assisted",
                    "gamma": gamma,
                    "tokens_per_s": theirs[gamma].median_tokens_per_s,
                    "speedup": theirs[gamma].median_tokens_per_s / baseline.median_tokens_per_s,
                    "alpha": None,
                    "tau": None,
                    "predicted_speedup": None,
                }
            )
    greedy_identical = None
    if args.temperature == 0:
        greedy_identical = all(ours[g].outputs == baseline.outputs for g in gammas) and (
            args.no_hf or all(theirs[g].outputs == baseline.outputs for g in gammas)
        )
    if args.json:
        print(json.dumps({"rows": rows, "greedy_identical": greedy_identical}))
    else:
        print(format_table(rows))
        if greedy_identical is not None:
            print(f"greedy outputs identical across methods: {greedy_identical}")
    return 0


def format_table(rows: list[dict]) -> str:
    columns = [
        ("method", "{}"),
        ("gamma", "{}"),
        ("tokens_per_s", "{:.1f}"),
        ("speedup", "{:.2f}x"),
        ("alpha", "{:.3f}"),
        ("tau", "{:.3f}"),
        ("predicted_speedup", "{:.2f}x"),
        ("decode_speedup", "{:.2f}x"),
        ("measured_over_predicted", "{:.2f}"),
        ("verify_cost", "{:.2f}"),
        ("predicted_with_verify_cost", "{:.2f}x"),
        ("tokens_per_cycle", "{:.2f}"),
        ("draft_ms_per_cycle", "{:.2f}"),
        ("verify_ms_per_cycle", "{:.2f}"),
        ("other_ms_per_cycle", "{:.2f}"),
    ]
    header = [name for name, _ in columns]
    body = [[("-" if row.get(name) is None else fmt.format(row[name])) for name, fmt in columns] for row in rows]
    widths = [max(len(cell) for cell in column) for column in zip(header, *body)]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in [header, *body]]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])
