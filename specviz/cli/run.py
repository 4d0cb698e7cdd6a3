"""`python -m specviz run`: decode one prompt and report every cycle (text, or JSON with vLLM's metrics)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from specviz.analysis.readings import readings_of
from specviz.cli.options import (
    AUTO,
    NA,
    UsageError,
    add_decoding_arguments,
    add_pair_arguments,
    add_tree_argument,
    at_least_one,
    choose_automatically,
    gammas_from,
    pair_from,
    resolve_pair,
    settings_from,
    tree_shapes,
)
from specviz.deployment import load_timing
from specviz.deployment import peaks as measured
from specviz.engine import Cycle, DecodeSettings, Summary
from specviz.engine.events import NOT_ROW_EXACT
from specviz.numbers import number
from specviz.run.runner import check_prompt_text, encode_prompt, run


def add_parser(commands) -> None:
    parser = commands.add_parser("run", help="decode one prompt and report every cycle")
    add_pair_arguments(parser)
    add_decoding_arguments(parser)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--gamma", help="drafts per cycle; 'auto' measures which chain or tree pays here; default: the pair's")
    add_tree_argument(parser, several=False)
    parser.add_argument("--mode", choices=["speculative", "autoregressive"], default="speculative")
    parser.add_argument("--samples", type=at_least_one, default=1, help="N continuations with seeds S..S+N-1")
    parser.add_argument(
        "--cold-start",
        action="store_true",
        help="with --json: time each model's cold load in a fresh process (default: its first load in this process)",
    )
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=command)


def run_to_dict(events: list) -> dict:
    """The JSON of one run: the text, every cycle, and the summary."""
    summary: Summary = events[-1]
    cycles = [
        {
            "draft_token_ids": list(event.draft_token_ids),
            "n_accepted": event.n_accepted,
            "resampled_token_id": event.resampled_token_id,
            "bonus_token_id": event.bonus_token_id,
            "draft_s": event.draft_s,
            "verify_s": event.verify_s,
            "draft_stop": event.draft_stop,
            "parents": list(event.parents),  # a tree's: each node's parent, -1 the last committed token; [] for a chain
            "accepted_nodes": list(event.path),  # the accepted positions, root to leaf (a chain's first n_accepted)
        }
        for event in events
        if isinstance(event, Cycle)
    ]
    m = readings_of(summary.tally, gamma=events[0].gamma, tokens_per_s=summary.tokens_per_s)
    return {
        "mode": summary.mode,
        "drafter": events[0].drafter,
        "gamma": events[0].gamma or None,  # drafts per cycle (a tree's: its depth); None for the target alone
        "tree": events[0].tree or None,
        "engine": events[0].engine or None,  # what the target ran on: compiled, eager or transformers
        "threads": events[0].threads or None,  # torch's CPU threads
        "rows_exact": events[0].rows_exact,  # False: the target's float kernels see the rows, exact up to rounding
        "verification": events[0].verification,
        "lossy": summary.lossy,
        "text": summary.text,
        "prompt_token_ids": list(events[0].prompt_token_ids),
        "new_token_ids": list(summary.new_token_ids),
        "cycles": cycles,
        "summary": {
            "new_tokens": summary.new_tokens,
            "wall_s": summary.wall_s,
            "tokens_per_s": summary.tokens_per_s,
            "alpha": m.alpha,
            "alpha_naive": m.alpha_naive,
            "alpha_analytic": m.alpha_analytic,
            "tau": m.tau,
            "tau_source": m.tau_source,
            "tokens_per_cycle": m.tokens_per_cycle,
            "rows_per_pass": summary.tally.rows_per_pass,
            **m.acceptance_metrics(),
            "stop_reason": summary.stop_reason,
        },
    }


def command(args: argparse.Namespace) -> int:
    asked = gammas_from(args.gamma, pair_from(args)[1])
    if asked != AUTO and len(asked) > 1:
        raise UsageError("run takes one γ (bench sweeps several)")
    tree = next(iter(tree_shapes(args, pair_from(args)[1])), None)
    settings = settings_from(args, 1 if asked == AUTO else asked[0], tree=tree)  # validate before loading any model
    check_prompt_text(args.prompt)
    pair = resolve_pair(args)
    if asked == AUTO:
        chosen = choose_automatically(pair, settings, args.drafter)
        settings = replace(settings, gamma=chosen.gamma).validate() if tree else chosen.applied(settings)
    results = []
    peaks = measured.PeakTracker(pair.device, pair.draft.weight_bytes)
    for sample in range(args.samples):
        sample_settings = replace(settings, seed=args.seed + sample).validate()
        request = lambda s=sample_settings: list(run(pair, args.prompt, s, mode=args.mode, drafter=args.drafter))  # noqa: E731
        events = peaks.around(args.mode, request)
        results.append(run_to_dict(events))
    if args.json:
        output = results[0] if args.samples == 1 else {"samples": results}
        output.update(deployment_json(pair, args, settings, peaks, max(len(r["new_token_ids"]) for r in results)))
        print(json.dumps(output))
        return 0
    for result in results:
        print(args.prompt + result["text"])
        print(format_run_summary(result))
    return 0


def deployment_json(pair, args: argparse.Namespace, settings: DecodeSettings, peaks, new_tokens: int) -> dict:
    """`memory` (weights, KV bytes per token, the peak both ways, what speculation adds) and `load_s` (cold and warm).

    On a GPU the peak of the other method comes from one more run of it (untimed, after the timed ones); on a CPU
    both peaks are estimated from the tensors. Loads are timed after decoding, never inside it.
    """
    other = "autoregressive" if args.mode == "speculative" else "speculative"
    if pair.device.type == "cuda":
        peaks.around(other, lambda: list(run(pair, args.prompt, settings, mode=other, drafter=args.drafter)))
    drafted = settings.drafted_per_cycle  # γ, or a tree's nodes: what sits in the target's cache until the rollback
    longest = len(encode_prompt(pair, args.prompt, args.max_new_tokens, drafted)) + new_tokens
    memory = measured.memory_report(pair, longest, drafted, peaks.peaks)
    _, load_s = load_timing.load_times(pair, cold_start=args.cold_start)
    return {"memory": memory.to_json(), "load_s": load_s}


def format_run_summary(result: dict) -> str:
    s = result["summary"]
    parts = [f"{s['new_tokens']} tokens in {s['wall_s']:.3f} s ({s['tokens_per_s']:.1f} tok/s)"]
    if result["mode"] == "speculative":
        tree = f"tree {result['tree']}: " if result["tree"] else ""
        tree += f"{result['verification']} verification: " if result["verification"] != "exact" else ""
        parts.append(
            f"{tree}{len(result['cycles'])} cycles, {s['tokens_per_cycle']:.2f} tokens/cycle, "
            f"{number(s['rows_per_pass'], 2, missing=NA)} rows per verify pass"
        )
        parts.append(
            f"α = {number(s['alpha'], missing=NA)} (analytic {number(s['alpha_analytic'], missing=NA)}), τ = {number(s['tau'], missing=NA)}"
        )
    if result["lossy"]:
        parts.append("LOSSY: lenient acceptance, the output does not follow the target's distribution")
    elif result["mode"] == "speculative" and not result.get("rows_exact", True):
        parts.append(NOT_ROW_EXACT)
    return "── " + " · ".join(parts)
