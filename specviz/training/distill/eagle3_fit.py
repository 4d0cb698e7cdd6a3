"""Stage 3 for an EAGLE-3 head: warm-started from a trained feature head and the target, then fitted with the
training-time test (SpecForge's TTT) unrolled over several drafts, within a wall-clock budget.

The target reads each batch of prompt + answer as it comes (teacher forcing, no grad): its final normed feature
(the teacher: its logits over the draft vocabulary) and the raw residual stream entering the aux layers (the head's
input). Nothing is kept between batches, so memory stays flat and an unfinished pass costs nothing.

Draft step 1 reads the true aux states; step k + 1 reads step k's output at the same base position and the true
token k positions on (as drafting reads its accepted draft), and attends to the true keys up to its base position and
to its own earlier steps' keys (Eagle3Head.unrolled_step). Loss at every step: cross-entropy on the target's own next
token plus KL from the target's distribution over the draft vocabulary, weighted 0.8^k (SpecForge's). The learning
rate warms up, then follows a cosine over the budget's wall-clock time, so the schedule ends when the budget does;
the head is checkpointed every few minutes. Validation agreement at depth k is the share of answer positions where
step k's argmax is the target's token: the conditional acceptance of draft k under greedy decoding.
"""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.nn import functional as F

from specviz.models.eagle3_head import Eagle3Head, Eagle3Shape, save_head
from specviz.models.feature_head import FeatureHead
from specviz.training.distill.feature_fit import FeatureSequence, _batch, target_features
from specviz.training.optimiser import OptimiserSettings, TrainingLog

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Eagle3FitSettings(OptimiserSettings):
    """AdamW over a wall-clock budget: `ttt_steps` unrolled drafts, validated at `validate_depths` every checkpoint."""

    learning_rate: float = 3e-4
    warmup_steps: int = 20
    weight_decay: float = 0.0
    budget_s: float = 3600.0
    ttt_steps: int = 3
    step_decay: float = 0.8
    validate_depths: int = 4
    checkpoint_s: float = 480.0
    validation_sequences: int = 32  # few: on 2 shared cores every target forward counts
    bucket: int = 50  # batches drawn from a shuffled window of bucket · batch_size sequences sorted by length


@dataclass
class Eagle3FitLog(TrainingLog):
    """Train loss and validation agreement per depth at each checkpoint."""

    validation_agreement: list[list[float]] = field(default_factory=list)
    sequences_seen: int = 0


def layers_read(aux_layers: tuple[int, ...]) -> tuple[int, ...]:
    """What the target hands the fit: its final normed feature (the teacher) first, then the aux states."""
    return (-1, *aux_layers)


# -- the warm start -----------------------------------------------------------------------------------------------


def calibration_layers(old: FeatureHead, aux_layers: tuple[int, ...]) -> tuple[int, ...]:
    """The target's states the warm start reads: old's (last, lower…), then the aux layers."""
    return (*old.shape.feature_layers, *aux_layers)


@torch.no_grad()
def head_from_feature_head(
    target, old: FeatureHead, aux_layers: tuple[int, ...], states: list[FeatureSequence], embedding_in_h: bool = True
) -> tuple[Eagle3Head, dict]:
    """A new EAGLE-3 head that starts as close to `old` (a trained FeatureHead) as the two forms allow.

    old's layer runs over x = fuse(cat(e, f, lower)); x is both its residual and (normed) its attention's input. The
    EAGLE-3 layer's residual is h = fc(aux) and its attention reads cat(norm(e), norm(h)). So:
    - fc: ridge least squares (over `states`, the target's `calibration_layers` at every position) from the raw aux
      states at i−1 to old's x at i, embedding term included (`embedding_in_h`): under greedy answers the target's
      states at i−1 all but name x_i, and without it the residual would lack the token (measured: agreement 0.19 at
      depth 1 when h fitted only the features' part).
    - q/k/v: the hidden half is old's q/k/v (hidden_norm = old's input_norm, rescaled for |h| against |x|); the
      embedding half zero where h carries the embedding, else old's through its fuse of the embedding.
    - o_proj, post-attention norm, MLP: old's. lm_head: the rows of old's kept ids of the target's readout (its
      embedding where tied, else its LM head; frozen, so not shipped); `norm` a constant, so the readout's argmax is
      old's (logits = f̂·W, rescaled).
    Returns the head and what the calibration measured."""
    kept = old.kept_ids.tolist()
    shape = Eagle3Shape.of_target(target.config, len(kept), aux_layers)
    embedding = target.get_input_embeddings().weight.detach().float()
    head = Eagle3Head(shape, embedding, kept)
    hidden = shape.hidden
    old = old.float()
    old_width = hidden * len(old.shape.feature_layers)
    # head position j reads the states at j and token j + 1 (as _batch lays them out)
    rows = torch.cat([s.features[:-1].float() for s in states])  # (m, hidden · (old + aux))
    tokens = torch.cat([s.token_ids[1:] for s in states])
    old_part, aux = rows[:, :old_width], rows[:, old_width:]
    last, *lower = old_part.split(hidden, dim=-1)
    lower = [norm(state) for norm, state in zip(old.lower_norms, lower)]
    fuse = old.fuse.weight  # (hidden, hidden + width): [embedding | last | lower…]
    from_features = torch.cat([last, *lower], dim=-1) @ fuse[:, hidden:].T  # (m, hidden)
    from_embedding = embedding[tokens] @ fuse[:, :hidden].T
    x = from_features + from_embedding
    goal = x if embedding_in_h else from_features
    a = aux.double()
    gram = a.T @ a
    gram += torch.eye(gram.shape[0], dtype=gram.dtype) * 1e-3 * gram.diagonal().mean()
    fc = torch.linalg.solve(gram, a.T @ goal.double()).T.float()  # (hidden, 3·hidden)
    h = aux @ fc.T
    explained = 1 - (h - goal).pow(2).sum() / (goal - goal.mean(0)).pow(2).sum()
    rms = lambda t: t.pow(2).mean(-1).sqrt().mean()  # noqa: E731
    rms_x, rms_h, rms_e, rms_f = rms(x), rms(h), rms(embedding[tokens]), rms(last)
    head.fc.weight.copy_(fc)
    layer, attention = head.midlayer, head.midlayer.self_attn
    layer.hidden_norm.weight.copy_(old.input_norm.weight)
    layer.input_layernorm.weight.fill_(1.0)
    for new, old_proj in ((attention.q_proj, old.q_proj), (attention.k_proj, old.k_proj), (attention.v_proj, old.v_proj)):
        w = old_proj.weight
        new.weight[:, hidden:] = w if embedding_in_h else w * (rms_h / rms_x)
        new.weight[:, :hidden] = 0.0 if embedding_in_h else (w * old.input_norm.weight) @ fuse[:, :hidden] * (rms_e / rms_x)
    attention.o_proj.weight.copy_(old.o_proj.weight)
    layer.post_attention_layernorm.weight.copy_(old.post_attention_norm.weight)
    for name in ("gate_proj", "up_proj", "down_proj"):
        getattr(layer.mlp, name).weight.copy_(getattr(old, name).weight)
    head.norm.weight.fill_(float(rms_f))  # norm(f̂) · E = f̂ · E · rms(f)/rms(f̂): old's logits where |f̂| ≈ |f|
    head.lm_head.weight.copy_(old.head_weight)  # old's kept rows of the target's readout: its embedding where tied
    head.lm_head.weight.requires_grad_(False)
    head.lm_head_from_embedding = bool(target.config.tie_word_embeddings)
    head.lm_head_from_target_head = not head.lm_head_from_embedding
    measured = {
        "calibration_positions": int(rows.shape[0]),
        "embedding_in_h": embedding_in_h,
        "fc_least_squares_r2": round(float(explained), 4),
        "rms": {"fused_input": round(float(rms_x), 3), "h": round(float(rms_h), 3), "embedding": round(float(rms_e), 4)},
    }
    return head, measured


# -- the fit ---------------------------------------------------------------------------------------------------------


def _shifted(t: torch.Tensor, by: int, fill) -> torch.Tensor:
    """t moved `by` positions left along dim 1, the tail filled: what base position i reads at draft by + 1."""
    if by == 0:
        return t
    tail = t.new_full((t.shape[0], by, *t.shape[2:]), fill)
    return torch.cat([t[:, by:], tail], dim=1)


def unrolled_losses(head: Eagle3Head, batch, steps: int, decay: float):
    """Loss summed over `steps` unrolled drafts (weighted decay^k), and per draft (right, scored) for agreement."""
    tokens, features_in, features_out, labels, mask = batch
    hidden = head.shape.hidden
    aux = features_in[..., hidden:]
    rows = teacher_rows(head)
    total, counts = 0.0, []
    # the head trains in float32; the target's forward (target_features) runs in the pipeline's --dtype: on 2 quiet
    # AVX-512 cores bf16 took 1.09 s against 2.45 s in float32 for 8 × 180 tokens (the second training run used it)
    out, first_kv = head(tokens, aux, mask)
    own: list = []
    for k in range(steps):
        if k:
            out = head.unrolled_step(_shifted(tokens, k, 0), out, first_kv, own, k, mask)
        label, truth = _shifted(labels, k, -1), _shifted(features_out, k, 0.0)
        scored = label >= 0
        student = head.kept_logits(out[scored]).float()
        with torch.no_grad():
            teacher = torch.log_softmax(truth[scored].float() @ rows.float().T, dim=-1)
        target_label = label[scored]
        hard = F.cross_entropy(student, target_label)
        soft = F.kl_div(torch.log_softmax(student, dim=-1), teacher, log_target=True, reduction="batchmean")
        total = total + decay**k * (hard + soft)
        counts.append(((student.argmax(-1) == target_label).sum().item(), int(scored.sum().item())))
    return total, counts


def teacher_rows(head: Eagle3Head) -> torch.Tensor:
    """The target's readout rows of the draft vocabulary, which turn its final feature into its distribution: lm_head
    where the head borrows them (the warm start's), else the embedding's (a tied target's). The coder target is untied:
    its embedding rows would make the KL pull towards a distribution the target never had."""
    return head.lm_head.weight.detach() if head.lm_head_borrowed else head.embedding[head.kept_ids]


def _row_of(head: Eagle3Head) -> torch.Tensor:
    row_of = torch.full((head.shape.vocab_size,), -1, dtype=torch.long)
    row_of[head.kept_ids.cpu()] = torch.arange(len(head.kept_ids))
    return row_of


@torch.no_grad()
def evaluate_depths(head: Eagle3Head, validation: list[FeatureSequence], settings: Eagle3FitSettings) -> list[float]:
    """Greedy agreement with the target at drafts 1 … validate_depths."""
    head.eval()
    row_of, right, count = _row_of(head), [0] * settings.validate_depths, [0] * settings.validate_depths
    for start in range(0, len(validation), settings.batch_size):
        batch = _batch(validation[start : start + settings.batch_size], row_of, head.shape.hidden)
        _, counts = unrolled_losses(head, batch, settings.validate_depths, settings.step_decay)
        for k, (r, n) in enumerate(counts):
            right[k], count[k] = right[k] + r, count[k] + n
    head.train()
    return [round(r / max(1, n), 4) for r, n in zip(right, count)]


def batches(sequences: list[tuple[list[int], int]], settings: Eagle3FitSettings, rng: random.Random):
    """Index batches forever: each window of bucket · batch_size shuffled sequences sorted by length, cut, shuffled."""
    while True:
        order = list(range(len(sequences)))
        rng.shuffle(order)
        window = settings.bucket * settings.batch_size
        for start in range(0, len(order), window):
            chunk = sorted(order[start : start + window], key=lambda index: len(sequences[index][0]))
            cut = [chunk[i : i + settings.batch_size] for i in range(0, len(chunk), settings.batch_size)]
            rng.shuffle(cut)
            yield from cut


def fit_eagle3(
    head: Eagle3Head,
    target,
    train: list[tuple[list[int], int]],
    validation: list[FeatureSequence],
    settings: Eagle3FitSettings,
    checkpoint: Path | None = None,
    progress=log.info,
) -> Eagle3FitLog:
    """AdamW with warm-up, then a cosine over the wall-clock budget; stops (and validates) when the budget is spent."""
    row_of = _row_of(head)
    aux_layers = layers_read(head.shape.aux_layers)
    trainable = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=settings.learning_rate, weight_decay=settings.weight_decay)
    rng = random.Random(settings.seed)
    log, started, running = Eagle3FitLog(), time.perf_counter(), []
    log.steps.append(0)
    log.train_loss.append(float("nan"))
    log.validation_agreement.append(evaluate_depths(head, validation, settings))
    progress(f"step 0: agreement at depths 1–{settings.validate_depths} {log.validation_agreement[-1]}")
    started = time.perf_counter()  # the budget is the fit's; the first validation is not charged to it
    last_checkpoint, step = started, 0
    head.train()
    for picked in batches(train, settings, rng):
        elapsed = time.perf_counter() - started
        if elapsed >= settings.budget_s:
            break
        warm = min(1.0, (step + 1) / settings.warmup_steps)
        for group in optimizer.param_groups:
            group["lr"] = settings.learning_rate * warm * 0.5 * (1 + math.cos(math.pi * elapsed / settings.budget_s))
        features = target_features(target, [train[index] for index in picked], aux_layers, batch_size=len(picked), quiet=True)
        loss, _ = unrolled_losses(head, _batch(features, row_of, head.shape.hidden), settings.ttt_steps, settings.step_decay)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        running.append(loss.item())
        step += 1
        log.sequences_seen += len(picked)
        if step % 5 == 0:
            progress(f"step {step}: loss {sum(running[-5:]) / len(running[-5:]):.3f}, {elapsed:.0f} s")
        if time.perf_counter() - last_checkpoint >= settings.checkpoint_s:
            _checkpoint(head, validation, settings, log, step, running, checkpoint, progress)
            running, last_checkpoint = [], time.perf_counter()
    log.seconds = time.perf_counter() - started
    _checkpoint(head, validation, settings, log, step, running, checkpoint, progress)
    return log


def _checkpoint(head, validation, settings, log: Eagle3FitLog, step, running, folder: Path | None, progress) -> None:
    log.steps.append(step)
    log.train_loss.append(sum(running) / max(1, len(running)))
    log.validation_agreement.append(evaluate_depths(head, validation, settings))
    progress(f"checkpoint at step {step}: loss {log.train_loss[-1]:.3f}, agreement {log.validation_agreement[-1]}")
    if folder is not None:
        save_head(head, folder)
