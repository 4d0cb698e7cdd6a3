"""`python -m specviz hardware`: τ and ν of a pair on this machine (hub architectures with random weights), and with
--batch the speedup each batch size predicts from step costs measured at that size."""

from __future__ import annotations

import argparse
import json
import sys

from specviz.analysis.score import scored_alpha
from specviz.analysis.tree_theory import MAX_ROWS
from specviz.cli.options import (
    NA,
    UsageError,
    add_pair_arguments,
    add_repeats_argument,
    add_threads_argument,
    pair_and_gamma,
    parse_batches,
)
from specviz.deployment import hardware
from specviz.deployment.batch import PREDICTED_LABEL, batch_rows, stops_paying, stops_paying_sentence
from specviz.deployment.device import measure_batch_costs
from specviz.engine import SamplingSettings
from specviz.models.catalogue import load_catalogue
from specviz.models.loading import load_pair
from specviz.numbers import number
from specviz.prompts.sets import load_prompt_set

ASSUMED_ALPHA = 0.7  # the batch curve's α when none is given or scored (a hub pair without --alpha)


def add_parser(commands) -> None:
    parser = commands.add_parser("hardware", help="τ and ν of a pair's real architectures here; --batch: by batch size")
    add_pair_arguments(parser)
    parser.add_argument("--alpha", type=float, help="α to predict the speedup with (default: scored, if the weights are local)")
    parser.add_argument("--gamma", type=int, help="γ for the verify pass and the prediction (default: the pair's)")
    add_repeats_argument(parser, 10)
    add_threads_argument(parser)
    parser.add_argument(
        "--rows",
        type=int,
        default=0,
        help=f"also time a target pass over k rows for k = 1 … ROWS (at most {MAX_ROWS}): ν(k), for choosing a tree",
    )
    parser.add_argument("--batch", help="comma list of batch sizes, e.g. 1,4,16,64: time each and predict the speedup at each")
    parser.add_argument("--memory-gib", type=float, help="memory to plan with instead of what is available")
    parser.add_argument(
        "--save", action="store_true", help="keep the result for the app (see specviz.analysis.hardware_cache.cache_path)"
    )
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    try:
        return measure_and_print(args)
    except hardware.HardwareError as error:  # the pair cannot be measured here: one sentence, exit status 1
        print(f"specviz: {error}", file=sys.stderr)
        return 1


def measure_and_print(args: argparse.Namespace) -> int:
    if args.alpha is not None and not (0 <= args.alpha <= 1):
        raise UsageError(f"--alpha must be in [0, 1] (got {args.alpha})")
    if args.memory_gib is not None and not args.memory_gib > 0:
        raise UsageError(f"--memory-gib must be positive (got {args.memory_gib})")
    if not 0 <= args.rows <= MAX_ROWS:
        raise UsageError(f"--rows must be between 1 and {MAX_ROWS} (got {args.rows})")
    batches = parse_batches(args.batch)
    name, entry, gamma = pair_and_gamma(args)
    catalogue = load_catalogue()
    plan = hardware.plan(name, entry, catalogue, dtype=args.dtype, weights=args.weights)
    largest = max(batches, default=1)
    extra = hardware.batch_bytes(plan, largest, gamma) if batches else 0
    memory = None if args.memory_gib is None else int(args.memory_gib * 2**30)
    hardware.check_fits(plan, memory, extra, f" with the KV cache at batch {largest}" if batches else "")
    alpha, alpha_source = args.alpha, "given" if args.alpha is not None else None
    if alpha is None and entry.bundled:
        alpha, alpha_source = heldout_alpha(name, entry, catalogue)
    models = hardware.build_models(plan)
    times = hardware.measure(plan, gamma, repeats=args.repeats, models=models)
    result = hardware.report(plan, times, alpha, alpha_source, engine=hardware.engine_of(models))
    if args.rows:
        result.update(hardware.verify_curve(plan, models, args.rows, repeats=args.repeats))
    if batches:
        result.update(batch_result(plan, models, gamma, batches, alpha, alpha_source, args.repeats))
    del models
    if args.save:
        result["saved_to"] = str(hardware.save(result))
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"{name}: draft {result['draft']} ({result['draft_parameters'] / 1e6:,.1f}M) → target {result['target']} "
        f"({result['target_parameters'] / 1e6:,.1f}M), {result['dtype']} on {result['device']} ({result['device_name']}), weights: {result['weights']}"
        + "".join(f", {which} in {result[which + '_form']}" for which in ("target", "draft") if result[which + "_form"])
    )
    print(f"  engine: {result['engine']}")
    print(
        f"  draft step {result['draft_step_ms']:.2f} ms, target step {result['target_step_ms']:.2f} ms, "
        f"verify over γ + 1 = {gamma + 1}: {result['verify_ms']:.2f} ms"
    )
    print(f"  τ = {number(result['tau'], missing=NA)}, ν = {number(result['verify_cost'], missing=NA)}")
    if alpha is not None:
        print(
            f"  at α = {alpha:.3f} ({alpha_source}): {number(result['predicted_speedup'], missing=NA)}x at γ = {gamma}, "
            f"best γ = {result['best_gamma']}: {number(result['best_speedup'], missing=NA)}x"
        )
    for row in result["predictions"]:
        print(
            f"  if α = {row['alpha']:.1f}: {row['predicted_speedup']:.2f}x at γ = {gamma}, "
            f"best γ = {row['best_gamma']}: {row['best_speedup']:.2f}x"
        )
    if args.rows:
        print_verify_curve(result)
    if batches:
        print(f"  by batch size, at α = {result['batch_alpha']:.3f} ({result['batch_alpha_source']}), {PREDICTED_LABEL}:")
        for row in result["batches"]:
            print(
                f"    batch {row['batch']:>4}: draft step {row['draft_step_ms']:.2f} ms, target step {row['target_step_ms']:.2f} ms, "
                f"verify {row['verify_ms']:.2f} ms · τ = {row['tau']:.3f}, ν = {row['verify_cost']:.2f} · {row['predicted_speedup']:.2f}x"
            )
        print(f"  {result['batch_sentence']}")
    if args.save:
        print(f"  saved to {result['saved_to']}")
    return 0


def print_verify_curve(result: dict) -> None:
    """ν(k), sixteen to a line."""
    curve = result["verify_curve"]
    print(
        f"  ν(k), a target pass over k rows ÷ one step ({result['verify_curve_step_ms']:.2f} ms), after {result['verify_curve_context']} tokens:"
    )
    rows = [int(k) for k in curve]
    for start in range(0, len(rows), 16):
        chunk = rows[start : start + 16]
        print(f"    k {chunk[0]:>2}–{chunk[-1]:<2}  " + " ".join(f"{curve[str(k)]:.2f}" for k in chunk))


def batch_result(plan, models, gamma: int, batches: list[int], alpha, alpha_source, repeats: int) -> dict:
    """Step costs timed at each batch size on this device, and the speedup they predict at the given or scored α."""
    if alpha is None:
        alpha, alpha_source = ASSUMED_ALPHA, "assumed: give --alpha"
    costs = measure_batch_costs(*models, hardware.vocab_of(plan), gamma, batches, context=hardware.CONTEXT, repeats=repeats)
    rows = batch_rows(costs, alpha, gamma)
    by_batch = {c.batch: c for c in costs}
    return {
        "batch_alpha": alpha,
        "batch_alpha_source": alpha_source,
        "batch_prediction": PREDICTED_LABEL,
        "batches": [
            {
                **row.to_json(),
                "draft_step_ms": 1000 * by_batch[row.batch].draft_step_s,
                "target_step_ms": 1000 * by_batch[row.batch].target_step_s,
                "verify_ms": 1000 * by_batch[row.batch].verify_s,
            }
            for row in rows
        ],
        "stops_paying_at": stops_paying(rows),
        "batch_sentence": stops_paying_sentence(rows),
    }


def heldout_alpha(name: str, entry, catalogue) -> tuple[float | None, str | None]:
    """α of a pair whose weights are here, scored greedily on the held-out code prompts (no timing needed)."""
    pair = load_pair(name, entry, catalogue.offline_pairs())
    alpha = scored_alpha(pair, load_prompt_set("heldout"), SamplingSettings())
    return (alpha, "scored (greedy, held-out code)") if alpha is not None else (None, None)
