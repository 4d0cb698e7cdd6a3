"""A big target's answers, written by specviz's own engine: speculative, greedy, compiled, in the pair's weight form.

transformers' batched `generate` wrote 9.6 tokens/s for Qwen2.5-Coder-1.5B on 2 cores (bf16, 16 prompts a batch);
speculative decoding with the pair's own draft writes the same greedy answer as the target alone (exactness) at
the pair's speed, about 40 tokens/s there. The answers are those of the target as the pair runs it, which is the
target a head drafts for. Answers are saved every `save_every` prompts, so a stopped collection resumes.

    python -m specviz.training.engine_answers --pair qwen2.5-coder-0.5b-1.5b --prompts code --count 400 --out FILE.npz
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

from specviz.process.logs import configure as configure_logging

log = logging.getLogger(__name__)

os.environ.setdefault("SPECVIZ_COMPILE", "1")  # the compiled step, as the pair serves


def requests(name: str) -> list[str]:
    """The built-in coding or chat training prompts, or a file's non-empty lines."""
    if name == "code":
        from specviz.training.code_prompts import code_prompts

        return code_prompts()
    if name == "chat":
        from specviz.training.chat_prompts import training_prompts

        return training_prompts()
    return [line.strip() for line in Path(name).read_text().splitlines() if line.strip()]


def main() -> int:
    configure_logging()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", required=True)
    parser.add_argument("--prompts", default="code", help="code (training/code_prompts.py), chat or a file, one prompt a line")
    parser.add_argument("--count", type=int, default=400, help="answer the first N prompts")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--gamma", type=int, default=3)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--out", required=True, help="the answers (.npz, as `distill --answers` reads)")
    args = parser.parse_args()

    from specviz.engine import DecodeSettings
    from specviz.engine.compiled import warm_up_pair
    from specviz.engine.events import RunStarted
    from specviz.models.catalogue import load_catalogue
    from specviz.run.runner import run
    from specviz.training.distill.answers import load_answers, save_answers
    from specviz.training.distill.collect import Example

    prompts = requests(args.prompts)[: args.count]
    out = Path(args.out)
    examples = load_answers(out) if out.is_file() else []
    catalogue = load_catalogue()
    entry = catalogue.get(args.pair)
    from specviz.models.loading import load_pair

    pair = load_pair(args.pair, entry, catalogue.offline_pairs(), progress=log.info)
    warm_up_pair(pair)  # compiled (or read from Inductor's cache) before the first answer
    settings = DecodeSettings(max_new_tokens=args.max_new_tokens, gamma=args.gamma).validate()
    started, tokens = time.perf_counter(), 0
    for index in range(len(examples), len(prompts)):
        events = list(run(pair, prompts[index], settings, mode="speculative", drafter="model"))
        prompt_ids = next(event for event in events if isinstance(event, RunStarted)).prompt_token_ids
        answer = list(events[-1].new_token_ids)
        empty = __import__("torch").zeros(len(answer), 0)
        examples.append(Example(list(prompt_ids), answer, empty.int(), empty.half()))
        tokens += len(answer)
        if (index + 1) % args.save_every == 0 or index + 1 == len(prompts):
            save_answers(
                examples, out, {"pair": args.pair, "engine": "specviz speculative greedy", "max_new_tokens": args.max_new_tokens}
            )
            rate = tokens / (time.perf_counter() - started)
            log.info("%d/%d answers, %.1f tokens/s with prefill", index + 1, len(prompts), rate)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
