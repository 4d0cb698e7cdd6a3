"""`python -m specviz bench`: the benchmark (specviz.deployment.benchmark) as a table or JSON."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from dataclasses import replace

from specviz.analysis.cache_fit import rate_range, read_rate_now_gb_s, two_levels
from specviz.analysis.readings import STEADY_WITHIN, spread_of
from specviz.cli import options
from specviz.deployment.benchmark import bench, merge_processes
from specviz.deployment.report import acceptance_lines
from specviz.process.machine_load import LoadMeter
from specviz.prompts.sets import load_prompt_set


def format_table(rows: list[dict]) -> str:
    columns = [
        ("method", "{}"),
        ("gamma", "{}"),
        ("tree", "{}"),
        ("verification", "{}"),
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
        ("predicted_tokens_per_cycle", "{:.2f}"),
        ("rows_per_pass", "{:.2f}"),
        ("drafts_per_cycle", "{:.2f}"),
        ("draft_ms_per_cycle", "{:.2f}"),
        ("verify_ms_per_cycle", "{:.2f}"),
        ("other_ms_per_cycle", "{:.2f}"),
        ("latency_p50_s", "{:.3f}"),
        ("latency_p90_s", "{:.3f}"),
        ("latency_p99_s", "{:.3f}"),
        ("itl_p50_ms", "{:.1f}"),
        ("itl_p99_ms", "{:.1f}"),
        ("ttft_ms", "{:.1f}"),
        ("same_as_target", "{}"),
    ]
    header = [name for name, _ in columns]
    body = [[("-" if row.get(name) is None else fmt.format(row[name])) for name, fmt in columns] for row in rows]
    widths = [max(len(cell) for cell in column) for column in zip(header, *body)]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in [header, *body]]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def add_parser(commands) -> None:
    parser = commands.add_parser("bench", help="autoregressive vs ours vs transformers' assisted generation")
    options.add_pair_arguments(parser)
    options.add_decoding_arguments(parser, several_verifications=True)
    options.add_prompt_set_arguments(parser, 3)
    parser.add_argument("--gamma", type=str, help=options.GAMMA_HELP)
    options.add_tree_argument(parser, several=True)
    parser.add_argument("--no-hf", action="store_true", help="skip transformers' assisted generation")
    parser.add_argument("--no-dynamic", action="store_true", help="skip the dynamic-drafting rows")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--processes",
        type=options.at_least_one,
        default=1,
        help="run the benchmark in N fresh processes, one after another, and report each row's median process ± the "
        "farthest process from it (a process's threads and memory can set its speed: docs/performance.md)",
    )
    parser.set_defaults(handler=command)


def child_argv(argv: list[str]) -> list[str]:
    """The command line of one process of `bench --processes N`: the same, without --processes, with --json."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--processes":
            skip = True
        elif not arg.startswith("--processes="):
            kept.append(arg)
    return kept if "--json" in kept else [*kept, "--json"]


def in_processes(args: argparse.Namespace) -> int:
    """`bench --processes N`: N fresh `bench` processes one after another (none beside another), merged."""
    argv = child_argv(list(getattr(args, "argv", None) or sys.argv[1:]))
    results = []
    for number in range(args.processes):
        if not args.json:
            print(f"process {number + 1}/{args.processes}: python -m specviz {shlex.join(argv)}", flush=True)
        done = subprocess.run([sys.executable, "-m", "specviz", *argv], stdout=subprocess.PIPE, text=True, check=False)
        if done.returncode != 0:
            return done.returncode
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    merged = merge_processes(results)
    if merged.get("auto"):  # the choice every process read from specviz's cache, measured as the merged row reads
        chosen = merged["auto"]
        merged["auto"] = {**chosen, **measured_of(merged["rows"], argparse.Namespace(**chosen))}
    if args.json:
        print(json.dumps(merged))
        return 0
    print(format_table(merged["rows"]))
    for row in merged["rows"]:
        if row.get("speedup_by_process") and row["method"] != "autoregressive":
            spread = spread_of(row["speedup_by_process"])
            label = row["tree"] or f"γ {row['gamma']}"
            print(
                f"{row['method']} ({label}): {spread.text()} over {args.processes} processes "
                f"({', '.join(f'{v:.2f}' for v in row['speedup_by_process'])}), every process within "
                f"{100 * spread.relative:.1f} % of the median"
            )
    rates = [rate for rates in merged["memory_read_gb_s_by_process"] for rate in rates or ()]
    print(read_rate_line(rates, "the processes"))
    return 0


def command(args: argparse.Namespace) -> int:
    if args.processes > 1:
        return in_processes(args)
    asked = options.gammas_from(args.gamma, options.pair_from(args)[1])
    gammas = [1] if asked == options.AUTO else asked  # auto: replaced by the measured choice once the pair is loaded
    settings = {gamma: options.settings_from(args, gamma) for gamma in gammas}  # validates before any model is loaded
    for name in options.verifications_from(args)[1:]:
        replace(settings[gammas[0]], verification=name).validate()  # block and match refuse lenience, in one line
    trees = options.tree_shapes(args, options.pair_from(args)[1])
    for shape in trees:
        options.settings_from(args, gammas[0], tree=shape)  # a tree refuses lenient and adaptive settings, in one line
    prompts = load_prompt_set(args.prompts)
    pair = options.resolve_pair(args)
    chosen = None
    if asked == options.AUTO:
        chosen = options.choose_automatically(pair, settings[1], args.drafter)
        gammas = [chosen.gamma]
        settings = {chosen.gamma: options.settings_from(args, chosen.gamma)}
        auto_tree = chosen.applied(settings[chosen.gamma]).tree  # where these settings can verify a tree at all
        trees = [*([auto_tree] if auto_tree else []), *(shape for shape in trees if shape != auto_tree)]
    log = (lambda line: None) if args.json else print
    log(
        f"pair {pair.name} on {pair.device} ({pair.dtype}), {len(prompts)} prompts, {args.max_new_tokens} new tokens, "
        f"temperature {args.temperature}, {args.repeats} repeats"
    )
    with LoadMeter() as others:
        result = bench(
            pair,
            prompts,
            settings[gammas[0]],
            gammas,
            drafter=args.drafter,
            repeats=args.repeats,
            with_transformers=not args.no_hf,
            with_dynamic=not args.no_dynamic,
            trees=trees,
            log=log,
            verifications=options.verifications_from(args)[1:],
            read_rate=read_rate_now_gb_s,
        )
    result["other_load_cores"] = others.result.other_cores
    result["openmp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY", "")  # "": libgomp's default, the server's too
    if chosen is not None:
        result["auto"] = {**chosen.to_json(), **measured_of(result["rows"], chosen)}
    if args.json:
        print(json.dumps(result))
    else:
        print(format_table(result["rows"]))
        for line in spread_lines(result["rows"], args.repeats):
            print(line)
        print(read_rate_line(result["memory_read_gb_s"]))
        for row in result["rows"]:
            if row.get("acceptance_histogram"):
                print(f"{row['method']} (γ {row['gamma']}, {row.get('verification', 'exact')}):")
                print("\n".join(f"  {line}" for line in acceptance_lines(row)))
        if result["greedy_identical"] is not None:
            print(f"greedy: speculative output identical to the target alone: {result['greedy_identical']}")
        if result.get("transformers_identical") is not None:
            print(
                f"greedy: transformers' assisted generation identical to our target alone: {result['transformers_identical']}"
                + (
                    ""
                    if result["transformers_identical"]
                    else " (transformers runs its own forward; the two can part where two logits tie within rounding)"
                )
            )
        if chosen is not None:
            print(
                auto_line(chosen.label, chosen.predicted_speedup, result["auto"], chosen.read_gb_s, result["memory_read_gb_s"])
                + ("" if chosen.pays else f". {chosen.sentence[0].upper()}{chosen.sentence[1:]}.")
            )
        print(f"timed on the {result['engine']} step, {result['threads']} torch threads")
        if others.result.other_cores is not None:
            warning = " (busy: these timings are slowed; run again on a quiet machine)" if others.result.busy else ""
            print(f"other programs used {others.result.other_cores:.2f} cores while this ran{warning}")
    return 0


def read_rate_line(rates: list[float], around: str = "the repeats") -> str:
    """The memory read rates taken around the repeats (or processes), and where they lie far apart, what that means."""
    if not rates:
        return "memory read rate: not measured"
    line = f"memory read rate around {around}: {', '.join(f'{rate:.0f}' for rate in rates)} GB/s"
    if two_levels(rates):
        line += (
            " (⚠ it moved between levels while this ran: where a machine's memory reads move between two levels, a "
            "verify pass's cost moves with them, docs/performance.md \"The machine's two states\"; compare speedups "
            "measured at like rates)"
        )
    return line


def spread_lines(rows: list[dict], repeats: int) -> list[str]:
    """Each row's speedup over its repeats (the median ± the farthest repeat), and a warning where a repeat lies more
    than STEADY_WITHIN from the median, as pyperf warns (docs/performance.md)."""
    lines, unsteady = [], []
    for row in rows:
        repeated = spread_of(row.get("speedup_by_repeat") or [])
        if repeated is None or repeated.spread is None:
            continue
        label = f"tree {row['tree']}" if row.get("tree") else f"γ {row['gamma']}"
        lines.append(f"{row['method']} ({label}): {repeated.text()} over {repeats} repeats")
        if not repeated.steady:
            unsteady.append(f"{row['method']} ({label}) {100 * repeated.relative:.0f} %")
    if unsteady:
        lines.append(
            f"⚠ unsteady: a repeat lies more than {100 * STEADY_WITHIN:.0f} % from the median ({', '.join(unsteady)}): "
            "the machine's speed moved; run again when it is quiet, or with --processes"
        )
    return lines


def auto_line(
    label: str, predicted: float, measured: dict, chosen_read_gb_s: float | None = None, read_gb_s: list[float] | None = None
) -> str:
    """γ auto's prediction beside what its row measured, like for like: while decoding (the prefill left out, as the
    calibration leaves it out), then with the prefill (the row's headline speedup); and where both were taken, the
    memory read rate the choice was measured at beside this run's (a prediction holds in the state it was made in)."""
    decode, whole = measured.get("measured_decode_speedup"), measured.get("measured_speedup")
    line = f"--gamma auto chose {label}: predicted {predicted:.2f}× while decoding, measured "
    line += f"{decode:.2f}× ({decode / predicted:.2f} of it)" if decode and predicted else "n/a"
    line += f"; {whole:.2f}× with the prompt's prefill" if whole is not None else ""
    if chosen_read_gb_s and read_gb_s:
        line += f"; chosen while memory read {chosen_read_gb_s:.0f} GB/s, measured at {rate_range(read_gb_s)} GB/s"
    return line


def auto_row(rows: list[dict], chosen) -> dict | None:
    """The row that ran the automatic choice (its tree's where a tree row ran, else its chain's)."""
    ran_tree = any(row["method"] == "speculative-tree" and row.get("tree") == chosen.tree for row in rows) and chosen.tree
    for row in rows:
        is_tree_row = row["method"] == "speculative-tree" and ran_tree and row.get("tree") == chosen.tree
        is_chain_row = row["method"] == "speculative" and not ran_tree and row.get("gamma") == chosen.gamma
        if is_tree_row or is_chain_row:
            return row
    return None


def measured_of(rows: list[dict], chosen) -> dict:
    """What the automatic choice's row measured: its speedup with the prompt's prefill (the headline), and while
    decoding, which is what γ auto predicts (its calibration leaves the prefill out)."""
    row = auto_row(rows, chosen) or {}
    return {"measured_speedup": row.get("speedup"), "measured_decode_speedup": row.get("decode_speedup")}
