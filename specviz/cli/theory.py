"""`python -m specviz theory`: what α, γ and τ predict (Leviathan et al. 2023); with --tree-choice, which token tree
pays on a machine's ν(k) (after Sequoia), beside the best chain."""

from __future__ import annotations

import argparse
import json
import math

from specviz.analysis import theory, tree_theory
from specviz.analysis.hardware_cache import saved_verify_curve
from specviz.cli.options import UsageError


def add_parser(commands) -> None:
    parser = commands.add_parser("theory", help="what α, γ and τ predict (Leviathan et al. 2023); --tree-choice: the best tree")
    parser.add_argument("--alpha", type=float, help="α (required without --tree-choice)")
    parser.add_argument("--gamma", type=int, help="γ (required without --tree-choice)")
    parser.add_argument("--tau", type=float, required=True, help="τ; with --tree-choice, one draft forward per depth")
    parser.add_argument(
        "--tree-choice",
        action="store_true",
        help="pick the tree shape that maximises tokens per pass ÷ (ν(rows) + depth·τ), beside the best chain",
    )
    parser.add_argument(
        "--acceptance-by-rank",
        help="a_r for r = 1, 2, …: the chance the target's token is the draft's r-th choice (top-r coverage minus "
        "top-(r − 1)), e.g. 0.53,0.12,0.07,0.03,0.02; rows per depth separated by /, the last for deeper ones",
    )
    parser.add_argument(
        "--nu",
        default="flat",
        help="ν(k), a pass over k rows in target steps: flat (1 for every k, a GPU's memory-bound pass), saved "
        "(the newest `hardware --rows N --save` of --pair), or a comma list for k = 1, 2, … (starting at 1)",
    )
    parser.add_argument("--pair", help="with --nu saved: the pair whose measured ν(k) to use")
    parser.add_argument(
        "--max-rows", type=int, default=tree_theory.MAX_ROWS, help="the largest verify pass to consider: nodes + 1"
    )
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    if not (args.tau >= 0) or math.isinf(args.tau):
        raise UsageError(f"--tau must be a finite number ≥ 0 (got {args.tau})")
    if args.tree_choice:
        return tree_choice(args)
    if args.alpha is None or args.gamma is None:
        raise UsageError("--alpha and --gamma are required (or give --tree-choice with --acceptance-by-rank)")
    if not (0 <= args.alpha <= 1) or math.isnan(args.alpha):
        raise UsageError(f"--alpha must be in [0, 1] (got {args.alpha})")
    if args.gamma < 1:
        raise UsageError(f"--gamma must be at least 1 (got {args.gamma})")
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


def tree_choice(args: argparse.Namespace) -> int:
    """The best shape and the best chain under the given ν(k), and under a flat ν for contrast."""
    if not 2 <= args.max_rows <= tree_theory.MAX_ROWS:
        raise UsageError(f"--max-rows must be between 2 and {tree_theory.MAX_ROWS} (got {args.max_rows})")
    acceptance = parse_acceptance(args.acceptance_by_rank)
    verify_cost, source = parse_nu(args.nu, args.pair, args.max_rows)
    try:
        here = tree_theory.choose_tree(acceptance, args.tau, verify_cost, args.max_rows)
    except ValueError as error:
        raise UsageError(str(error)) from error
    flat_costs = tree_theory.flat_verify_costs(args.max_rows)
    flat = tree_theory.choose_tree(acceptance, args.tau, flat_costs, args.max_rows)
    is_flat = all(verify_cost.get(rows) == 1.0 for rows in flat_costs)
    sentence = None if is_flat else tree_theory.why_trees_pay_sentence(here, flat, verify_cost)
    if args.json:
        print(
            json.dumps(
                {
                    **here.to_json(),
                    "nu_source": source,
                    "verify_curve": {str(rows): verify_cost[rows] for rows in range(1, here.max_rows + 1)},
                    "flat": flat.to_json(),
                    "sentence": sentence,
                }
            )
        )
        return 0
    rates = " / ".join(", ".join(f"{rate:.3g}" for rate in row) for row in acceptance.by_depth)
    print(f"a_r = {rates} (rank 1 first), τ = {args.tau}, ν: {source}, passes of up to {here.max_rows} rows")
    print_options([("best", here.tree), ("best chain", here.chain)])
    if sentence:
        print("with ν flat (a GPU-like pass):")
        print_options([("best", flat.tree), ("best chain", flat.chain)])
        print(sentence)
    return 0


def print_options(options: list[tuple[str, tree_theory.TreeOption]]) -> None:
    print(f"  {'':11s}{'shape':26s}{'rows':>5s}{'depth':>6s}{'tokens/pass':>12s}{'ν(rows)':>9s}{'cost':>7s}{'speedup':>9s}")
    for name, option in options:
        print(
            f"  {name:11s}{option.label:26s}{option.rows:>5d}{option.depth:>6d}{option.tokens_per_pass:>12.3f}"
            f"{option.verify_cost:>9.2f}{option.cost:>7.2f}{option.speedup:>8.2f}x"
        )


def parse_acceptance(text: str | None) -> tree_theory.RankAcceptance:
    if not text:
        raise UsageError("--tree-choice needs --acceptance-by-rank, e.g. 0.53,0.12,0.07,0.03,0.02")
    try:
        rows = tuple(tuple(float(rate) for rate in row.split(",")) for row in text.split("/"))
        return tree_theory.RankAcceptance(rows)
    except ValueError as error:
        raise UsageError(f"--acceptance-by-rank {text!r}: {error}") from error


def parse_nu(text: str, pair: str | None, max_rows: int) -> tuple[dict[int, float], str]:
    """ν(k) by k, and where it came from, for `--nu`."""
    if text == "flat":
        return tree_theory.flat_verify_costs(max_rows), f"flat (1 step for any k ≤ {max_rows}, a GPU's memory-bound pass)"
    if text == "saved":
        if not pair:
            raise UsageError("--nu saved needs --pair: the pair whose `hardware --rows N --save` to read")
        entry = saved_verify_curve(pair)
        if entry is None:
            raise UsageError(f"no ν(k) saved for {pair}: run `python -m specviz hardware --pair {pair} --rows 64 --save`")
        curve = {int(rows): float(nu) for rows, nu in entry["verify_curve"].items()}
        threads = f", {entry['threads']} thread{'s' if entry['threads'] != 1 else ''}" if entry.get("threads") else ""
        where = f"{entry.get('device_name', entry.get('device'))}{threads}, {entry.get('dtype')}, {entry.get('measured_at')}"
        return curve, f"measured by `hardware` for {pair} ({where}), k ≤ {max(curve)}"
    try:
        values = [float(nu) for nu in text.split(",")]
    except ValueError:
        raise UsageError(f"--nu must be flat, saved or a comma list of numbers (got {text!r})") from None
    if any(not (0 < nu < math.inf) for nu in values) or values[0] != 1.0:
        raise UsageError(f"--nu: ν(1) is one step (1) and every ν(k) a positive number (got {text})")
    return dict(enumerate(values, start=1)), f"given for k = 1 … {len(values)}"
