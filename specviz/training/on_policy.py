"""The target's own greedy text, for distilling the draft where it will actually be asked to guess.

Speculative decoding asks the draft to predict what the *target* writes next, given text the target wrote.
Distilling only on the corpus teaches the draft the target's distribution on human code; adding the
target's greedy continuations of corpus windows (sequence-level, on-policy distillation: Kim & Rush 2016,
DistillSpec 2023) puts the draft's training positions where its guesses are verified.
"""

from __future__ import annotations

import torch
from tqdm import tqdm
from transformers import LlamaForCausalLM, LogitsProcessor, LogitsProcessorList


@torch.no_grad()
def continue_greedily(
    model: LlamaForCausalLM,
    prefixes: torch.Tensor,
    new_tokens: int,
    ban: LogitsProcessor | None = None,
    stop_at_end_of_text: bool = False,
) -> torch.Tensor:
    """Greedy tokens after each prefix (the whole rows): the one greedy-generation helper of training.

    By default exactly new_tokens, in bf16 autocast, optionally under a logits processor, with no end-of-text
    stop: past one, the model writes the next file, as in its training stream. With stop_at_end_of_text (the
    evaluation), up to new_tokens in float32, as the app runs the pair, ending where the model ends the file.
    """  # (batch, prefix + new_tokens)
    model.eval()
    attention_mask = torch.ones_like(prefixes)
    if stop_at_end_of_text:
        return model.generate(prefixes, attention_mask=attention_mask, max_new_tokens=new_tokens, do_sample=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return model.generate(
            prefixes,
            attention_mask=attention_mask,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            logits_processor=LogitsProcessorList([ban] if ban else []),
        )


@torch.no_grad()
def greedy_continuations(
    target: LlamaForCausalLM,
    tokens: torch.Tensor,
    count: int,
    prefix_length: int,
    sequence_length: int,
    batch_size: int = 32,
    seed: int = 0,
) -> torch.Tensor:
    """count rows of sequence_length tokens: a random corpus window of prefix_length, then the target's greedy text."""  # (count, sequence_length)
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for start in tqdm(range(0, count, batch_size), desc="target continuations", mininterval=5):
        n = min(batch_size, count - start)
        starts = torch.randint(0, len(tokens) - prefix_length, (n,), generator=generator).tolist()
        prefixes = torch.stack([tokens[s : s + prefix_length] for s in starts])
        rows.append(continue_greedily(target, prefixes, sequence_length - prefix_length))
    return torch.cat(rows)
