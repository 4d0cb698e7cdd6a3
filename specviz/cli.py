"""`python -m specviz run | bench | theory`: the command-line face of the engine."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence

from specviz import theory
from specviz.catalogue import CatalogueError, Pair, load_catalogue
from specviz.engine import Cycle, DecodeSettings, SamplingSettings, SettingsError, Summary
from specviz.loading import LoadedPair, PairError, load_pair
from specviz.measures import measures_of
from specviz.runner import PromptError, run


class UsageError(ValueError):
    """Bad arguments: printed as one line, exit status 2."""


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pair", help="a pair from models.yaml (default: its `default:`)")
    parser.add_argument("--target", help="target model: hub id or folder (with --draft, instead of --pair)")
    parser.add_argument("--draft", help="draft model: hub id or folder")


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 is greedy")
    parser.add_argument("--top-k", type=int, default=0, help="0 is off")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--drafter", choices=["model", "lookup"], default="model")
    parser.add_argument("--lenience", type=float, default=1.0, help="1 is exact; below 1 is lossy")
    parser.add_argument("--adaptive-gamma", action="store_true", help="+2 after a full accept, -1 otherwise")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m specviz", description="Speculative decoding, run for real.")
    commands = parser.add_subparsers(dest="command", required=True)

    run_parser = commands.add_parser("run", help="decode one prompt and report every cycle")
    add_pair_arguments(run_parser)
    add_sampling_arguments(run_parser)
    run_parser.add_argument("--prompt", required=True)
    run_parser.add_argument("--gamma", type=int, default=4)
    run_parser.add_argument("--mode", choices=["speculative", "autoregressive"], default="speculative")
    run_parser.add_argument("--samples", type=int, default=1, help="N continuations with seeds S..S+N-1")
    run_parser.add_argument("--json", action="store_true")

    bench_parser = commands.add_parser("bench", help="autoregressive vs ours vs transformers' assisted generation")
    add_pair_arguments(bench_parser)
    add_sampling_arguments(bench_parser)
    bench_parser.add_argument("--prompts", default="heldout", help="code|prose|repetitive|arithmetic|all|heldout|FILE")
    bench_parser.add_argument("--gamma", type=str, default="4", help="one γ or a comma list for a sweep, e.g. 2,4,6")
    bench_parser.add_argument("--repeats", type=int, default=3)
    bench_parser.add_argument("--no-hf", action="store_true", help="skip transformers' assisted generation")
    bench_parser.add_argument("--json", action="store_true")

    theory_parser = commands.add_parser("theory", help="what α, γ and τ predict (Leviathan et al. 2023)")
    theory_parser.add_argument("--alpha", type=float, required=True)
    theory_parser.add_argument("--gamma", type=int, required=True)
    theory_parser.add_argument("--tau", type=float, required=True)
    theory_parser.add_argument("--json", action="store_true")
    return parser


def settings_from(args: argparse.Namespace, gamma: int, seed: int | None = None) -> DecodeSettings:
    sampling = SamplingSettings(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    return DecodeSettings(
        max_new_tokens=args.max_new_tokens,
        gamma=gamma,
        sampling=sampling,
        seed=args.seed if seed is None else seed,
        lenience=args.lenience,
        adaptive_gamma=args.adaptive_gamma,
    ).validate()


def resolve_pair(args: argparse.Namespace) -> LoadedPair:
    catalogue = load_catalogue()
    if args.target or args.draft:
        if not (args.target and args.draft) or args.pair:
            raise UsageError("give either --pair NAME, or both --target and --draft")
        pair, name = Pair(target=args.target, draft=args.draft, description="from the command line"), "custom"
    else:
        name = args.pair or catalogue.default
        pair = catalogue.get(name)
    return load_pair(name, pair, catalogue.offline_pairs())


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
        }
        for event in events
        if isinstance(event, Cycle)
    ]
    m = measures_of(summary.tally, gamma=events[0].gamma, tokens_per_s=summary.tokens_per_s)
    return {
        "mode": summary.mode,
        "lossy": summary.lossy,
        "text": summary.text,
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
            "mean_acceptance_length": summary.tally.mean_acceptance_length,
            "acceptance_histogram": list(summary.tally.accepted_histogram),
            "acceptance_by_position": summary.tally.acceptance_by_position,
            "stop_reason": summary.stop_reason,
        },
    }


def command_run(args: argparse.Namespace) -> int:
    if args.samples < 1:
        raise UsageError(f"--samples must be at least 1 (got {args.samples})")
    settings_from(args, args.gamma)  # validate before loading any model
    if not args.prompt.strip():
        raise PromptError("The prompt is empty: type something for the models to continue.")
    pair = resolve_pair(args)
    results = []
    for sample in range(args.samples):
        sample_settings = settings_from(args, args.gamma, seed=args.seed + sample)
        events = list(run(pair, args.prompt, sample_settings, mode=args.mode, drafter=args.drafter))
        results.append(run_to_dict(events))
    if args.json:
        print(json.dumps(results[0] if args.samples == 1 else {"samples": results}))
        return 0
    for result in results:
        print(args.prompt + result["text"])
        print(format_run_summary(result))
    return 0


def format_run_summary(result: dict) -> str:
    s = result["summary"]
    parts = [f"{s['new_tokens']} tokens in {s['wall_s']:.3f} s ({s['tokens_per_s']:.1f} tok/s)"]
    if result["mode"] == "speculative":
        parts.append(f"{len(result['cycles'])} cycles, {s['tokens_per_cycle']:.2f} tokens/cycle")
        parts.append(f"α = {_fmt(s['alpha'])} (analytic {_fmt(s['alpha_analytic'])}), τ = {_fmt(s['tau'])}")
    if result["lossy"]:
        parts.append("LOSSY: lenient acceptance, the output does not follow the target's distribution")
    return "── " + " · ".join(parts)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def command_theory(args: argparse.Namespace) -> int:
    if not (0 <= args.alpha <= 1) or math.isnan(args.alpha):
        raise UsageError(f"--alpha must be in [0, 1] (got {args.alpha})")
    if args.gamma < 1:
        raise UsageError(f"--gamma must be at least 1 (got {args.gamma})")
    if not (args.tau >= 0) or math.isinf(args.tau):
        raise UsageError(f"--tau must be a finite number ≥ 0 (got {args.tau})")
    prediction = theory.Prediction.of(args.alpha, args.gamma, args.tau)
    result = {
        "tokens_per_cycle": prediction.tokens_per_cycle,
        "speedup": prediction.speedup,
        "best_gamma": prediction.best_gamma,
        "best_speedup": prediction.best_speedup,
        "speedup_possible": prediction.worth_it,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"α = {args.alpha}, γ = {args.gamma}, τ = {args.tau}")
        print(f"  expected tokens per cycle  {prediction.tokens_per_cycle:.3f}")
        print(f"  expected speedup           {prediction.speedup:.3f}x")
        print(f"  best γ                     {prediction.best_gamma} ({prediction.best_speedup:.3f}x)")
        print(f"  any speedup possible       {'yes' if prediction.worth_it else 'no'} (needs α > τ)")
    return 0


def quiet_libraries() -> None:
    """Keep library progress bars and advice off the CLI's output."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def main(argv: Sequence[str] | None = None) -> int:
    quiet_libraries()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return command_run(args)
        if args.command == "bench":
            from specviz.bench import command_bench

            return command_bench(args)
        return command_theory(args)
    except (UsageError, SettingsError, PromptError, PairError, CatalogueError, ValueError) as error:
        print(f"specviz: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
