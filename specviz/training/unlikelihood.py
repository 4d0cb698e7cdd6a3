"""Sequence-level unlikelihood fine-tuning (Welleck et al. 2019, "Neural Text Generation with Unlikelihood Training").

A small language model decoded greedily falls into loops (`self.crc = self.crc` over and over) even as its
validation loss falls. This stage lets the target continue windows of the corpus greedily, finds the tokens
of each continuation that complete an n-gram it already wrote, and lowers their probability with
-log(1 - p), while next-token cross-entropy on real text keeps it a language model.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from tqdm import tqdm
from transformers import LlamaForCausalLM

from specviz.training.loop import TrainResult, validation_loss


@dataclass(frozen=True)
class UnlikelihoodSettings:
    steps: int
    learning_rate: float = 3e-4
    batch_size: int = 8
    prefix_length: int = 48  # corpus tokens the model continues
    continuation_length: int = 64  # greedy tokens it writes, where repeats are penalised
    lm_sequence_length: int = 256  # real-text windows for the cross-entropy term
    ngram: int = 8
    seed: int = 0


def repeated_ngram_mask(sequences: torch.Tensor, prefix_length: int, n: int) -> torch.Tensor:
    """True at each continuation token that completes an n-gram the continuation already wrote.

    Only n-grams wholly inside the continuation count: copying a name or a line from the prompt is what
    a code model should do, and penalising it (as an earlier version did) cost validation loss for
    nothing. Real code repeats few 8-grams within 64 tokens, a loop repeats them all.
    """  # (batch, length)
    mask = torch.zeros_like(sequences, dtype=torch.bool)
    for row, ids in enumerate(sequences.tolist()):
        seen: set[tuple[int, ...]] = set()
        for end in range(prefix_length + n - 1, len(ids)):
            gram = tuple(ids[end - n + 1 : end + 1])
            if gram in seen:
                mask[row, end] = True
            seen.add(gram)
    return mask


def unlikelihood_loss(logits: torch.Tensor, sequences: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of -log(1 - p(token)) over the masked tokens, p from the logits one position earlier."""
    probs = logits[:, :-1].float().softmax(-1).gather(-1, sequences[:, 1:, None]).squeeze(-1)  # (batch, length-1)
    targets = mask[:, 1:]
    penalties = -torch.log1p(-probs.clamp(max=1 - 1e-5)) * targets
    return penalties.sum() / targets.sum().clamp(min=1)


def finetune(
    model: LlamaForCausalLM,
    train_tokens: torch.Tensor,
    validation_tokens: torch.Tensor,
    settings: UnlikelihoodSettings,
    description: str = "unlikelihood",
) -> tuple[TrainResult, float]:
    """Fine-tune in place; returns the result and the mean share of continuation tokens that repeated."""
    generator = torch.Generator().manual_seed(settings.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=0.0, betas=(0.9, 0.95))
    started = time.perf_counter()
    running_ce = running_ul = float("nan")
    repeat_shares: list[float] = []
    span = settings.prefix_length + settings.lm_sequence_length
    for _ in tqdm(range(settings.steps), desc=description, mininterval=5):
        starts = torch.randint(0, len(train_tokens) - span, (settings.batch_size,), generator=generator).tolist()
        prefixes = torch.stack([train_tokens[s : s + settings.prefix_length] for s in starts])
        real_text = torch.stack([train_tokens[s : s + settings.lm_sequence_length] for s in starts])
        # 1. the model continues the prefixes greedily
        model.eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            sequences = model.generate(
                prefixes,
                attention_mask=torch.ones_like(prefixes),
                max_new_tokens=settings.continuation_length,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
        mask = repeated_ngram_mask(sequences, settings.prefix_length, settings.ngram)
        repeat_shares.append(mask[:, settings.prefix_length :].float().mean().item())
        # 2. penalise its repeats, keep cross-entropy on real text
        model.train()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ul = unlikelihood_loss(model(sequences).logits, sequences, mask)
            ce = model(real_text, labels=real_text).loss
        (ce + ul).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        running_ce = ce.item() if math.isnan(running_ce) else 0.9 * running_ce + 0.1 * ce.item()
        running_ul = ul.item() if math.isnan(running_ul) else 0.9 * running_ul + 0.1 * ul.item()
    val_loss = validation_loss(model, validation_tokens, settings.lm_sequence_length)
    print(f"{description}: cross-entropy {running_ce:.3f} unlikelihood {running_ul:.3f} val {val_loss:.3f}", flush=True)
    history = [(settings.steps, round(running_ce, 4), round(val_loss, 4))]
    result = TrainResult(settings.steps, running_ce, val_loss, time.perf_counter() - started, history)
    return result, sum(repeat_shares[-10:]) / max(1, len(repeat_shares[-10:]))
