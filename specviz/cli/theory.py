"""`python -m specviz theory`: what α, γ and τ predict (Leviathan et al. 2023)."""

from __future__ import annotations

import argparse
import json
import math

from specviz.analysis import theory
from specviz.cli.options import UsageError


def add_parser(commands) -> None:
    parser = commands.add_parser("theory", help="what α, γ and τ predict (Leviathan et al. 2023)")
    parser.add_argument("--alpha", type=float, required=True)
    parser.add_argument("--gamma", type=int, required=True)
    parser.add_argument("--tau", type=float, required=True)
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
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
        "speedup_possible": prediction.speedup_possible,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"α = {args.alpha}, γ = {args.gamma}, τ = {args.tau}")
        print(f"  expected tokens per cycle  {prediction.tokens_per_cycle:.3f}")
        print(f"  expected speedup           {prediction.speedup:.3f}x")
        print(f"  best γ                     {prediction.best_gamma} ({prediction.best_speedup:.3f}x)")
        print(f"  any speedup possible       {'yes' if prediction.speedup_possible else 'no'} (needs α > τ)")
    return 0
