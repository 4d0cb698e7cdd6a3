"""`python -m specviz score`: rate a draft against its target on text, without generating (the draft scorecard)."""

from __future__ import annotations

import argparse
import json

from specviz.analysis.score import scorecard
from specviz.analysis.self_draft import self_draft_line, self_draft_tallies
from specviz.analysis.timing import measure_step_times
from specviz.cli.options import (
    NA,
    UsageError,
    add_sampling_arguments,
    add_timed_pair_arguments,
    dtype_name,
    pair_and_gamma,
    resolve_pair,
    sampling_from,
)
from specviz.engine import DecodeSettings
from specviz.numbers import number
from specviz.prompts.sets import load_prompt_set
from specviz.run.runner import encode_prompt


def add_parser(commands) -> None:
    parser = commands.add_parser("score", help="rate a draft against its target on text, without generating")
    add_timed_pair_arguments(parser, 20, "timing repeats for τ and ν", "γ for the predictions (default: the pair's)")
    add_sampling_arguments(parser)
    parser.add_argument(
        "--continue",
        dest="continue_tokens",
        type=int,
        default=0,
        help="score the target's own continuation of each prompt (N tokens) instead of the prompts: the α a run will see",
    )
    parser.add_argument("--seed", type=int, default=0, help="for --continue under sampling")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    sampling = sampling_from(args)
    DecodeSettings(sampling=sampling).validate()  # one line if bad
    if args.continue_tokens < 0:
        raise UsageError(f"--continue must be ≥ 0 (got {args.continue_tokens})")
    texts = load_prompt_set(args.prompts)
    _, _, gamma = pair_and_gamma(args)
    pair = resolve_pair(args)
    times = measure_step_times(pair.target.model, pair.draft.model, pair.shared_vocab_size, gamma, repeats=args.repeats)
    card = scorecard(pair, texts, sampling, gamma, times, continue_tokens=args.continue_tokens, seed=args.seed)
    prompt_ids = encode_prompt(pair, texts[0], 8 * (gamma + 1), gamma)
    self_draft = self_draft_tallies(pair, prompt_ids, sampling, gamma, seed=args.seed)
    scored = f"the target's own {args.continue_tokens}-token continuations of" if args.continue_tokens else ""
    result = {
        "pair": pair.name,
        "device": str(pair.device),
        "dtype": dtype_name(pair),
        "scored": f"{scored} {len(texts)} texts".strip(),
        **card.to_dict(),
        "self_draft": {  # the target as its own draft, per verifier (analysis/self_draft.py)
            name: {"alpha": tally.alpha, "tokens_per_cycle": tally.mean_acceptance_length} for name, tally in self_draft.items()
        },
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"pair {pair.name} on {pair.device} ({result['dtype']}): {result['tokens_scored']} positions in {result['scored']}, teacher-forced"
    )
    print(f"  α = {number(result['alpha'], missing=NA)}  ({result['alpha_meaning']})")
    print("  α by text  " + " ".join(number(a, missing=NA) for a in result["alpha_by_text"]))
    print(
        f"  τ = {number(result['tau'], missing=NA)}, ν = {number(result['verify_cost'], missing=NA)} (draft step {result['draft_step_ms']:.2f} ms, "
        f"target step {result['target_step_ms']:.2f} ms, verify over γ + 1 = {gamma + 1}: {result['verify_ms']:.2f} ms)"
    )
    print(
        f"  predicted at γ = {gamma}: {number(result['predicted_tokens_per_cycle'], missing=NA)} tokens per cycle, "
        f"{number(result['predicted_speedup'], missing=NA)}x (Leviathan, ν = 1: {number(result['predicted_speedup_leviathan'], missing=NA)}x)"
    )
    print(f"  best γ = {result['best_gamma']}: {number(result['best_speedup'], missing=NA)}x")
    print(f"  {self_draft_line(self_draft, gamma)}")
    print("  hardest positions (Σ min(p, q), context → text's token | target's | draft's):")
    for hard in result["hardest"]:
        print(
            f"    {hard['overlap']:.2f}  {hard['context']!r} → {hard['token']!r} | {hard['target_top']!r} | {hard['draft_top']!r}"
        )
    return 0
