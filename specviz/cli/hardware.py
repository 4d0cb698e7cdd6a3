"""`python -m specviz hardware`: τ and ν of a pair's real architectures on this machine, with random weights."""

from __future__ import annotations

import argparse
import json

from specviz.analysis import hardware
from specviz.analysis.score import encode_text, score_token_ids
from specviz.cli.options import NA, UsageError, add_pair_arguments, add_threads_argument, pair_from
from specviz.engine import DecodeSettings, SamplingSettings
from specviz.engine.tally import alpha_analytic
from specviz.models.catalogue import load_catalogue
from specviz.models.loading import load_pair
from specviz.numbers import number
from specviz.prompts import load_prompt_set


def add_parser(commands) -> None:
    parser = commands.add_parser("hardware", help="τ and ν of a pair's real architectures here, random weights")
    add_pair_arguments(parser)
    parser.add_argument("--alpha", type=float, help="α to predict the speedup with (default: scored, if the weights are local)")
    parser.add_argument("--gamma", type=int, help="γ for the verify pass and the prediction (default: the pair's)")
    parser.add_argument("--repeats", type=int, default=10)
    add_threads_argument(parser)
    parser.add_argument("--memory-gib", type=float, help="memory to plan with instead of what is available")
    parser.add_argument(
        "--save", action="store_true", help="keep the result for the app (see specviz.analysis.hardware.cache_path)"
    )
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    if args.alpha is not None and not (0 <= args.alpha <= 1):
        raise UsageError(f"--alpha must be in [0, 1] (got {args.alpha})")
    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1 (got {args.repeats})")
    if args.memory_gib is not None and not args.memory_gib > 0:
        raise UsageError(f"--memory-gib must be positive (got {args.memory_gib})")
    if args.gamma is not None:
        DecodeSettings(gamma=args.gamma).validate()
    name, entry = pair_from(args)
    gamma = entry.gamma if args.gamma is None else args.gamma
    catalogue = load_catalogue()
    plan = hardware.plan(name, entry, catalogue, dtype=args.dtype)
    hardware.check_fits(plan, None if args.memory_gib is None else int(args.memory_gib * 2**30))
    alpha, alpha_source = args.alpha, "given" if args.alpha is not None else None
    if alpha is None and entry.bundled:
        alpha, alpha_source = scored_alpha(name, entry, catalogue)
    times = hardware.measure(plan, gamma, repeats=args.repeats)
    result = hardware.report(plan, times, alpha, alpha_source)
    if args.save:
        result["saved_to"] = str(hardware.save(result))
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"{name}: draft {result['draft']} ({result['draft_parameters'] / 1e6:,.1f}M) → target {result['target']} "
        f"({result['target_parameters'] / 1e6:,.1f}M), {result['dtype']} on {result['device']} ({result['device_name']}), random weights"
    )
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
    if args.save:
        print(f"  saved to {result['saved_to']}")
    return 0


def scored_alpha(name: str, entry, catalogue) -> tuple[float | None, str | None]:
    """α of a pair whose weights are here, scored greedily on the held-out code prompts (no timing needed)."""

    pair = load_pair(name, entry, catalogue.offline_pairs())
    scored = [score_token_ids(pair, encode_text(pair, text), SamplingSettings()) for text in load_prompt_set("heldout")]
    alpha = alpha_analytic(sum(sum(text.overlaps) for text in scored), sum(len(text.overlaps) for text in scored))
    return (alpha, "scored (greedy, held-out code)") if alpha is not None else (None, None)
