"""Stage 3: fit the draft to the target's probabilities on the target's own answers.

Loss at each answer position: cross-entropy of q against p's top-k (renormalised over the draft's kept
vocabulary), which is the forward KL up to a constant, plus cross-entropy on the token the target actually
wrote (under greedy decoding that token is what the draft must guess). Validation reports the fraction of
positions where the draft's argmax is the target's token: under greedy decoding, that is α.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import LlamaForCausalLM

from specviz.training.distill.collect import Example
from specviz.training.optimiser import OptimiserSettings, TrainingLog, learning_rate_at


@dataclass(frozen=True)
class FitSettings(OptimiserSettings):
    """A small draft's fit: AdamW over `steps` batches, validated every `validate_every`."""

    steps: int = 1200
    greedy_weight: float = 0.5  # weight of the cross-entropy on the target's own token
    validate_every: int = 100


@dataclass
class FitLog(TrainingLog):
    """What the model card reports: losses and greedy agreement over the steps, and the time spent."""

    validation_loss: list[float] = field(default_factory=list)
    validation_agreement: list[float] = field(default_factory=list)


class KeptHead:
    """The draft's head over the kept ids: maps full-vocabulary ids to head rows and back."""

    def __init__(self, kept_ids: list[int], vocab_size: int) -> None:
        self.kept_ids = torch.tensor(kept_ids, dtype=torch.long)
        self.row_of = torch.full((vocab_size,), -1, dtype=torch.long)
        self.row_of[self.kept_ids] = torch.arange(len(kept_ids))

    def logits(self, draft: LlamaForCausalLM, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the kept ids only."""  # (n, hidden) → (n, kept)
        return hidden @ draft.get_input_embeddings().weight[self.kept_ids].T


@dataclass
class _Batch:
    input_ids: torch.Tensor  # (batch, length)
    attention_mask: torch.Tensor  # (batch, length)
    rows: torch.Tensor  # (n,) which sequence each answer position is in
    positions: torch.Tensor  # (n,) the input position whose output predicts that answer token
    teacher_rows: torch.Tensor  # (n, k) head rows of p's top-k, -1 where not kept
    teacher_probs: torch.Tensor  # (n, k)
    answer_rows: torch.Tensor  # (n,) head row of the token the target wrote, -1 where not kept


def _batch(examples: list[Example], head: KeptHead, pad_id: int) -> _Batch:
    sequences = [example.prompt_ids + example.answer_ids for example in examples]
    width = max(len(sequence) for sequence in sequences)
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    rows, positions, teacher_ids, teacher_probs, answers = [], [], [], [], []
    for row, (example, sequence) in enumerate(zip(examples, sequences)):
        input_ids[row, : len(sequence)] = torch.tensor(sequence)
        attention_mask[row, : len(sequence)] = 1
        n = len(example.answer_ids)
        rows.append(torch.full((n,), row))
        positions.append(torch.arange(len(example.prompt_ids) - 1, len(example.prompt_ids) - 1 + n))
        teacher_ids.append(example.top_ids.long())
        teacher_probs.append(example.top_probs.float())
        answers.append(torch.tensor(example.answer_ids))
    teacher_ids = torch.cat(teacher_ids)
    return _Batch(
        input_ids,
        attention_mask,
        torch.cat(rows),
        torch.cat(positions),
        head.row_of[teacher_ids],
        torch.cat(teacher_probs),
        head.row_of[torch.cat(answers)],
    )


def _losses(draft: LlamaForCausalLM, head: KeptHead, batch: _Batch, greedy_weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The training loss, and how often the draft's argmax is the target's token."""
    hidden = draft.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    log_q = torch.log_softmax(head.logits(draft, hidden[batch.rows, batch.positions]).float(), dim=-1)  # (n, kept)
    kept = batch.teacher_rows >= 0
    p = batch.teacher_probs * kept
    p = p / p.sum(-1, keepdim=True).clamp_min(1e-9)
    soft = -(p * log_q.gather(1, batch.teacher_rows.clamp_min(0))).sum(-1)  # (n,)
    answer_kept = batch.answer_rows >= 0
    hard = -log_q.gather(1, batch.answer_rows.clamp_min(0).unsqueeze(1)).squeeze(1) * answer_kept
    loss = (soft + greedy_weight * hard).mean()
    agreement = ((log_q.argmax(-1) == batch.answer_rows) & answer_kept).float().mean()
    return loss, agreement


def fit(
    draft: LlamaForCausalLM,
    head: KeptHead,
    train: list[Example],
    validation: list[Example],
    pad_id: int,
    settings: FitSettings,
    checkpoint: Path,
) -> FitLog:
    """Train the draft for settings.steps, resuming from `checkpoint` if it exists; keep the best validated weights."""
    rng = random.Random(settings.seed)
    trainable = [p for p in draft.parameters() if p.requires_grad]  # a draft sharing the target's embedding keeps it frozen
    optimizer = torch.optim.AdamW(trainable, lr=settings.learning_rate, weight_decay=settings.weight_decay)
    log, start, best = FitLog(), 0, None
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        draft.load_state_dict(state["draft"], strict=False)
        optimizer.load_state_dict(state["optimizer"])
        log, start, best = state["log"], state["step"], state["best"]
        rng.setstate(state["rng"])

    by_length = sorted(train, key=lambda example: len(example.prompt_ids) + len(example.answer_ids))
    chunks = [by_length[i : i + settings.batch_size] for i in range(0, len(by_length), settings.batch_size)]
    started = time.perf_counter() - log.seconds
    running = []
    for step in tqdm(range(start, settings.steps), desc="distilling", initial=start, total=settings.steps):
        draft.train()
        for group in optimizer.param_groups:
            group["lr"] = learning_rate_at(step, settings, settings.steps)
        loss, _ = _losses(draft, head, _batch(rng.choice(chunks), head, pad_id), settings.greedy_weight)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        running.append(loss.item())
        if (step + 1) % settings.validate_every == 0 or step + 1 == settings.steps:
            validation_loss, agreement = evaluate(draft, head, validation, pad_id, settings)
            log.steps.append(step + 1)
            log.train_loss.append(sum(running) / len(running))
            log.validation_loss.append(validation_loss)
            log.validation_agreement.append(agreement)
            running = []
            tqdm.write(
                f"step {step + 1}: train {log.train_loss[-1]:.3f}  validation {validation_loss:.3f}  greedy agreement {agreement:.3f}"
            )
            if best is None or agreement > best["agreement"]:
                best = {"agreement": agreement, "step": step + 1, "draft": _own_state(draft)}
            log.seconds = time.perf_counter() - started
            state = {"draft": _own_state(draft), "optimizer": optimizer.state_dict(), "log": log, "step": step + 1, "best": best}
            torch.save(state | {"rng": rng.getstate()}, checkpoint.with_suffix(".partial"))
            checkpoint.with_suffix(".partial").rename(checkpoint)
    if best is not None:
        draft.load_state_dict(best["draft"], strict=False)
    log.seconds = time.perf_counter() - started
    return log


def _own_state(draft: LlamaForCausalLM) -> dict[str, torch.Tensor]:
    """The draft's trained weights (a borrowed, frozen embedding is left out), copied."""
    frozen = {name for name, p in draft.named_parameters() if not p.requires_grad}
    return {name: value.clone() for name, value in draft.state_dict().items() if name not in frozen and "lm_head" not in name}


@torch.no_grad()
def evaluate(
    draft: LlamaForCausalLM, head: KeptHead, examples: list[Example], pad_id: int, settings: FitSettings
) -> tuple[float, float]:
    """Mean validation loss, and the fraction of answer positions where the draft's argmax is the target's token."""
    draft.eval()
    losses, agreements, weights = [], [], []
    for start in range(0, len(examples), settings.batch_size):
        group = examples[start : start + settings.batch_size]
        loss, agreement = _losses(draft, head, _batch(group, head, pad_id), settings.greedy_weight)
        n = sum(len(example.answer_ids) for example in group)
        losses.append(loss.item() * n)
        agreements.append(agreement.item() * n)
        weights.append(n)
    return sum(losses) / sum(weights), sum(agreements) / sum(weights)
