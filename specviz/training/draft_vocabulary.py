"""The tokens an independent draft keeps in its head: the most frequent in a code corpus, plus every special token.

A 0.5B draft over Qwen's 151,936-token vocabulary spends a quarter of its parameters in its LM head. Cut to the
tokens code is written in, the head costs a fraction of that, and exactness is untouched (models/reduced_head.py:
q is 0 outside the kept ids, so such tokens are never drafted, and the target still judges every token). The kept ids
(a whole number of the int4 kernel's blocks of 64, so the head runs in int4 like the rest of the draft) are counted over the training split of the standard library's Python sources (the bundled pair's corpus: its
held-out files stay unseen), which carry English in their docstrings and comments too.

    python -m specviz.training.draft_vocabulary --pair qwen2.5-coder-0.5b-1.5b --size 32768 \
        --out assets/qwen2.5-coder-draft-vocabulary.json
"""

from __future__ import annotations

import argparse
import json
import logging
from collections import Counter
from pathlib import Path

from specviz.process.logs import configure as configure_logging
from specviz.prompts.stdlib import read_sources, split_stdlib

log = logging.getLogger(__name__)

ROWS_MULTIPLE = 64  # whole blocks for every weight form's kernel (int4 fuses in 64s, w4a8 packs in 32s)


def kept_ids(tokenizer, texts: list[str], size: int) -> list[int]:
    """Up to `size` ids written most often in `texts`, and every added (special) token, padded with the lowest ids
    left out (BPE's earliest merges: frequent ones) to a whole number of the int4 kernel's blocks; sorted."""
    counts: Counter[int] = Counter()
    for text in texts:
        counts.update(tokenizer(text)["input_ids"])
    special = set(tokenizer.added_tokens_decoder)  # <|im_start|>, <|im_end|>, <|endoftext|>, …: a chat turn ends on one
    kept = special | {token for token, _ in counts.most_common(size - len(special))}
    padding = (token for token in range(len(tokenizer)) if token not in kept)
    while len(kept) % ROWS_MULTIPLE:
        kept.add(next(padding))
    return sorted(kept)


def coverage(tokenizer, texts: list[str], kept: list[int]) -> float:
    """The share of tokens in `texts` that the kept ids cover."""
    wanted = set(kept)
    ids = [token for text in texts for token in tokenizer(text)["input_ids"]]
    return sum(token in wanted for token in ids) / max(1, len(ids))


def main() -> None:
    configure_logging()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen2.5-coder-0.5b-1.5b")
    parser.add_argument("--size", type=int, default=32768)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from specviz.models.catalogue import load_catalogue
    from specviz.models.loading import draft_reference, load_tokenizer

    pair = load_catalogue().get(args.pair)
    reference = draft_reference(pair, log.info)
    tokenizer = load_tokenizer(reference)
    corpus = split_stdlib()
    kept = kept_ids(tokenizer, read_sources(corpus.train), args.size)
    held_out = coverage(tokenizer, read_sources(corpus.validation), kept)
    args.out.write_text(
        json.dumps({"vocab_size": len(tokenizer), "kept_token_ids": kept, "held_out_coverage": round(held_out, 4)})
    )
    log.info("%s ids kept; they cover %.1f%% of the held-out standard-library tokens", f"{len(kept):,}", 100 * held_out)


if __name__ == "__main__":
    main()
