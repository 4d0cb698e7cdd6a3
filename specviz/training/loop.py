"""One training loop for both roles: language modelling (target, plain draft) or distillation (draft)."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm
from transformers import LlamaForCausalLM

from specviz.training.optimiser import OptimiserSettings, learning_rate_at

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class TrainSettings(OptimiserSettings):
    """Language-model training on random windows of a token stream."""

    steps: int
    batch_size: int = field()  # required here: field() keeps the base class's default from being inherited
    sequence_length: int
    learning_rate: float = field()
    weight_decay: float = 0.1
    eval_every: int = 100
    on_policy_share: float = 0.0  # share of each batch drawn from the on-policy rows, when train() is given some


@dataclass
class TrainResult:
    steps: int
    final_train_loss: float
    validation_loss: float
    seconds: float
    history: list[tuple[int, float, float]]  # (step, running train loss, validation loss) at each evaluation


def random_windows(tokens: torch.Tensor, settings: TrainSettings, generator: torch.Generator) -> torch.Tensor:
    """A batch of random windows of the token stream."""  # (batch, sequence_length)
    starts = torch.randint(0, len(tokens) - settings.sequence_length, (settings.batch_size,), generator=generator)
    return torch.stack([tokens[s : s + settings.sequence_length] for s in starts.tolist()])


def training_batch(
    tokens: torch.Tensor, settings: TrainSettings, generator: torch.Generator, on_policy: torch.Tensor | None
) -> torch.Tensor:
    """Random corpus windows, with on_policy_share of the rows replaced by random on-policy rows."""  # (batch, sequence_length)
    batch = random_windows(tokens, settings, generator)
    if on_policy is None or settings.on_policy_share <= 0:
        return batch
    n = round(settings.batch_size * settings.on_policy_share)
    picks = torch.randint(0, len(on_policy), (n,), generator=generator)
    return torch.cat([on_policy[picks, : settings.sequence_length], batch[n:]])


def distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """KL(teacher ‖ student) per token: the draft learns the target's whole distribution q → p."""
    teacher = F.log_softmax(teacher_logits.float(), dim=-1)
    student = F.log_softmax(student_logits.float(), dim=-1)
    return F.kl_div(student.flatten(0, 1), teacher.flatten(0, 1), log_target=True, reduction="batchmean")


@torch.no_grad()
def validation_loss(model: LlamaForCausalLM, tokens: torch.Tensor, sequence_length: int, max_windows: int = 48) -> float:
    """Mean next-token cross-entropy (nats) over consecutive windows of the held-out stream."""
    model.eval()
    n_windows = min(max_windows, len(tokens) // sequence_length)
    windows = tokens[: n_windows * sequence_length].view(n_windows, sequence_length)
    losses = []
    for batch in windows.split(8):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            losses.append(model(batch, labels=batch).loss.item())
    model.train()
    return sum(losses) / len(losses)


def train(
    model: LlamaForCausalLM,
    train_tokens: torch.Tensor,
    validation_tokens: torch.Tensor,
    settings: TrainSettings,
    checkpoint_folder: Path,
    teacher: LlamaForCausalLM | None = None,
    description: str = "train",
    on_policy: torch.Tensor | None = None,
) -> TrainResult:
    """Train with AdamW and bf16 autocast; distil from teacher's logits when one is given.

    on_policy: rows of the teacher's own text (`on_policy.greedy_continuations`), mixed into each batch.
    """
    generator = torch.Generator().manual_seed(settings.seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay, betas=(0.9, 0.95)
    )
    if teacher is not None:
        teacher.eval()
    model.train()
    started = time.perf_counter()
    running_loss, val_loss = float("nan"), float("nan")
    history: list[tuple[int, float, float]] = []
    progress = tqdm(range(settings.steps), desc=description, mininterval=5)
    for step in progress:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate_at(step, settings, settings.steps)
        batch = training_batch(train_tokens, settings, generator, on_policy)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            if teacher is None:
                loss = model(batch, labels=batch).loss
            else:
                with torch.no_grad():
                    teacher_logits = teacher(batch).logits
                loss = distillation_loss(model(batch).logits, teacher_logits)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        running_loss = loss.item() if math.isnan(running_loss) else 0.95 * running_loss + 0.05 * loss.item()
        if (step + 1) % settings.eval_every == 0 or step + 1 == settings.steps:
            val_loss = validation_loss(model, validation_tokens, settings.sequence_length)
            history.append((step + 1, round(running_loss, 4), round(val_loss, 4)))
            model.save_pretrained(checkpoint_folder)
            log.info("%s step %d: train %.3f val %.3f", description, step + 1, running_loss, val_loss)
        progress.set_postfix(loss=f"{running_loss:.3f}", val=f"{val_loss:.3f}")
    return TrainResult(settings.steps, running_loss, val_loss, time.perf_counter() - started, history)
