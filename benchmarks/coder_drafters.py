"""Three drafters for the Qwen2.5-Coder-1.5B target, in one run: its 0.5B sibling, specviz's feature head, prompt lookup.

The pair loads once (compiled, in its `auto` weight form, as it serves); then `bench` (deployment/benchmark.py, the
numbers' one home) runs each drafter against the target alone on the same held-out coding questions, greedy. Each
drafter's speedup is over the plain decoding measured in its own bench call, back to back; every speculative output
is compared with the target alone's, token for token.

    PYTHONPATH=. python benchmarks/coder_drafters.py [--prompts code-questions] [--tokens 128]
                                                     [--head-forms int8,w4a8] [--head-tree 2x1:1]

The head drafts in each of `--head-forms` (a form only changes the draft: it moves α and τ, never the output), each
form reloaded and compiled before its bench call; `--head-tree` adds a tree row for the head (every form).

Writes benchmarks/results/coder_drafters.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("SPECVIZ_COMPILE", "1")

RESULTS = Path(__file__).parent / "results" / "coder_drafters.json"
DRAFTERS = {"model": [3], "feature": [1, 2, 3], "lookup": [3]}  # γ of each: the sibling's `auto` choice, the head's range
KEYS = (
    *("method", "gamma", "tokens_per_s", "speedup", "decode_speedup", "alpha", "tau", "verify_cost", "tokens_per_cycle"),
    *("draft_ms_per_cycle", "verify_ms_per_cycle", "conditional_acceptance_rate_per_pos", "same_as_target", "tree"),
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pair", default="qwen2.5-coder-0.5b-1.5b")
    parser.add_argument("--prompts", default="code-questions")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--head-forms", default="", help="comma-separated weight forms for the head (default: the pair's)")
    parser.add_argument("--head-tree", action="append", default=[], help="a token tree the head also drafts, e.g. 2x1:1")
    args = parser.parse_args()

    import torch

    from benchmarks.results import write_results
    from specviz.cli.options import compile_before_timing
    from specviz.deployment.benchmark import bench
    from specviz.engine import DecodeSettings
    from specviz.engine.tree_shape import TreeShape
    from specviz.models.catalogue import load_catalogue
    from specviz.models.head_fast_path import enable_fast_head
    from specviz.models.loading import load_feature_head, load_pair
    from specviz.process.machine_load import LoadMeter
    from specviz.prompts.sets import load_prompt_set

    catalogue = load_catalogue()
    entry = catalogue.get(args.pair)
    pair = load_pair(args.pair, entry, catalogue.offline_pairs(), progress=lambda line: print(line, flush=True))
    compile_before_timing(pair)
    prompts = load_prompt_set(args.prompts)
    settings = DecodeSettings(max_new_tokens=args.tokens)
    results: dict = {
        "pair": args.pair,
        "prompts": args.prompts,
        "prompt_count": len(prompts),
        "max_new_tokens": args.tokens,
        "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
        "target_form": pair.target.form,
        "draft_form": pair.draft.form if pair.draft else None,
        "head_form": pair.feature_head.head.form if pair.feature_head else None,
        "drafters": {},
    }
    head_forms = [form for form in args.head_forms.split(",") if form] or [results["head_form"]]
    trees = [TreeShape.parse(text) for text in args.head_tree]
    runs = [("model", "model", None), *((f"feature-{form}", "feature", form) for form in head_forms), ("lookup", "lookup", None)]
    started = time.perf_counter()
    with LoadMeter() as meter:
        for label, drafter, form in runs:
            if drafter == "feature" and form != pair.feature_head.head.form:
                pair.feature_head = load_feature_head(pair.feature_head.reference, pair.target.model, form)
                enable_fast_head(pair.feature_head.head)  # its draft step compiled, as the pair's own head's is
                compile_before_timing(pair)
            print(f"bench: drafter {label}, γ {DRAFTERS[drafter]}", flush=True)
            result = bench(
                pair,
                prompts,
                settings,
                DRAFTERS[drafter],
                drafter=drafter,
                repeats=1,
                with_transformers=False,
                with_dynamic=False,
                trees=trees if drafter == "feature" else (),
            )
            rows = [{key: row.get(key) for key in KEYS} for row in result["rows"]]
            entry = {"rows": rows, "greedy_identical": result["greedy_identical"]}
            if drafter == "feature":
                entry["head_form"] = pair.feature_head.head.form
            results["drafters"][label if len(head_forms) > 1 or drafter != "feature" else drafter] = entry
            for row in rows:
                print(json.dumps(row), flush=True)
    results["seconds"] = round(time.perf_counter() - started, 1)
    other = meter.result.other_cores if meter.result else None
    results["other_load_cores"] = round(other, 2) if other is not None else None
    write_results(RESULTS.stem, results)


if __name__ == "__main__":
    main()
