"""`python -m specviz report`: is speculation worth it for this deployment? One offline HTML file to share."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specviz.cli.options import (
    AUTO,
    UsageError,
    add_decoding_arguments,
    add_timed_pair_arguments,
    add_tree_argument,
    choose_automatically,
    dtype_name,
    pair_and_gamma,
    parse_batches,
    resolve_pair,
    settings_from,
    tree_shapes,
)
from specviz.deployment.batch import BATCH_SIZES
from specviz.deployment.collect import deployment_report
from specviz.deployment.report import acceptance_lines, write_report
from specviz.numbers import number
from specviz.prompts.sets import load_prompt_set


def add_parser(commands) -> None:
    parser = commands.add_parser("report", help="both methods over a prompt set: latency, memory, cold start, batch, verdict")
    add_timed_pair_arguments(
        parser,
        3,
        "each prompt this many times by each method",
        "drafts per cycle (default: the pair's; `gamma: auto` measures what pays here)",
    )
    add_decoding_arguments(parser)
    add_tree_argument(parser, several=True)
    parser.add_argument("--out", required=True, help="the HTML file to write (self-contained, works offline)")
    parser.add_argument(
        "--batch",
        default=",".join(map(str, BATCH_SIZES)),
        help="batch sizes to time for the batch curve (default %(default)s; 'none' skips it)",
    )
    parser.add_argument("--no-cold-start", action="store_true", help="skip the fresh process that times cold loads")
    parser.add_argument("--json", action="store_true", help="also print the report's numbers as JSON")
    parser.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    batches = [] if args.batch.strip().lower() == "none" else parse_batches(args.batch)
    out = Path(args.out)
    if out.is_dir() or not out.parent.is_dir():
        raise UsageError(f"--out must be a file in an existing folder (got {args.out})")
    _, entry, gamma = pair_and_gamma(args)
    settings = settings_from(args, gamma)  # validates before any model is loaded
    trees = tree_shapes(args, entry)
    for shape in trees:
        settings_from(args, gamma, tree=shape)  # a tree refuses lenient and adaptive settings, in one line
    prompts = load_prompt_set(args.prompts)
    pair = resolve_pair(args)
    if args.gamma is None and entry.gamma == AUTO:  # the pair's `gamma: auto`: what this machine measured to pay
        chosen = choose_automatically(pair, settings, args.drafter)
        gamma, settings = chosen.gamma, settings_from(args, chosen.gamma)
        auto_tree = chosen.applied(settings).tree
        trees = trees or ([auto_tree] if auto_tree else [])  # the trees asked for, else the tree γ auto chose
    log = (lambda line: None) if args.json else print
    log(f"pair {pair.name} on {pair.device} ({dtype_name(pair)}), {len(prompts)} prompts × {args.repeats}, γ = {gamma}")
    report = deployment_report(
        pair,
        prompts,
        settings,
        args.repeats,
        batches=batches,
        cold_start=not args.no_cold_start,
        drafter=args.drafter,
        trees=trees,
        prompt_labels=[
            prompt.strip().splitlines()[0][:24] if prompt.strip() else f"#{i + 1}" for i, prompt in enumerate(prompts)
        ],
        log=log,
    )
    write_report(report, out)
    if args.json:
        print(json.dumps({**report.to_json(), "out": str(out)}))
        return 0
    spec, base = report.speculative_tail, report.autoregressive_tail
    verdict = report.verdict
    print(f"{verdict.answer}: {verdict.reason}")
    for name, tail in (("speculative", spec), ("autoregressive", base)):
        print(
            f"  {name:>14}: request P50 {number(tail.latency_p50_s, 3)} s, P99 {number(tail.latency_p99_s, 3)} s · "
            f"ITL P50 {number(tail.itl_p50_ms, 1)} ms, P99 {number(tail.itl_p99_ms, 1)} ms · TTFT {number(tail.ttft_ms, 1)} ms"
        )
    for check in verdict.checks:
        mark = {True: "holds", False: "does not hold", None: "not measured"}[check.holds]
        print(f"  {check.rule}: {mark}. {check.reason}")
    for line in acceptance_lines(report.acceptance) if report.acceptance else []:
        print(f"  {line}")
    for row in report.drafting:
        print(
            f"  {row.setup:>14}: {number(row.rows_per_pass, 2)} rows per verify pass, {number(row.tokens_per_pass, 2)} "
            f"tokens per target pass, ν {number(row.verify_cost, 2)}, speedup {number(row.speedup, 2)}×"
        )
    print(f"wrote {out}")
    return 0
