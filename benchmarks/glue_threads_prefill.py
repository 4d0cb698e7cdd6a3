"""What one-thread glue would cost a long prompt: the prefill through the compiled package with Inductor's own loops
(the norms, the attention, the activations between the products) on torch's threads, as specviz compiles it, and on
one thread, the variant that makes a verify pass the same in both of the machine's states (docs/performance.md,
"The machine's two states"). The linear layers keep torch's threads in both.

    python benchmarks/glue_threads_prefill.py --pair qwen2.5-coder-0.5b-1.5b --tokens 1000 --save glue_threads_prefill_coder

Each variant runs in fresh processes, alternating (`--rounds`), its packages in a folder of its own (a package's key
does not name this setting); each process feeds `--tokens` random tokens to an empty cache `--repeats` times, the first
untimed, and reports the fastest.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results import write_results  # noqa: E402

VARIANTS = {"torch-threads": {}, "glue-one-thread": {"GLUE_THREADS": "1"}}


def child(pair_name: str, tokens: int, repeats: int) -> None:
    import torch

    if os.environ.get("GLUE_THREADS"):
        import torch._inductor.config

        torch._inductor.config.cpp.threads = int(os.environ["GLUE_THREADS"])
    from specviz.cli.options import compile_before_timing
    from specviz.engine.compiled import decoder_for, pair_engine
    from specviz.models.catalogue import load_catalogue
    from specviz.models.loading import load_pair

    catalogue = load_catalogue()
    pair = load_pair(pair_name, catalogue.get(pair_name), catalogue.offline_pairs(), progress=lambda _: None)
    compile_before_timing(pair)
    ids = torch.randint(0, pair.shared_vocab_size, (tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    seconds = []
    with torch.inference_mode():
        for _ in range(repeats):
            decoder = decoder_for(pair.target.model, pair.shared_vocab_size)
            started = time.perf_counter()
            decoder.feed(ids, keep_last=1)
            seconds.append(time.perf_counter() - started)
    print(json.dumps({"engine": pair_engine(pair), "prefill_s": seconds[1:] or seconds}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="pycode-distilled")
    parser.add_argument("--tokens", type=int, default=900)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--save", help="write benchmarks/results/NAME.json")
    args = parser.parse_args()
    if args.child:
        child(args.pair, args.tokens, args.repeats)
        return 0
    runs = {name: [] for name in VARIANTS}
    for round_number in range(args.rounds):
        for name, environment in VARIANTS.items():
            env = {**os.environ, **environment}
            if environment:
                env["TORCHINDUCTOR_CACHE_DIR"] = str(Path(tempfile.gettempdir()) / "specviz-glue-1")
            command = [sys.executable, __file__, "--child", "--pair", args.pair, "--tokens", str(args.tokens)]
            command += ["--repeats", str(args.repeats)]
            done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            runs[name].append(min(result["prefill_s"]))
            print(
                f"round {round_number + 1}, {name} ({result['engine']}): prefill of {args.tokens} tokens {runs[name][-1]:.2f} s",
                flush=True,
            )
    best = {name: min(seconds) for name, seconds in runs.items()}
    print(f"glue on one thread ÷ on torch's threads: {best['glue-one-thread'] / best['torch-threads']:.2f}")
    if args.save:
        values = {"pair": args.pair, "tokens": args.tokens, "prefill_s": runs, "best_s": best}
        values["one_thread_over_torch_threads"] = best["glue-one-thread"] / best["torch-threads"]
        print(f"wrote {write_results(args.save, values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
