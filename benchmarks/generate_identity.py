"""Speculative greedy output against transformers' own generate(), prompt by prompt, with the logit gap where they part.

    python benchmarks/generate_identity.py [--pair smollm2-135m-distilled] [--weights fp32,int4] [--count 16]
                                           [--drafter model] [--gamma 4]

Greedy speculative decoding is exact: it emits the target's argmax at every position. It can still part from
generate() when two logits are so close that the last bits decide, and those bits depend on how many rows a
forward multiplies (a verify pass has γ + 1, generate() one; MKL's fp32 GEMM and oneDNN's bf16 block by rows).
For each held-out chat question this prints whether the two outputs are identical and, where they are not, the
first position they part at and the target's top-2 logit gap there, computed by one plain forward over the shared
prefix: a gap of 10⁻⁵–10⁻³ is a floating-point near-tie, not a wrong token. In a row-independent form (int8, int4
weight-only with eager attention, row by row on AVX2) a verify pass gives each token the logits a one-token step
gives it, so speculation equals specviz's own plain decoding by construction. generate() also prefills the prompt in
one batched pass (one row more than the engine's), so identity with it is measured here, not guaranteed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere
import torch  # noqa: E402

from benchmarks.results import write_results  # noqa: E402
from specviz.engine import DecodeSettings, Summary  # noqa: E402
from specviz.models.loading import load_pair  # noqa: E402
from specviz.prompts.sets import CHAT_HELDOUT  # noqa: E402
from specviz.run.runner import encode_prompt, run  # noqa: E402
from specviz.serving.pair_cache import catalogue  # noqa: E402


@torch.inference_mode()
def top_two_gap(model, ids: list[int]) -> float:
    """The target's top-1 minus top-2 logit after `ids`, one plain forward."""
    logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    top = torch.topk(logits, 2).values
    return (top[0] - top[1]).item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="smollm2-135m-distilled")
    parser.add_argument("--weights", default="fp32,int4", help="forms to compare in (fp32 loads plain float32 weights)")
    parser.add_argument("--count", type=int, default=16, help="held-out chat questions")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--drafter", help="a drafting strategy (default: the pair's)")
    parser.add_argument("--gamma", type=int, help="draft length (default: the pair's)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pair_entry = catalogue().get(args.pair)
    results = {}
    for form in args.weights.split(","):
        pair = load_pair(args.pair, pair_entry, catalogue().offline_pairs(), dtype="float32", weights=form)
        drafter = args.drafter or pair_entry.drafter
        settings = DecodeSettings(max_new_tokens=args.max_new_tokens, gamma=args.gamma or pair_entry.gamma)
        identical, partings = 0, []
        print(f"\n{form}: target {pair.target.form or 'fp32'}, drafter {drafter}, γ {settings.gamma}", flush=True)
        for prompt in CHAT_HELDOUT[: args.count]:
            summary = list(run(pair, prompt, settings, drafter=drafter))[-1]
            assert isinstance(summary, Summary)
            prompt_ids = encode_prompt(pair, prompt, settings.max_new_tokens, settings.gamma)
            ids = torch.tensor([prompt_ids])
            reference = pair.target.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=args.max_new_tokens,
                do_sample=False,
                eos_token_id=sorted(pair.vocabulary.end_token_ids),
            )[0, len(prompt_ids) :].tolist()
            ours = list(summary.new_token_ids)
            if ours == reference:
                identical += 1
                print(f"  identical  {prompt}", flush=True)
                continue
            part = next((i for i, (a, b) in enumerate(zip(ours, reference)) if a != b), min(len(ours), len(reference)))
            gap = top_two_gap(pair.target.model, prompt_ids + reference[:part])
            print(f"  parts at token {part:3d}, top-2 logit gap {gap:.2e}  {prompt}", flush=True)
            partings.append({"prompt": prompt, "token": part, "top_two_gap": gap})
        questions = min(args.count, len(CHAT_HELDOUT))
        print(f"{form}: identical to generate() on {identical} of {questions} questions", flush=True)
        results[form] = {"questions": questions, "identical": identical, "partings": partings}
    write_results("generate_identity", results)


if __name__ == "__main__":
    main()
