"""Whether the real target's logits for a token are the same alone and inside a verify pass, under every CPU kernel set
this machine offers, with transformers' eager attention and with the row-exact attention the weight forms now use.

    python benchmarks/row_independence.py [--pair smollm2-135m-distilled] [--forms int4,int8] [--threads 2]

Issue 43: on an Intel Xeon with AMX, SmolLM2 in int4 through transformers' forward gave a token other logits inside a
5-row verify pass than alone (|Δ logit| 0.312), because eager attention's bf16 products go to oneDNN, whose kernel
depends on the rows' count. This machine has no AMX, but oneDNN's AVX512_CORE kernels (an AVX-512 CPU without bf16
instructions) depend on the rows' count too, so the fault and its fix can be shown here. For each kernel set
(specviz/analysis/kernels.py, forced in a child process before torch loads) and each form, the target runs through
transformers' forward (CachedDecoder's DynamicCache): after a prefix of 40, 200 and 400 tokens, 5 tokens in one pass
against the same 5 fed one at a time. It prints and saves the largest |Δ logit| for each attention (0: bit-identical),
and, in the last child, a one-token step and a 5-row pass with each attention (median of --repeats; their ratio is
the pass's cost in steps, ν(5)); those timings mean something only on a quiet machine (the file records the load).
Writes benchmarks/results/row_independence.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

PREFIXES = (40, 200, 400)
TOKENS = [28, 1175, 314, 3276, 30]  # any five tokens: what matters is that they share one forward


def child(pair_name: str, forms: list[str], threads: int, repeats: int) -> dict:
    """In this (forced) process: |Δ logit| per form and attention, and the step and pass times."""
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    from specviz.models.catalogue import load_catalogue
    from specviz.models.loading import target_reference
    from specviz.models.weight_forms import apply_form

    torch.set_num_threads(threads)
    folder = target_reference(load_catalogue().get(pair_name))
    found = {"capability": torch.backends.cpu.get_cpu_capability(), "forms": {}}
    for form in forms:
        model = apply_form(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval(), form)
        row_exact = model.config._attn_implementation
        by_attention = {}
        for attention in ("eager", row_exact):
            model.set_attn_implementation(attention)
            largest = {}
            for length in PREFIXES:
                prefix = [(17 * i + 5) % model.config.vocab_size for i in range(length)]
                with torch.inference_mode():
                    cache = DynamicCache(config=model.config)
                    model(input_ids=torch.tensor([prefix]), cache=cache, use_cache=True)
                    together = model(input_ids=torch.tensor([TOKENS]), cache=cache, use_cache=True, logits_to_keep=5).logits[0]
                    cache.crop(-len(TOKENS))
                    alone = [model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True).logits[0, -1] for t in TOKENS]
                largest[str(length)] = (torch.stack(alone).float() - together.float()).abs().max().item()
            by_attention["eager" if attention == "eager" else "row_exact"] = largest
        found["forms"][form] = {"largest_logit_difference": by_attention, "seconds": timings(model, row_exact, repeats)}
    return found


def timings(model, row_exact: str, repeats: int) -> dict:
    """A one-token step and a 5-row pass after a 200-token prefix, each attention, interleaved; median seconds."""
    import torch
    from transformers import DynamicCache

    prefix = [(17 * i + 5) % model.config.vocab_size for i in range(200)]
    times = {f"{attention} {what}": [] for attention in ("eager", "row_exact") for what in ("step", "pass")}
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(input_ids=torch.tensor([prefix]), cache=cache, use_cache=True)
        for _ in range(repeats):
            for attention, name in (("eager", "eager"), (row_exact, "row_exact")):
                model.set_attn_implementation(attention)
                for what, tokens in (("step", TOKENS[:1]), ("pass", TOKENS)):
                    started = time.perf_counter()
                    model(input_ids=torch.tensor([tokens]), cache=cache, use_cache=True)
                    times[f"{name} {what}"].append(time.perf_counter() - started)
                    cache.crop(-len(tokens))
    return {key: statistics.median(values) for key, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="smollm2-135m-distilled")
    parser.add_argument("--forms", default="int4,int8")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # where a child writes its results
    args = parser.parse_args()
    forms = args.forms.split(",")
    if args.child:
        Path(args.child).write_text(json.dumps(child(args.pair, forms, args.threads, args.repeats)))
        return

    from benchmarks.results import write_results
    from specviz.analysis.kernels import offered_kernel_sets

    kernel_sets = {}
    for name, forced in offered_kernel_sets().items():
        out = Path(f"/tmp/row_independence_{os.getpid()}_{name}.json")
        env = {**os.environ, **forced}
        command = [sys.executable, __file__, "--pair", args.pair, "--forms", args.forms, "--threads", str(args.threads)]
        subprocess.run([*command, "--repeats", str(args.repeats), "--child", str(out)], env=env, check=True)
        kernel_sets[name] = {"forced": forced, **json.loads(out.read_text())}
        out.unlink()
        for form, found in kernel_sets[name]["forms"].items():
            differences = found["largest_logit_difference"]
            print(f"{name:12} {form}: eager {differences['eager']}, row-exact {differences['row_exact']}")
    write_results("row_independence", {"pair": args.pair, "prefixes": list(PREFIXES), "kernel_sets": kernel_sets})


if __name__ == "__main__":
    main()
