"""transformers' own fast path on the real pair's target: generate() with its static cache and torch.compile, beside
its dynamic cache, end to end (prefill included), on the first 4 held-out chat questions, 128 new tokens, greedy.

    python benchmarks/transformers_static_compile.py [--threads 2] [--count 4]

transformers compiles a static-cache forward only on CUDA unless its CompileConfig says otherwise
(`_compile_all_devices`), so this sets it. The first generate() compiles; it is timed apart. Compare the rates with
`llama_cpp_side_by_side.py`'s end-to-end rows.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere
os.environ.setdefault("SPECVIZ_COMPILE", "0")  # transformers' forward is measured here, not ours

import torch  # noqa: E402
from transformers import CompileConfig  # noqa: E402

from specviz.models.loading import load_pair  # noqa: E402
from specviz.prompts.sets import CHAT_HELDOUT  # noqa: E402
from specviz.run.runner import encode_prompt  # noqa: E402
from specviz.serving.pair_cache import catalogue  # noqa: E402

PAIR = "smollm2-135m-distilled"
NEW_TOKENS = 128


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--count", type=int, default=4, help="held-out chat questions")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair(PAIR, catalogue().get(PAIR), catalogue().offline_pairs())
    model = pair.target.model
    config = CompileConfig(fullgraph=False, dynamic=False)
    config._compile_all_devices = True  # transformers compiles on CUDA only, unless told
    model.generation_config.compile_config = config
    prompts = [torch.tensor([encode_prompt(pair, prompt, NEW_TOKENS, 1)]) for prompt in list(CHAT_HELDOUT)[: args.count]]

    def generate(ids: torch.Tensor, cache: str | None) -> int:
        output = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            pad_token_id=pair.tokenizer.eos_token_id,
            cache_implementation=cache,
        )
        return output.shape[1] - ids.shape[1]

    started = time.perf_counter()
    generate(prompts[0], "static")
    print(f"first static-cache generate() (compiles): {time.perf_counter() - started:.1f} s")
    for cache in ("static", None):
        started, tokens = time.perf_counter(), 0
        for ids in prompts:
            tokens += generate(ids, cache)
        name = "static cache, compiled" if cache else "dynamic cache, eager"
        print(f"transformers generate(), {name}: {tokens / (time.perf_counter() - started):.1f} tokens/s end to end")


if __name__ == "__main__":
    main()
