"""The target's answers as token ids, compactly: what retraining a draft needs, committed so any machine has it.

Collecting the answers is the slow part of distillation (the target writes ~235k tokens). One `.npz` keeps
every prompt's and answer's ids as uint16 (uint32 where the vocabulary has more than 65,536 ids) with their offsets: about 1 MB
instead of hundreds of MB of shards. Features (for a feature head) and the target's probabilities are
recomputed from these ids by one teacher-forced pass, which is minutes, not the collection's hour.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from specviz.training.distill.collect import Example


def save_answers(examples: list[Example], path: Path, meta: dict) -> None:
    """Prompt and answer ids of every example, with `meta` (target, dtype, settings) beside them."""
    ids = [token for example in examples for token in (*example.prompt_ids, *example.answer_ids)]
    wide = bool(ids) and max(ids) >= 2**16  # a vocabulary past 65,536 ids (Qwen's 151,936) takes 32 bits a token
    prompt_lengths = np.array([len(example.prompt_ids) for example in examples], dtype=np.int32)
    answer_lengths = np.array([len(example.answer_ids) for example in examples], dtype=np.int32)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        np.savez_compressed(
            handle,
            ids=np.array(ids, dtype=np.uint32 if wide else np.uint16),
            prompt_lengths=prompt_lengths,
            answer_lengths=answer_lengths,
            meta=np.array(repr(sorted(meta.items()))),
        )


def load_answers(path: Path) -> list[Example]:
    """The examples back, without p's top-k (empty tensors): a feature head needs only the ids."""
    data = np.load(path)
    ids = data["ids"].astype(np.int64)
    examples, start = [], 0
    for prompt_length, answer_length in zip(data["prompt_lengths"].tolist(), data["answer_lengths"].tolist()):
        prompt = ids[start : start + prompt_length].tolist()
        answer = ids[start + prompt_length : start + prompt_length + answer_length].tolist()
        start += prompt_length + answer_length
        empty = torch.zeros(len(answer), 0)
        examples.append(Example(prompt, answer, empty.to(torch.int32), empty.to(torch.float16)))
    return examples
