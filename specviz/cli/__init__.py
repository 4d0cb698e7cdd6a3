"""`python -m specviz run | bench | score | hardware | theory`: the command-line face of the engine.

Each subcommand names its handler with `set_defaults(handler=...)`; a handler validates everything it can
before loading a model, and bad input becomes one line on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence

from specviz.analysis import theory
from specviz.analysis.measures import measures_of
from specviz.cli.options import (
    UsageError,
    add_decoding_arguments,
    add_pair_arguments,
    add_sampling_arguments,
    pair_from,
    resolve_pair,
    sampling_from,
    settings_from,
)
from specviz.engine import Cycle, DecodeSettings, SettingsError, Summary
from specviz.models.catalogue import CatalogueError, load_catalogue
from specviz.models.loading import PairError, load_pair
from specviz.runner import PromptError, check_prompt_text, run

__all__ = ["UsageError", "main", "resolve_pair", "run_to_dict", "settings_from"]


class OneLineParser(argparse.ArgumentParser):
    """argparse's own complaints (a missing option, a bad choice) as one line, like ours, instead of the usage block."""

    def error(self, message: str) -> None:
        self.exit(2, f"specviz: error: {self.prog.removeprefix('python -m ')}: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m specviz", description="Speculative decoding, run for real.")
    commands = parser.add_subparsers(dest="command", required=True)

    run_parser = commands.add_parser("run", help="decode one prompt and report every cycle")
    add_pair_arguments(run_parser)
    add_decoding_arguments(run_parser)
    run_parser.add_argument("--prompt", required=True)
    run_parser.add_argument("--gamma", type=int, default=4)
    run_parser.add_argument("--mode", choices=["speculative", "autoregressive"], default="speculative")
    run_parser.add_argument("--samples", type=int, default=1, help="N continuations with seeds S..S+N-1")
    run_parser.add_argument("--json", action="store_true")
    run_parser.set_defaults(handler=command_run)

    bench_parser = commands.add_parser("bench", help="autoregressive vs ours vs transformers' assisted generation")
    add_pair_arguments(bench_parser)
    add_decoding_arguments(bench_parser)
    bench_parser.add_argument("--prompts", default="heldout", help="code|prose|repetitive|arithmetic|all|heldout|FILE")
    bench_parser.add_argument("--gamma", type=str, default="4", help="one γ or a comma list for a sweep, e.g. 2,4,6")
    bench_parser.add_argument("--repeats", type=int, default=3)
    bench_parser.add_argument("--no-hf", action="store_true", help="skip transformers' assisted generation")
    bench_parser.add_argument("--no-dynamic", action="store_true", help="skip the dynamic-drafting rows")
    bench_parser.add_argument(
        "--threads", type=int, help="CPU threads for torch (default: torch's; 1 is steadier on a shared machine)"
    )
    bench_parser.add_argument("--json", action="store_true")
    bench_parser.set_defaults(handler=command_bench)

    score_parser = commands.add_parser("score", help="rate a draft against its target on text, without generating")
    add_pair_arguments(score_parser)
    add_sampling_arguments(score_parser)
    score_parser.add_argument("--prompts", default="heldout", help="code|prose|repetitive|arithmetic|all|heldout|FILE")
    score_parser.add_argument("--gamma", type=int, help="γ for the predictions (default: the pair's)")
    score_parser.add_argument("--repeats", type=int, default=20, help="timing repeats for τ and ν")
    score_parser.add_argument(
        "--continue",
        dest="continue_tokens",
        type=int,
        default=0,
        help="score the target's own continuation of each prompt (N tokens) instead of the prompts: the α a run will see",
    )
    score_parser.add_argument("--seed", type=int, default=0, help="for --continue under sampling")
    score_parser.add_argument(
        "--threads", type=int, help="CPU threads for torch (default: torch's; 1 is steadier on a shared machine)"
    )
    score_parser.add_argument("--json", action="store_true")
    score_parser.set_defaults(handler=command_score)

    hardware_parser = commands.add_parser("hardware", help="τ and ν of a pair's real architectures here, random weights")
    add_pair_arguments(hardware_parser)
    hardware_parser.add_argument(
        "--alpha", type=float, help="α to predict the speedup with (default: scored, if the weights are local)"
    )
    hardware_parser.add_argument("--gamma", type=int, help="γ for the verify pass and the prediction (default: the pair's)")
    hardware_parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], help="default: the pair's")
    hardware_parser.add_argument("--repeats", type=int, default=10)
    hardware_parser.add_argument(
        "--threads", type=int, help="CPU threads for torch (default: torch's; 1 is steadier on a shared machine)"
    )
    hardware_parser.add_argument("--memory-gib", type=float, help="memory to plan with instead of what is available")
    hardware_parser.add_argument(
        "--save", action="store_true", help="keep the result for the app (see specviz.analysis.hardware.cache_path)"
    )
    hardware_parser.add_argument("--json", action="store_true")
    hardware_parser.set_defaults(handler=command_hardware)

    theory_parser = commands.add_parser("theory", help="what α, γ and τ predict (Leviathan et al. 2023)")
    theory_parser.add_argument("--alpha", type=float, required=True)
    theory_parser.add_argument("--gamma", type=int, required=True)
    theory_parser.add_argument("--tau", type=float, required=True)
    theory_parser.add_argument("--json", action="store_true")
    theory_parser.set_defaults(handler=command_theory)
    return parser


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
        }
        for event in events
        if isinstance(event, Cycle)
    ]
    m = measures_of(summary.tally, gamma=events[0].gamma, tokens_per_s=summary.tokens_per_s)
    return {
        "mode": summary.mode,
        "drafter": events[0].drafter,
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
    check_prompt_text(args.prompt)
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


def command_bench(args: argparse.Namespace) -> int:
    from specviz.cli.bench import bench, format_table
    from specviz.prompts import load_prompt_set

    try:
        gammas = [int(g) for g in str(args.gamma).split(",")]
    except ValueError:
        raise UsageError(f"--gamma takes an integer or a comma-separated list (got {args.gamma!r})") from None
    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1 (got {args.repeats})")
    settings = {gamma: settings_from(args, gamma) for gamma in gammas}  # validates before any model is loaded
    prompts = load_prompt_set(args.prompts)
    pair = resolve_pair(args)
    log = (lambda line: None) if args.json else print
    log(
        f"pair {pair.name} on {pair.device} ({pair.dtype}), {len(prompts)} prompts, {args.max_new_tokens} new tokens, "
        f"temperature {args.temperature}, {args.repeats} repeats"
    )
    result = bench(
        pair,
        prompts,
        settings[gammas[0]],
        gammas,
        drafter=args.drafter,
        repeats=args.repeats,
        with_transformers=not args.no_hf,
        with_dynamic=not args.no_dynamic,
        log=log,
    )
    if args.json:
        print(json.dumps(result))
    else:
        print(format_table(result["rows"]))
        if result["greedy_identical"] is not None:
            print(f"greedy outputs identical across methods: {result['greedy_identical']}")
    return 0


def command_score(args: argparse.Namespace) -> int:
    from specviz.analysis.score import scorecard
    from specviz.analysis.timing import measure_step_times
    from specviz.prompts import load_prompt_set

    sampling = sampling_from(args)
    DecodeSettings(gamma=1 if args.gamma is None else args.gamma, sampling=sampling).validate()  # one line if bad
    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1 (got {args.repeats})")
    if args.continue_tokens < 0:
        raise UsageError(f"--continue must be ≥ 0 (got {args.continue_tokens})")
    texts = load_prompt_set(args.prompts)
    name, entry = pair_from(args)
    gamma = entry.gamma if args.gamma is None else args.gamma
    pair = load_pair(name, entry, load_catalogue().offline_pairs())
    times = measure_step_times(pair.target.model, pair.draft.model, pair.shared_vocab_size, gamma, repeats=args.repeats)
    card = scorecard(pair, texts, sampling, gamma, times, continue_tokens=args.continue_tokens, seed=args.seed)
    scored = f"the target's own {args.continue_tokens}-token continuations of" if args.continue_tokens else ""
    result = {
        "pair": pair.name,
        "device": str(pair.device),
        "dtype": str(pair.dtype).replace("torch.", ""),
        "scored": f"{scored} {len(texts)} texts".strip(),
        **card.to_dict(),
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"pair {pair.name} on {pair.device} ({result['dtype']}): {result['tokens_scored']} positions in {result['scored']}, teacher-forced"
    )
    print(f"  α = {_fmt(result['alpha'])}  ({result['alpha_meaning']})")
    print("  α by text  " + " ".join(_fmt(a) for a in result["alpha_by_text"]))
    print(
        f"  τ = {_fmt(result['tau'])}, ν = {_fmt(result['verify_cost'])} (draft step {result['draft_step_ms']:.2f} ms, "
        f"target step {result['target_step_ms']:.2f} ms, verify over γ + 1 = {gamma + 1}: {result['verify_ms']:.2f} ms)"
    )
    print(
        f"  predicted at γ = {gamma}: {_fmt(result['predicted_tokens_per_cycle'])} tokens per cycle, "
        f"{_fmt(result['predicted_speedup'])}x (Leviathan, ν = 1: {_fmt(result['predicted_speedup_leviathan'])}x)"
    )
    print(f"  best γ = {result['best_gamma']}: {_fmt(result['best_speedup'])}x")
    print("  hardest positions (Σ min(p, q), context → text's token | target's | draft's):")
    for hard in result["hardest"]:
        print(
            f"    {hard['overlap']:.2f}  {hard['context']!r} → {hard['token']!r} | {hard['target_top']!r} | {hard['draft_top']!r}"
        )
    return 0


def command_hardware(args: argparse.Namespace) -> int:

    from specviz.analysis import hardware

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
    print(f"  τ = {_fmt(result['tau'])}, ν = {_fmt(result['verify_cost'])}")
    if alpha is not None:
        print(
            f"  at α = {alpha:.3f} ({alpha_source}): {_fmt(result['predicted_speedup'])}x at γ = {gamma}, "
            f"best γ = {result['best_gamma']}: {_fmt(result['best_speedup'])}x"
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
    from specviz.analysis.score import encode_text, score_token_ids
    from specviz.engine import SamplingSettings
    from specviz.prompts import load_prompt_set

    pair = load_pair(name, entry, catalogue.offline_pairs())
    scored = [score_token_ids(pair, encode_text(pair, text), SamplingSettings()) for text in load_prompt_set("heldout")]
    overlaps = [overlap for text in scored for overlap in text.overlaps]
    return (sum(overlaps) / len(overlaps), "scored (greedy, held-out code)") if overlaps else (None, None)


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


def set_threads(threads: int) -> None:
    """Timed commands on a shared CPU: one thread is not held up waiting for a second one that was preempted."""
    if threads < 1:
        raise UsageError(f"--threads must be at least 1 (got {threads})")
    import torch

    torch.set_num_threads(threads)


def quiet_libraries() -> None:
    """Keep library progress bars and advice off the CLI's output."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def main(argv: Sequence[str] | None = None) -> int:
    from specviz.analysis.hardware import HardwareError

    quiet_libraries()
    args = build_parser().parse_args(argv)
    try:
        threads = getattr(args, "threads", None)
        if threads is not None:
            set_threads(threads)
        return args.handler(args)
    except (UsageError, SettingsError, PromptError, PairError, CatalogueError, ValueError) as error:
        print(f"specviz: error: {error}", file=sys.stderr)
        return 2
    except HardwareError as error:
        print(f"specviz: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
