"""How often, and where, greedy speculative and plain decoding part in a pair's own dtype (and not in float32).

    python benchmarks/bf16_parting.py --pair smollm2-135m-distilled --prompts chat-heldout --max-new-tokens 96

For each prompt: both greedy decodings in each dtype; prints whether they are identical, and where they part,
the target's top two tokens there and their logit gap (a near-tie); also the run's α and its speedup
(tokens/s of the speculative run over the plain one, end to end).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere
import argparse
import json
import math

import torch

from benchmarks.results import write_results  # noqa: E402
from specviz.engine import DecodeSettings
from specviz.engine.events import Cycle
from specviz.models.catalogue import load_catalogue
from specviz.models.loading import load_pair
from specviz.prompts.sets import load_prompt_set
from specviz.run.runner import run


def parting(pair, prompt: str, max_new_tokens: int, gamma: int) -> dict:
    """Both greedy decodings of one prompt; where they part and the target's margin there."""
    settings = DecodeSettings(max_new_tokens=max_new_tokens, gamma=gamma)
    speculative = list(run(pair, prompt, settings))
    plain = list(run(pair, prompt, settings, mode="autoregressive"))
    a, b = speculative[-1].new_token_ids, plain[-1].new_token_ids
    where = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if where is None and len(a) != len(b):
        where = min(len(a), len(b))
    spec_summary, plain_summary = speculative[-1], plain[-1]
    result = {
        "prompt": prompt,
        "identical": where is None,
        "tokens": len(a),
        "alpha": round(spec_summary.tally.alpha, 3) if spec_summary.tally.alpha is not None else None,
        "speedup": round(plain_summary.wall_s / spec_summary.wall_s * len(a) / max(1, len(b)), 3),
    }
    if where is not None:
        result["parts_at_token"] = where + 1
        emitted = 0
        for event in speculative:
            if isinstance(event, Cycle):
                if where < emitted + len(event.emitted_token_ids):
                    j = where - emitted
                    ranked = event.positions[j].top_p if j < len(event.positions) else event.bonus_top_p
                    if len(ranked) >= 2 and ranked[1][2] > 0:
                        result["top_two"] = [ranked[0][1], ranked[1][1]]
                        result["logit_gap"] = round(math.log(ranked[0][2] / ranked[1][2]), 4)
                    break
                emitted += len(event.emitted_token_ids)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="smollm2-135m-distilled")
    parser.add_argument("--prompts", default="chat-heldout")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    catalogue = load_catalogue()
    prompts = load_prompt_set(args.prompts)
    summary = {}
    for dtype in args.dtypes.split(","):
        pair = load_pair(args.pair, catalogue.get(args.pair), catalogue.offline_pairs(), dtype=dtype)
        rows = [parting(pair, prompt, args.max_new_tokens, args.gamma) for prompt in prompts]
        for row in rows:
            print(json.dumps({"dtype": dtype, **row}, ensure_ascii=False))
        summary[dtype] = {"prompts": len(rows), "identical": sum(row["identical"] for row in rows), "rows": rows}
    print(json.dumps({"summary": {dtype: {k: v for k, v in s.items() if k != "rows"} for dtype, s in summary.items()}}))
    write_results("bf16_parting", summary)


if __name__ == "__main__":
    main()
