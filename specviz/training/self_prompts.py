"""Prompts the target writes itself (Magpie: Xu et al. 2024, "Alignment Data Synthesis from Scratch").

An instruction-tuned model, fed only its chat template up to the start of a user turn, writes a user's request:
the requests it was tuned on, in their variety, with no dataset to download. Answering them (collect.py) gives
training answers far more varied than templates can (templates reached held-out α 0.43 and stopped there).

Kept: requests the model ended itself, on one line, of 3 to 80 words, not seen before, and sharing no four words
in a row with a held-out question (so α measured there stays α on unseen prompts).
"""

from __future__ import annotations

from pathlib import Path

import torch
from tqdm import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from specviz.training.chat_prompts import copies_a_held_out_phrase

SENTINEL = "\x00request\x00"


def user_turn_prefix(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The chat template's ids up to where a user's words begin (system prompt included, as the target answers)."""
    if not tokenizer.chat_template:
        raise ValueError("a target writes its own prompts only through a chat template; this tokenizer has none")
    text = tokenizer.apply_chat_template([{"role": "user", "content": SENTINEL}], tokenize=False)
    return tokenizer(text[: text.index(SENTINEL)], add_special_tokens=False).input_ids


def is_kept(request: str, seen: set[str]) -> bool:
    """A whole, one-line request of 3 to 80 words, new, and not copying a held-out question."""
    words = request.split()
    return (
        "\n" not in request
        and 3 <= len(words) <= 80
        and "<|" not in request
        and request.lower() not in seen
        and not copies_a_held_out_phrase(request)
    )


@torch.inference_mode()
def write_requests(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    end_ids: list[int],
    count: int,
    seed: int = 0,
    batch_size: int = 64,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    top_p: float = 0.98,
) -> list[str]:
    """`count` requests sampled from the model's own user turns (Magpie's temperature 1; top-p 0.98 drops the
    rarest tokens, which mostly derail a request), batch by batch, batch b seeded seed + b."""
    prefix = torch.tensor([user_turn_prefix(tokenizer)], device=model.device)
    batch = prefix.repeat(batch_size, 1)
    requests: list[str] = []
    seen: set[str] = set()
    with torch.random.fork_rng(), tqdm(total=count, desc="requests the target wrote", unit="request") as bar:
        for index in range(10 * count // batch_size + 10):  # bounded: a model that never ends a request stops here
            torch.manual_seed(seed + index)
            output = model.generate(
                batch,
                attention_mask=torch.ones_like(batch),
                do_sample=True,
                temperature=temperature,
                top_p=top_p,
                top_k=0,
                max_new_tokens=max_new_tokens,
                eos_token_id=end_ids,
                pad_token_id=end_ids[0],
            )
            for row in output[:, prefix.shape[1] :].tolist():
                ended = [position for position, token in enumerate(row) if token in end_ids]
                if not ended:
                    continue  # cut off at max_new_tokens: not a whole request
                request = tokenizer.decode(row[: ended[0]], skip_special_tokens=True).strip()
                if is_kept(request, seen) and len(requests) < count:
                    seen.add(request.lower())
                    requests.append(request)
                    bar.update(1)
            if len(requests) >= count:
                break
    return requests


def self_prompts(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, end_ids: list[int], count: int, work: Path, seed: int = 0
) -> list[str]:
    """The requests, written once to `work`/self_prompts-<count>-seed<seed>.txt (one per line) and read from there on a
    rerun with the same count and seed."""
    cache = work / f"self_prompts-{count}-seed{seed}.txt"
    if cache.is_file():
        return [line for line in cache.read_text().splitlines() if line.strip()]
    requests = write_requests(model, tokenizer, end_ids, count, seed, batch_size=min(64, count))
    if len(requests) < count:
        raise ValueError(f"the target ended only {len(requests)} of {count} requests it was asked to write")
    work.mkdir(parents=True, exist_ok=True)
    cache.write_text("\n".join(requests) + "\n")
    return requests
