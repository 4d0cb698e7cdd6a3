"""Stage 1: the target answers the prompts (on-policy data) and we keep its top-k probabilities at every step.

Speculative decoding asks the draft to guess what the *target* writes next, in text the target wrote, so
the draft learns from the target's own continuations (sequence-level, on-policy distillation: Kim & Rush
2016, DistillSpec 2023). Keeping the k most likely tokens of p at each position (their probability mass is
almost all of p) lets the draft learn the whole distribution, not only the argmax, at a few bytes a token.
Shards are written batch by batch, so an interrupted collection resumes where it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import LogitsProcessor, LogitsProcessorList, PreTrainedModel, PreTrainedTokenizerBase

from specviz.models.loading import end_token_ids as configured_end_token_ids

TOP_K = 32


@dataclass(frozen=True)
class Example:
    """One prompt and the target's answer: token ids, and p's top-k at each answer position."""

    prompt_ids: list[int]
    answer_ids: list[int]  # ends with the end-of-turn token when the target ended its answer
    top_ids: torch.Tensor  # (len(answer_ids), k) int32
    top_probs: torch.Tensor  # (len(answer_ids), k) float16


class _TopKRecorder(LogitsProcessor):
    """Keeps p's top-k at each generation step (generate hands processors the raw logits)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.steps: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(scores.float(), dim=-1)  # (batch, vocab)
        top = torch.topk(probs, self.k, dim=-1)
        self.steps.append((top.indices.to(torch.int32), top.values.to(torch.float16)))
        return scores


def chat_prompt_ids(tokenizer: PreTrainedTokenizerBase, prompt: str, chat_template: bool) -> list[int]:
    """The prompt as the target expects it: wrapped as a user message when the target has a chat template."""
    if chat_template and tokenizer.chat_template:
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
        return tokenizer(text, add_special_tokens=False).input_ids
    return tokenizer(prompt).input_ids


def end_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Every token that ends an answer: the generation config's eos ids, and the tokenizer's."""
    ids = set(configured_end_token_ids(model))
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return sorted(ids)


@torch.inference_mode()
def answer_batch(
    model: PreTrainedModel, prompts: list[list[int]], max_new_tokens: int, end_ids: list[int], pad_id: int, k: int = TOP_K
) -> list[Example]:
    """Greedy answers to a batch of prompts (left-padded), with p's top-k at each answer token."""
    width = max(len(ids) for ids in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        attention_mask[row, width - len(ids) :] = 1
    recorder = _TopKRecorder(k)
    output = model.generate(
        input_ids=input_ids.to(model.device),
        attention_mask=attention_mask.to(model.device),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=end_ids,
        pad_token_id=pad_id,
        logits_processor=LogitsProcessorList([recorder]),
    )
    answers = output[:, width:].cpu()  # (batch, steps)
    top_ids = torch.stack([ids for ids, _ in recorder.steps], dim=1).cpu()  # (batch, steps, k)
    top_probs = torch.stack([probs for _, probs in recorder.steps], dim=1).cpu()
    examples = []
    for row, ids in enumerate(prompts):
        answer = answers[row].tolist()
        length = len(answer)
        for position, token in enumerate(answer):
            if token in end_ids:
                length = position + 1  # keep the end token: the draft must learn to predict it too
                break
        examples.append(Example(ids, answer[:length], top_ids[row, :length], top_probs[row, :length]))
    return examples


def collect(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    folder: Path,
    max_new_tokens: int = 128,
    batch_size: int = 16,
    chat_template: bool = True,
) -> list[Path]:
    """Answer every prompt, batch by batch, into folder/shard-NNNNN.pt; shards already there are kept."""
    folder.mkdir(parents=True, exist_ok=True)
    end_ids = end_token_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else end_ids[0]
    batches = [prompts[start : start + batch_size] for start in range(0, len(prompts), batch_size)]
    shards = []
    for index, batch in enumerate(tqdm(batches, desc="target answers", unit="batch")):
        shard = folder / f"shard-{index:05d}.pt"
        shards.append(shard)
        if shard.exists():
            continue
        prompt_ids = [chat_prompt_ids(tokenizer, prompt, chat_template) for prompt in batch]
        examples = answer_batch(model, prompt_ids, max_new_tokens, end_ids, pad_id)
        partial = shard.with_suffix(".partial")
        torch.save([example.__dict__ for example in examples], partial)
        partial.rename(shard)  # a shard is either whole or absent, so resuming never reads half a batch
    return shards


def load_examples(shards: list[Path]) -> list[Example]:
    """Every example in the given shards."""
    return [Example(**row) for shard in shards for row in torch.load(shard)]
