"""Measure a trained pair the way a class sees it: greedy completions of code it never saw.

`python -m specviz.train --evaluate-only` (also run at the end of training) adds to `training_report.json`:

- distinct-4 of each greedy completion (distinct token 4-grams / all token 4-grams; loops score low);
- a syntax check (`parses_as_python`) of prompt + completion, and of the prompt alone for comparison;
- sample completions, held-out and of the built-in code presets;
- for the bundled folder, the CLI benchmark of both catalogue pairs (α, τ, verify cost ν, speedups)
  and the time to load a pair in a fresh process.
"""

from __future__ import annotations

import ast
import json
import logging
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from specviz.models.catalogue import DATA_ROOT
from specviz.models.stored import unpack_weights
from specviz.prompts.sets import PROMPTS, heldout_code_prompts, load_prompt_set
from specviz.training.on_policy import continue_greedily

log = logging.getLogger(__name__)

ASSETS = DATA_ROOT / "assets"  # where the bundled pair and its training report live
NEW_TOKENS = 96
HELDOUT_COUNT = 16  # the first 8 are the ones `bench --prompts heldout` uses
BENCH_GAMMAS = "2,3,4,5"
BENCH_NEW_TOKENS = 64  # `bench`'s default --max-new-tokens
BENCH_PAIRS = ("pycode-distilled", "pycode-plain")
BENCH_FIELDS = ("gamma", "tokens_per_s", "speedup", "decode_speedup", "alpha", "tau", "verify_cost", "predicted_speedup")


def distinct_n(ids: list[int], n: int = 4) -> float:
    """Fraction of the n-grams of ids that are distinct (1.0: no n-gram repeats)."""
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def parses_as_python(text: str, complete: bool = False) -> bool:
    """Whether text parses once cut after its last complete line (unless it is complete, e.g. ended by end-of-text).

    Two allowances, both for where the text was cut rather than for what the model wrote: text that
    starts indented (a window into a function) is nested under `if True:` lines down to its first
    indentation, and a block header left open by the cut (last line ends with `:`) gets a `pass`.
    An unclosed bracket or string at the cut still fails.
    """
    if not complete:
        text = text[: text.rfind("\n") + 1]
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return False
    indent = len(lines[0]) - len(lines[0].lstrip())
    header = "".join(" " * level + "if True:\n" for level in range(0, indent, 4))
    last = lines[-1]
    footer = ""
    if last.split("#")[0].rstrip().endswith(":"):
        footer = " " * (len(last) - len(last.lstrip()) + 4) + "pass\n"
    try:
        ast.parse(header + text.rstrip("\n") + "\n" + footer)
    except (SyntaxError, ValueError):
        return False
    return True


def greedy_completion(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, prompt: str) -> tuple[list[int], bool]:
    """The target's greedy continuation of prompt (token ids), and whether it ended with end-of-text."""
    ids = torch.tensor([tokenizer(prompt, add_special_tokens=True)["input_ids"]])
    out = continue_greedily(model, ids, NEW_TOKENS, stop_at_end_of_text=True)
    new = out[0, ids.shape[1] :].tolist()
    ended = tokenizer.eos_token_id in new
    return (new[: new.index(tokenizer.eos_token_id)] if ended else new), ended


def measure_completions(folder: Path, prompts: list[str]) -> dict:
    """distinct-4, syntax and text of the target's greedy completion of each prompt."""
    tokenizer = PreTrainedTokenizerFast.from_pretrained(folder / "pycode-target")
    unpack_weights(folder / "pycode-target")
    model = LlamaForCausalLM.from_pretrained(folder / "pycode-target", dtype=torch.float32).eval()
    rows = []
    for prompt in prompts:
        ids, ended = greedy_completion(model, tokenizer, prompt)
        completion = tokenizer.decode(ids)
        rows.append(
            {
                "prompt": prompt,
                "completion": completion,
                "distinct_4": round(distinct_n(ids), 4),
                "parses": parses_as_python(prompt + completion, complete=ended),
                "prompt_parses": parses_as_python(prompt, complete=True),
            }
        )
    scores = [row["distinct_4"] for row in rows]
    with_good_prompt = [row["parses"] for row in rows if row["prompt_parses"]]
    return {
        "prompts": len(rows),
        "new_tokens": NEW_TOKENS,
        "distinct_4_mean": round(statistics.mean(scores), 4),
        "distinct_4_min": min(scores),
        "parse_rate": round(sum(row["parses"] for row in rows) / len(rows), 4),
        "prompts_that_parse_alone": len(with_good_prompt),
        "parse_rate_where_prompt_parses": round(sum(with_good_prompt) / max(1, len(with_good_prompt)), 4),
        "completions": rows,
    }


def bench(pair: str) -> dict:
    """The benchmark of a catalogue pair on the held-out prompts, as `python -m specviz bench` runs it (its library)."""
    from specviz.deployment.benchmark import bench as run_bench  # torch and the pair load here
    from specviz.engine import DecodeSettings
    from specviz.models.catalogue import load_catalogue
    from specviz.models.loading import load_pair

    catalogue = load_catalogue()
    loaded = load_pair(pair, catalogue.get(pair), catalogue.offline_pairs())
    gammas = [int(gamma) for gamma in BENCH_GAMMAS.split(",")]
    settings = DecodeSettings(max_new_tokens=BENCH_NEW_TOKENS, gamma=gammas[0])  # greedy, as bench's defaults
    drafter = catalogue.get(pair).drafter
    result = run_bench(loaded, load_prompt_set("heldout"), settings, gammas, drafter=drafter, repeats=3, with_transformers=False)
    rows = [{k: row.get(k) for k in BENCH_FIELDS + ("target_step_ms",) if row.get(k) is not None} for row in result["rows"]]
    command = f"specviz bench --pair {pair} --prompts heldout --gamma {BENCH_GAMMAS} --repeats 3 --no-hf --json"
    return {"command": command, "rows": rows, "greedy_identical": result.get("greedy_identical")}


def load_seconds(pair: str) -> float:
    """Seconds to load a catalogue pair in a fresh process (what the app's first click waits for)."""
    code = (
        "from specviz.models.catalogue import load_catalogue; from specviz.models.loading import load_pair; "
        f"c = load_catalogue(); print(load_pair({pair!r}, c.get({pair!r}), c.offline_pairs()).load_s)"
    )
    return float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()[-1])


def update_report(folder: Path) -> dict:
    """Measure the pair saved in folder and merge the numbers into its training_report.json."""
    started = time.perf_counter()
    path = folder / "training_report.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    evaluation: dict = {
        "heldout": measure_completions(folder, heldout_code_prompts(count=HELDOUT_COUNT)),
        "presets": measure_completions(folder, PROMPTS["code"]),
    }
    if folder.resolve() == ASSETS.resolve():  # the catalogue's pairs are the bundled folders
        evaluation["bench"] = {pair: bench(pair) for pair in BENCH_PAIRS}
        evaluation["load_seconds"] = {pair: round(load_seconds(pair), 3) for pair in BENCH_PAIRS}
        evaluation["assets_megabytes"] = round(sum(f.stat().st_size for f in ASSETS.rglob("*") if f.is_file()) / 1e6, 2)
    evaluation["seconds"] = round(time.perf_counter() - started, 1)
    report["evaluation"] = evaluation
    path.write_text(json.dumps(report, indent=2) + "\n")
    log.info("evaluation: %s\n%s", json.dumps(summary(evaluation), indent=2), card_tables(report))
    return report


def summary(evaluation: dict) -> dict:
    """The headline numbers, without the sample texts."""
    short = {part: {k: v for k, v in evaluation[part].items() if k != "completions"} for part in ("heldout", "presets")}
    for pair, result in evaluation.get("bench", {}).items():
        short[pair] = result["rows"]
    for key in ("load_seconds", "assets_megabytes", "seconds"):
        if key in evaluation:
            short[key] = evaluation[key]
    return short


def card_tables(report: dict) -> str:
    """Markdown tables of the report's headline numbers, for assets/MODEL_CARD.md."""
    lines = ["| γ | pair | α | τ | ν (verify cost) | end-to-end speedup | decode speedup | Leviathan's prediction |"]
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for pair, result in report.get("evaluation", {}).get("bench", {}).items():
        for row in result["rows"]:
            if row.get("gamma") is None:
                continue
            cells = [row.get(k) for k in ("alpha", "tau", "verify_cost", "speedup", "decode_speedup", "predicted_speedup")]
            text = ["-" if c is None else f"{c:.3f}" for c in cells[:3]] + ["-" if c is None else f"{c:.2f}×" for c in cells[3:]]
            lines.append(f"| {row['gamma']} | `{pair}` | " + " | ".join(text) + " |")
    for part in ("heldout", "presets"):
        measured = report.get("evaluation", {}).get(part)
        if measured:
            lines.append(
                f"\n{part}: {measured['prompts']} prompts, distinct-4 mean {measured['distinct_4_mean']:.3f} "
                f"(min {measured['distinct_4_min']:.3f}), parse rate {measured['parse_rate']:.3f} "
                f"({measured['parse_rate_where_prompt_parses']:.3f} on the {measured['prompts_that_parse_alone']} "
                "prompts that parse alone)"
            )
    return "\n".join(lines)
