"""Where one decode step's time goes on the fast path: operations, their time, bytes read against the machine's bandwidth.

    python benchmarks/profile_step.py [--pair smollm2-135m-distilled] [--model target|draft] [--context 200] [--steps 50]

Prints torch.profiler's table for `--steps` compiled decode steps of the pair's target or draft (one row after `--context`
tokens), the step's wall time, the bytes it must read (weights in their form, plus the KV cache it attends over), and
the bandwidth a plain 2-thread read of a large tensor reaches here: a step at the hardware's pace takes about
bytes ÷ bandwidth.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere
os.environ.setdefault("SPECVIZ_COMPILE", "1")  # compile whatever the model's size (engine/compiled.py): measure it

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from specviz.analysis.cache_fit import measure_read_bandwidth  # noqa: E402
from specviz.cli.options import compile_before_timing  # noqa: E402
from specviz.engine.compiled import decoder_for, fast_model  # noqa: E402
from specviz.models.loading import load_pair  # noqa: E402
from specviz.models.weight_forms import weight_bytes  # noqa: E402
from specviz.serving.pair_cache import catalogue  # noqa: E402


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="smollm2-135m-distilled")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--context", type=int, default=200)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rows", type=int, default=20, help="rows of the profiler's table")
    parser.add_argument("--model", choices=("target", "draft"), default="target", help="whose step to profile")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair(args.pair, catalogue().get(args.pair), catalogue().offline_pairs())
    compile_before_timing(pair)
    loaded = pair.target if args.model == "target" else pair.draft
    model = loaded.model
    decoder = decoder_for(model, pair.shared_vocab_size)
    decoder.feed(list(range(100, 100 + args.context)))

    def steps(count: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            decoder.feed([42])
            decoder.truncate(args.context)
        return (time.perf_counter() - started) / count

    steps(5)
    step_s = min(steps(args.steps) for _ in range(3))
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        steps(args.steps)
    print(profiled.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))

    fast = fast_model(model)
    head = model.get_output_embeddings()
    head_bytes = sum(t.numel() * t.element_size() for t in [*head.parameters(), *head.buffers()])
    embedding = model.get_input_embeddings().weight
    layer_bytes = weight_bytes(model) - head_bytes - embedding.numel() * embedding.element_size()
    cache_row = 2 * fast.forward.n_layers * fast.forward.n_kv_heads * fast.forward.head_dim * fast.dtype.itemsize
    cache_bytes = cache_row * (args.context + 1)
    total = layer_bytes + head_bytes + cache_bytes
    bandwidth = measure_read_bandwidth(repeats=5)
    print(
        f"one decode step after {args.context} tokens: {1000 * step_s:.2f} ms ({1 / step_s:.0f} tokens/s), "
        f"{'compiled' if fast.report.compiled else 'eager'}, {args.model}'s form {loaded.form}"
    )
    print(
        f"bytes a step must read: layers {layer_bytes / 1e6:.1f} MB + LM head {head_bytes / 1e6:.1f} MB + "
        f"KV cache {cache_bytes / 1e6:.1f} MB = {total / 1e6:.1f} MB"
    )
    print(
        f"read bandwidth here ({args.threads} threads, a 512 MiB sum): {bandwidth / 1e9:.1f} GB/s → "
        f"a step at that pace: {1000 * total / bandwidth:.2f} ms; this step reads at {total / step_s / 1e9:.1f} GB/s"
    )


if __name__ == "__main__":
    main()
