"""Two requests at once on one loaded pair, a token tree and a chain, each in its own thread: both must stay exact.

    python benchmarks/concurrent_requests.py [--pair smollm2-135m-distilled] [--rounds 20] [--tree nodes=16,depth=5]
        [--gamma 1] [--max-new-tokens 48] [--threads 2]

Greedy: every output must equal the target's own plain decoding of its prompt (computed first, alone). Prints one
line per thread (rounds, errors, outputs that parted) and which engine ran (compiled or eager). The check of issue 34
("two concurrent requests on one pair, tree + chain, 20 rounds: 0 errors, both identical to the target alone") on the
real pair; tests/test_compiled_exact.py makes the same check on a small model in the quick suite.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import torch  # noqa: E402

from specviz.cli.options import compile_before_timing  # noqa: E402
from specviz.drafting.registry import make_drafter  # noqa: E402
from specviz.engine import DecodeSettings, autoregressive_decode, speculative_decode  # noqa: E402
from specviz.engine.compiled import decoder_for, fast_models  # noqa: E402
from specviz.engine.tree_shape import TreeShape  # noqa: E402
from specviz.models.loading import load_pair  # noqa: E402
from specviz.prompts.sets import CHAT_HELDOUT  # noqa: E402
from specviz.run.runner import encode_prompt  # noqa: E402
from specviz.serving.pair_cache import catalogue  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="smollm2-135m-distilled")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--tree", default="nodes=16,depth=5")
    parser.add_argument("--gamma", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    entry = catalogue().get(args.pair)
    pair = load_pair(args.pair, entry, catalogue().offline_pairs())
    compile_before_timing(pair)
    engines = {role: "compiled" if fast.report.compiled else "eager" for role, fast in fast_models(pair).items()}
    print(f"engines: {engines} (SPECVIZ_COMPILE={os.environ.get('SPECVIZ_COMPILE', 'unset')})")
    settings = DecodeSettings(max_new_tokens=args.max_new_tokens, gamma=args.gamma)
    prompts = [encode_prompt(pair, question, args.max_new_tokens, 8) for question in CHAT_HELDOUT[:2]]
    vocab = pair.shared_vocab_size

    def plain(ids: list[int]) -> list[int]:
        events = autoregressive_decode(decoder_for(pair.target.model, vocab), ids, settings, pair.vocabulary)
        return list(list(events)[-1].new_token_ids)

    def speculative(ids: list[int], tree: bool) -> list[int]:
        target = decoder_for(pair.target.model, vocab)
        chosen = replace(settings, tree=TreeShape.parse(args.tree)) if tree else settings
        events = speculative_decode(target, make_drafter(pair, entry.drafter, tree), ids, chosen, pair.vocabulary)
        return list(list(events)[-1].new_token_ids)

    expected = [plain(ids) for ids in prompts]
    results: dict[str, dict[str, object]] = {}

    def requests(name: str, tree: bool) -> None:
        errors, parted = [], []
        for round_ in range(args.rounds):
            which = round_ % len(prompts)
            try:
                if speculative(prompts[which], tree) != expected[which]:
                    parted.append(round_)
            except Exception as error:  # noqa: BLE001 (counted and reported)
                errors.append(f"{type(error).__name__}: {error}")
        results[name] = {"errors": errors, "parted": parted}

    threads = [
        threading.Thread(target=requests, args=(f"tree {args.tree}", True)),
        threading.Thread(target=requests, args=(f"chain γ {args.gamma}", False)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name, result in results.items():
        print(
            f"{name}: {args.rounds} rounds, {len(result['errors'])} errors, {len(result['parted'])} parted from the "
            f"target alone{(': ' + result['errors'][0]) if result['errors'] else ''}"
        )


if __name__ == "__main__":
    main()
