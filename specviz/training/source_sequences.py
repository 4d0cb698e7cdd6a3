"""Standard-library source, cut into token windows in the target's tokenizer, as answers a feature head can learn from.

Answering prompts with a 1.5B target is the slow part of collecting a head's data (about 25 tokens/s on 2 cores);
reading text through it is not (one teacher-forced pass, ~140 tokens/s in bf16). Code the target did not write still
teaches a head how the target's features move from token to token, and the fit's KL term scores it against the
target's own distribution at every position. The windows come from the training split only (specviz.prompts.stdlib).

    python -m specviz.training.source_sequences --tokenizer FOLDER --windows 400 --out FILE.npz
"""

from __future__ import annotations

import argparse
import logging
import random
from pathlib import Path

from specviz.process.logs import configure as configure_logging
from specviz.prompts.stdlib import read_sources, split_stdlib

log = logging.getLogger(__name__)

CONTEXT_TOKENS = 16  # each window's first tokens stand as its prompt: read, not scored


def source_windows(tokenizer, windows: int, length: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids) windows of `length` tokens from shuffled training-split files, at most two a file."""
    paths = list(split_stdlib().train)
    random.Random(seed).shuffle(paths)
    chosen: list[tuple[list[int], list[int]]] = []
    for text in read_sources(paths):
        ids = tokenizer(text, add_special_tokens=False).input_ids
        for start in range(0, max(0, len(ids) - length) + 1, length)[:2]:
            window = ids[start : start + length]
            if len(window) == length:
                chosen.append((window[:CONTEXT_TOKENS], window[CONTEXT_TOKENS:]))
        if len(chosen) >= windows:
            break
    return chosen[:windows]


def main() -> int:
    configure_logging()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True, help="the target's folder or hub id")
    parser.add_argument("--windows", type=int, default=400)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import torch
    from transformers import AutoTokenizer

    from specviz.training.distill.answers import save_answers
    from specviz.training.distill.collect import Example

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    windows = source_windows(tokenizer, args.windows, args.length)
    empty = torch.zeros(0, 0)
    examples = [Example(prompt, answer, empty.int(), empty.half()) for prompt, answer in windows]
    save_answers(examples, Path(args.out), {"source": "standard library, training split", "length": args.length})
    log.info("%d windows of %d tokens written to %s", len(examples), args.length, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
