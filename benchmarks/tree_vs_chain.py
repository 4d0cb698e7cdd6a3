"""Chains against token trees at the same number of verified rows: tokens per target pass, and the time it took.

    python benchmarks/tree_vs_chain.py [--pair smollm2-135m-distilled] [--drafter feature|model|lookup] [--prompts chat-heldout]
                                       [--count 16] [--max-new-tokens 64] [--threads 1] [--engine fast|transformers]
                                       [--shapes 1 1x1x1 3 2x1:1 nodes=8,depth=4 ...]

Greedy, the pair in its default form (the real pair: int4 target, int8 feature head). For each shape, every prompt is
decoded by the engine (engine/speculative.py; a chain is the shape 1x…x1), and its output is checked against
plain decoding in the same form. Printed per shape: rows per verify pass (nodes + 1), tokens per target pass, the
draft forwards per cycle, ms per token, and the speedup over plain decoding timed prompt by prompt right before each
tree run (interleaved, so a machine whose load changes during the run still compares like with like; quote ratios).
Times are the engine's own clock (each run's Summary: prefill and every cycle or step, synchronised), which stops
while the display numbers are built, as in the app.
A shape is what TreeShape.parse reads (docs/trees.md): widths per depth, `:n` to let only the n most probable nodes
of a depth branch (EAGLE-2's top nodes), or nodes=N,depth=D[,width=K] for EAGLE-2's dynamic tree.
`--engine fast` (the default) runs target and draft model on the static-cache fast path, eager, as the engine does by
default; `transformers` on transformers' dynamic cache. Plain decoding runs on the same engine.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere
import torch  # noqa: E402

from benchmarks.results import write_results  # noqa: E402
from specviz.drafting.drafters import FeatureDrafter, ModelDrafter, PromptLookupDrafter  # noqa: E402
from specviz.engine import CachedDecoder, DecodeSettings, autoregressive_decode  # noqa: E402
from specviz.engine.compiled import decoder_for, enable  # noqa: E402
from specviz.engine.speculative import speculative_decode  # noqa: E402
from specviz.engine.tree_shape import TreeShape  # noqa: E402
from specviz.models.loading import load_pair  # noqa: E402
from specviz.prompts.sets import load_prompt_set  # noqa: E402
from specviz.run.runner import encode_prompt  # noqa: E402
from specviz.serving.pair_cache import catalogue  # noqa: E402

DEFAULT_SHAPES = ["1", "1x1x1", "3", "2x1:1", "1x1x1x1x1", "3x2:1", "2x2x1:1", "1x1x1x1x1x1x1x1", "4x2x1x1:1", "nodes=8,depth=4"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", default="smollm2-135m-distilled")
    parser.add_argument("--drafter", choices=("feature", "model", "lookup"), default="feature")
    parser.add_argument("--engine", choices=("fast", "transformers"), default="fast")
    parser.add_argument("--prompts", default="chat-heldout")
    parser.add_argument("--count", type=int, default=16, help="the first N prompts of the set")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="1 is steadier on a shared machine")
    parser.add_argument("--shapes", nargs="+", default=DEFAULT_SHAPES)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    entries = catalogue()
    pair = load_pair(args.pair, entries.get(args.pair), entries.offline_pairs())
    vocab = pair.shared_vocab_size
    if args.engine == "fast":
        for part in (pair.target, pair.draft):
            if part is not None:
                enable(part.model, compile_step=False)

    def decoder(model):
        return decoder_for(model, vocab) if args.engine == "fast" else CachedDecoder(model, vocab)

    def plain(ids: list[int]):
        return list(autoregressive_decode(decoder(pair.target.model), ids, settings, pair.vocabulary))[-1]

    prompts = [encode_prompt(pair, text, args.max_new_tokens, 16) for text in load_prompt_set(args.prompts)[: args.count]]
    settings = DecodeSettings(max_new_tokens=args.max_new_tokens)
    print(
        f"{args.pair}: target in {pair.target.form or pair.dtype}, {args.drafter} drafter, {len(prompts)} prompts "
        f"({args.prompts}), {args.max_new_tokens} new tokens, greedy, {args.threads} threads, engine: {args.engine} "
        f"({type(decoder(pair.target.model)).__name__})"
    )

    plain_outputs = [plain(ids).new_token_ids for ids in prompts]  # also warms both paths up
    plain_tokens = sum(len(output) for output in plain_outputs)
    print("verify and draft: seconds per cycle ÷ a plain step's, measured beside it (ν: the verify pass in target steps)")
    print(
        f"{'shape':>22}  {'rows':>5}  {'tokens / pass':>15}  {'draft fwd/cyc':>13}  {'ν':>5}  {'draft':>5}  "
        f"{'ms/token':>15}  {'plain ms/token':>15}  {'speedup':>7}  same as plain"
    )

    rows = []
    for text in args.shapes:
        shape = TreeShape.parse(text)
        tokens = passes = draft_forwards = 0
        wall_s, plain_s, step_s, verify_s, draft_s, same = 0.0, 0.0, 0.0, 0.0, 0.0, 0
        for ids, plain_output in zip(prompts, plain_outputs):
            baseline = plain(ids)
            plain_s, step_s = plain_s + baseline.wall_s, step_s + baseline.step_s / len(prompts)
            if args.drafter == "feature":
                drafter = FeatureDrafter(pair.feature_head.head, vocab, compiled=False)
            elif args.drafter == "model":
                drafter = ModelDrafter(decoder(pair.draft.model))
            else:
                drafter = PromptLookupDrafter()
            tree_settings = replace(settings, tree=shape)
            events = list(speculative_decode(decoder(pair.target.model), drafter, ids, tree_settings, pair.vocabulary))
            summary = events[-1]
            wall_s += summary.wall_s
            tokens += len(summary.new_token_ids)
            passes += summary.tally.cycles
            draft_forwards += sum(cycle.n_draft_forwards for cycle in events[1:-1])
            verify_s += sum(cycle.verify_s for cycle in events[1:-1])
            draft_s += sum(cycle.draft_s for cycle in events[1:-1])
            same += summary.new_token_ids == plain_output
        label = f"{'chain' if shape.branching == (1,) * len(shape.branching) else 'tree'} {shape.text}"
        ms, plain_ms = 1000 * wall_s / tokens, 1000 * plain_s / plain_tokens
        print(
            f"{label:>22}  {shape.n_nodes + 1:>5}  {tokens / passes:>15.3f}  {draft_forwards / passes:>13.2f}  "
            f"{verify_s / passes / step_s:>5.2f}  {draft_s / passes / step_s:>5.2f}  {ms:>7.2f} ms/token  {plain_ms:>7.2f} ms/token  {plain_ms / ms:>6.2f}x  {same}/{len(prompts)}"
        )
        rows.append(
            {
                "shape": shape.text,
                "rows": shape.n_nodes + 1,
                "tokens_per_pass": tokens / passes,
                "draft_forwards_per_cycle": draft_forwards / passes,
                "verify_cost": verify_s / passes / step_s,
                "draft_cost": draft_s / passes / step_s,
                "ms_per_token": ms,
                "plain_ms_per_token": plain_ms,
                "speedup": plain_ms / ms,
                "same_as_plain": same,
                "prompts": len(prompts),
            }
        )
    write_results("tree_vs_chain", {"settings": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
