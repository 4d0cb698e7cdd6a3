"""Stage 3 for a feature head: the target's features on its own answers, then the head fitted to them.

The target reads each prompt + answer once (teacher forcing, no grad) and its last-layer feature at every
position is kept in memory (bf16, ~1.2 KB a token). The head then learns, at every answer position i, to
predict f_i from (f_{i-1}, x_i) and, through the target's kept head rows, the token x_{i+1} the target
wrote. A second unrolled step feeds the head its own prediction, as drafting does from the second draft on
(EAGLE-3's training-time test), so the head learns to draft from what it will actually see.

Loss per step: cross-entropy on the target's own next token (under greedy decoding that token is what the
draft must guess), KL from the target's distribution over the kept ids, and a smooth-L1 pull of f̂ towards f.
Validation reports greedy agreement per unrolled step: the share of answer positions where the head's argmax
is the target's token, which predicts α at the first and second draft of a window.
"""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass, field

import torch
from torch.nn import functional as F
from tqdm import tqdm

from specviz.models.feature_head import FeatureHead
from specviz.training.optimiser import OptimiserSettings, TrainingLog

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FeatureSequence:
    """One prompt + answer: token ids, the target's features, where the answer starts."""

    token_ids: torch.Tensor  # (n,) long
    features: torch.Tensor  # (n, hidden) bf16: the target's last-layer feature after each token
    answer_start: int


@dataclass(frozen=True)
class FeatureFitSettings(OptimiserSettings):
    """A feature head's fit: AdamW over `epochs` passes, two unrolled steps, validated every `validate_every`."""

    learning_rate: float = 6e-4
    warmup_steps: int = 40
    weight_decay: float = 0.0
    epochs: float = 4.0
    second_step_weight: float = 0.5
    feature_weight: float = 1.0
    validate_every: int = 100
    scale_rate_factor: float = 30.0  # a low-rank head's scales learn this many times faster than its factors


@dataclass
class FeatureFitLog(TrainingLog):
    """Train loss and greedy agreement at the first and second unrolled step, over the steps."""

    validation_agreement_first: list[float] = field(default_factory=list)
    validation_agreement_second: list[float] = field(default_factory=list)


@torch.inference_mode()
def target_features(
    target, sequences: list[tuple[list[int], int]], layers: tuple[int, ...] = (-1,), batch_size: int = 16, quiet: bool = False
) -> list[FeatureSequence]:
    """The target's hidden states of `layers` (side by side) over each (token ids, answer start), in batches of similar length."""
    order = sorted(range(len(sequences)), key=lambda index: len(sequences[index][0]))
    results: list[FeatureSequence | None] = [None] * len(sequences)
    for start in tqdm(range(0, len(order), batch_size), desc="target features", unit="batch", disable=quiet):
        batch = order[start : start + batch_size]
        width = max(len(sequences[index][0]) for index in batch)
        input_ids = torch.zeros(len(batch), width, dtype=torch.long)
        attention = torch.zeros(len(batch), width, dtype=torch.long)
        for row, index in enumerate(batch):
            ids = sequences[index][0]
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention[row, : len(ids)] = 1
        output = target.model(
            input_ids=input_ids.to(target.device), attention_mask=attention.to(target.device), output_hidden_states=True
        )
        # (b, width, hidden · layers); layer −1 is post-norm, what the LM head reads
        hidden = torch.cat([output.hidden_states[layer] for layer in layers], dim=-1).to(torch.bfloat16).cpu()
        for row, index in enumerate(batch):
            ids, answer_start = sequences[index]
            results[index] = FeatureSequence(torch.tensor(ids), hidden[row, : len(ids)].clone(), answer_start)
    return results  # type: ignore[return-value]


def _batch(sequences: list[FeatureSequence], row_of: torch.Tensor, hidden: int):
    """Head inputs for a batch, right-padded: x_i, f_{i-1}, the true f_i (last layer), the label x_{i+1} (kept row or −1)."""
    lengths = [len(s.token_ids) - 1 for s in sequences]  # head positions i = 1 … n−1
    width, feature_width = max(lengths), sequences[0].features.shape[1]
    tokens = torch.zeros(len(sequences), width, dtype=torch.long)
    features_in = torch.zeros(len(sequences), width, feature_width)
    features_out = torch.zeros(len(sequences), width, hidden)
    labels = torch.full((len(sequences), width), -1, dtype=torch.long)
    mask = torch.zeros(len(sequences), width, dtype=torch.long)
    for row, s in enumerate(sequences):
        n = lengths[row]
        tokens[row, :n] = s.token_ids[1:]
        features_in[row, :n] = s.features[:-1].float()
        features_out[row, :n] = s.features[1:, :hidden].float()
        mask[row, :n] = 1
        nxt = row_of[s.token_ids[2:]]  # the label at head position j is x_{j+2}
        first = max(0, s.answer_start - 2)  # only positions whose label is an answer token are scored
        labels[row, first : n - 1] = nxt[first:]
    return tokens, features_in, features_out, labels, mask


def _step_loss(head: FeatureHead, predicted, features_out, labels, scored, settings: FeatureFitSettings):
    """Loss at the scored positions, and the number the head's argmax got right there."""
    guess = predicted[scored]  # (m, hidden)
    truth = features_out[scored]
    student = head.kept_logits(guess).float()
    with torch.no_grad():
        teacher = torch.log_softmax(head.kept_logits(truth).float(), dim=-1)
    label = labels[scored]
    hard = F.cross_entropy(student, label.clamp(min=0), reduction="none")
    hard = (hard * (label >= 0)).sum() / (label >= 0).sum().clamp(min=1)
    soft = F.kl_div(torch.log_softmax(student, dim=-1), teacher, log_target=True, reduction="batchmean")
    pull = F.smooth_l1_loss(guess.float(), truth)
    right = ((student.argmax(-1) == label) & (label >= 0)).sum().item()
    return hard + soft + settings.feature_weight * pull, right, (label >= 0).sum().item()


def _losses(head: FeatureHead, batch, settings: FeatureFitSettings):
    tokens, features_in, features_out, labels, mask = batch
    scored = labels >= 0
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=features_in.device.type == "cpu"):
        first, first_kv = head(tokens, features_in, mask)
        loss_1, right_1, count = _step_loss(head, first, features_out, labels, scored, settings)
        fed_back = torch.cat(
            [features_in[:, :1], head.fed_back(first[:, :-1].to(features_in.dtype))], dim=1
        )  # f̂_{i-1} for f_{i-1}
        second = head.second_step(tokens, fed_back, first_kv, mask)
        loss_2, right_2, _ = _step_loss(head, second, features_out, labels, scored, settings)
    return loss_1 + settings.second_step_weight * loss_2, right_1, right_2, count


@torch.no_grad()
def evaluate_head(head: FeatureHead, validation: list[FeatureSequence], row_of, settings: FeatureFitSettings):
    """Greedy agreement with the target at the first and the second unrolled step."""
    head.eval()
    right_1 = right_2 = count = 0
    for start in range(0, len(validation), settings.batch_size):
        batch = _batch(validation[start : start + settings.batch_size], row_of, head.shape.hidden)
        _, r1, r2, n = _losses(head, batch, settings)
        right_1, right_2, count = right_1 + r1, right_2 + r2, count + n
    head.train()
    return right_1 / max(1, count), right_2 / max(1, count)


def fit_head(
    head: FeatureHead,
    train: list[FeatureSequence],
    validation: list[FeatureSequence],
    settings: FeatureFitSettings,
    progress=log.info,
) -> FeatureFitLog:
    """AdamW with warm-up and cosine decay to 0 over `epochs` passes of the training sequences.

    Not optimiser.learning_rate_at (which decays to a tenth): the shipped head was trained on this schedule, and the
    card's numbers are its numbers."""
    row_of = torch.full((head.shape.vocab_size,), -1, dtype=torch.long)
    row_of[head.kept_ids.cpu()] = torch.arange(len(head.kept_ids))
    trainable = [p for p in head.parameters() if p.requires_grad]
    # a low-rank head's per-matrix scales (models/low_rank.py) are single numbers that must travel from 0 or 1 by
    # tenths: Adam moves a parameter about one learning rate a step, so they take a larger one
    scales = [p for name, p in head.named_parameters() if p.requires_grad and name.endswith(".scale")]
    others = [p for p in trainable if all(p is not scale for scale in scales)]
    groups = [{"params": others}] + (
        [{"params": scales, "lr": settings.learning_rate * settings.scale_rate_factor}] if scales else []
    )
    optimizer = torch.optim.AdamW(groups, lr=settings.learning_rate, weight_decay=settings.weight_decay)
    steps_per_epoch = math.ceil(len(train) / settings.batch_size)
    total = max(1, int(settings.epochs * steps_per_epoch))
    schedule = lambda step: min(1.0, (step + 1) / settings.warmup_steps) * 0.5 * (1 + math.cos(math.pi * step / total))  # noqa: E731
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    rng = random.Random(settings.seed)
    log, started, running = FeatureFitLog(), time.perf_counter(), []
    head.train()
    order: list[int] = []
    for step in range(total):
        if not order:
            order = list(range(len(train)))
            rng.shuffle(order)
        picked, order = order[: settings.batch_size], order[settings.batch_size :]
        loss, *_ = _losses(head, _batch([train[index] for index in picked], row_of, head.shape.hidden), settings)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        scheduler.step()
        running.append(loss.item())
        if (step + 1) % settings.validate_every == 0 or step + 1 == total:
            first, second = evaluate_head(head, validation, row_of, settings)
            log.steps.append(step + 1)
            log.train_loss.append(sum(running) / len(running))
            log.validation_agreement_first.append(round(first, 4))
            log.validation_agreement_second.append(round(second, 4))
            running = []
            progress(f"step {step + 1}/{total}: loss {log.train_loss[-1]:.3f}, agreement {first:.3f} / {second:.3f}")
    log.seconds = time.perf_counter() - started
    return log
