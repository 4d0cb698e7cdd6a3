"""Loop-free self-training: the target learns, from its own text, to take a different turn where greedy decoding loops.

A small language model decoded greedily falls into loops (`name, name, name, …`) even as its validation loss
falls. This stage lets the target continue corpus windows greedily while `ContinuationNGramBan` forbids any
token that would complete an n-gram the continuation already wrote. Where the ban overrode the model's
argmax, the model is taught the token it took instead (cross-entropy) and away from the looping one
(unlikelihood, -log(1 - p); Welleck et al. 2019); everywhere else its text is left alone, and next-token
cross-entropy on real text keeps it a language model. Probes of plain greedy decoding on corpus windows
(distinct-4 of the continuation) decide when it has learnt enough.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tqdm import tqdm
from transformers import LlamaForCausalLM, LogitsProcessor

from specviz.training.evaluate import distinct_n
from specviz.training.loop import TrainResult, validation_loss
from specviz.training.on_policy import continue_greedily

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoopFreeSettings:
    max_steps: int = 300
    learning_rate: float = 5e-5  # 2e-4 cost 0.37 nats of validation loss in 25 steps
    warmup_steps: int = 20  # a fresh AdamW's first steps are large
    batch_size: int = 8
    prefix_length: int = 64  # corpus tokens the model continues
    continuation_length: int = 96  # tokens it writes under the ban, as the evaluation does
    ngram: int = 6  # real code repeats ~5% of its 6-grams within 96 tokens; a loop repeats nearly all
    correction_weight: float = 1.0
    lm_sequence_length: int = 256  # real-text windows for the cross-entropy term
    probe_every: int = 25
    probe_rows: int = 24
    stop_mean_distinct: float = 0.85  # stop once plain greedy probes reach both (margins over the 0.75 / 0.4)
    stop_min_distinct: float = 0.5
    max_validation_loss: float = 3.55  # or once the language model has paid this much (the issue asks for <= 3.6)
    seed: int = 0


class ContinuationNGramBan(LogitsProcessor):
    """Forbids the tokens that would complete an n-gram already written after prefix_length; records overrides.

    Unlike transformers' `no_repeat_ngram_size`, n-grams of the prompt stay allowed: copying a name or a line
    from the code above is what a code model should do. `overridden[row, position]` is True where the model's
    own argmax was forbidden, and `banned[row, position]` holds that argmax.
    """

    def __init__(self, batch_size: int, prefix_length: int, total_length: int, n: int):
        self.prefix_length, self.n = prefix_length, n
        self.followers: list[dict[tuple[int, ...], set[int]]] = [{} for _ in range(batch_size)]
        self.overridden = torch.zeros(batch_size, total_length, dtype=torch.bool)
        self.banned = torch.zeros(batch_size, total_length, dtype=torch.long)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        position = input_ids.shape[1]  # where the token chosen from these scores will sit
        argmax = scores.argmax(-1).tolist()
        for row, ids in enumerate(input_ids.tolist()):
            followers = self.followers[row]
            if position - self.n >= self.prefix_length:  # the newest n-gram lies wholly in the continuation
                gram = ids[position - self.n :]
                followers.setdefault(tuple(gram[:-1]), set()).add(gram[-1])
            forbidden = followers.get(tuple(ids[position - self.n + 1 :]))
            if not forbidden:
                continue
            if argmax[row] in forbidden:
                self.overridden[row, position] = True
                self.banned[row, position] = argmax[row]
            scores[row, list(forbidden)] = -math.inf
        return scores


def probe(model: LlamaForCausalLM, prefixes: torch.Tensor, new_tokens: int) -> tuple[float, float]:
    """Mean and minimum distinct-4 of plain greedy continuations of prefixes."""
    sequences = continue_greedily(model, prefixes, new_tokens)
    scores = [distinct_n(row[prefixes.shape[1] :], 4) for row in sequences.tolist()]
    return statistics.mean(scores), min(scores)


def correction_loss(logits: torch.Tensor, sequences: torch.Tensor, overridden: torch.Tensor, banned: torch.Tensor):
    """At the overridden positions: cross-entropy on the token taken, unlikelihood on the looping argmax."""
    mask = overridden[:, 1:]  # logits at position t predict the token at t + 1
    if not mask.any():
        return logits.sum() * 0.0
    log_probs = F.log_softmax(logits[:, :-1].float()[mask], dim=-1)  # (overrides, vocab)
    taken = -log_probs.gather(-1, sequences[:, 1:][mask][:, None]).squeeze(-1)
    p_banned = log_probs.gather(-1, banned[:, 1:][mask][:, None]).squeeze(-1).exp()
    return (taken - torch.log1p(-p_banned.clamp(max=1 - 1e-5))).mean()


def finetune(
    model: LlamaForCausalLM,
    train_tokens: torch.Tensor,
    validation_tokens: torch.Tensor,
    settings: LoopFreeSettings,
    description: str = "loop-free",
) -> tuple[TrainResult, list[dict]]:
    """Fine-tune in place until the probes pass or max_steps; returns the result and the probe history."""
    generator = torch.Generator().manual_seed(settings.seed)
    probe_starts = torch.randint(0, len(train_tokens) - settings.prefix_length, (settings.probe_rows,), generator=generator)
    probe_prefixes = torch.stack([train_tokens[s : s + settings.prefix_length] for s in probe_starts.tolist()])
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=0.0, betas=(0.9, 0.95))
    started = time.perf_counter()
    running_ce = running_fix = float("nan")
    probes: list[dict] = []
    total = settings.prefix_length + settings.continuation_length
    span = max(settings.prefix_length, settings.lm_sequence_length)
    step = 0
    kept: dict[str, torch.Tensor] | None = None  # the weights at the last probe within the validation-loss budget
    for step in tqdm(range(settings.max_steps + 1), desc=description, mininterval=5):
        if step % settings.probe_every == 0 or step == settings.max_steps:
            mean, low = probe(model, probe_prefixes, settings.continuation_length)
            val_loss = validation_loss(model, validation_tokens, settings.lm_sequence_length)
            probes.append(
                {
                    "step": step,
                    "distinct_4_mean": round(mean, 4),
                    "distinct_4_min": round(low, 4),
                    "validation_loss": round(val_loss, 4),
                }
            )
            log.info("%s step %d: probe distinct-4 mean %.3f min %.3f, val %.3f", description, step, mean, low, val_loss)
            learnt = mean >= settings.stop_mean_distinct and low >= settings.stop_min_distinct
            if val_loss > settings.max_validation_loss:
                if kept is not None:  # back to the last probe within budget
                    model.load_state_dict(kept)
                    probes[-1]["rolled_back_to_step"] = step = probes[-2]["step"]
                    val_loss = probes[-2]["validation_loss"]
                break
            if learnt or step == settings.max_steps:
                break
            kept = {name: tensor.clone() for name, tensor in model.state_dict().items()}
        starts = torch.randint(0, len(train_tokens) - span, (settings.batch_size,), generator=generator).tolist()
        prefixes = torch.stack([train_tokens[s : s + settings.prefix_length] for s in starts])
        real_text = torch.stack([train_tokens[s : s + settings.lm_sequence_length] for s in starts])
        # 1. the model continues the prefixes greedily, never completing an n-gram it already wrote
        ban = ContinuationNGramBan(settings.batch_size, settings.prefix_length, total, settings.ngram)
        sequences = continue_greedily(model, prefixes, settings.continuation_length, ban)
        # 2. where the ban overrode it, prefer the turn it took; keep cross-entropy on real text
        model.train()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            fix = correction_loss(model(sequences).logits, sequences, ban.overridden, ban.banned)
            ce = model(real_text, labels=real_text).loss
        (ce + settings.correction_weight * fix).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for group in optimizer.param_groups:
            group["lr"] = settings.learning_rate * min(1.0, (step + 1) / settings.warmup_steps)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        running_ce = ce.item() if math.isnan(running_ce) else 0.9 * running_ce + 0.1 * ce.item()
        running_fix = fix.item() if math.isnan(running_fix) else 0.9 * running_fix + 0.1 * fix.item()
    log.info("%s: %d steps, cross-entropy %.3f correction %.3f val %.3f", description, step, running_ce, running_fix, val_loss)
    history = [(step, round(running_ce, 4), round(val_loss, 4))]
    return TrainResult(step, running_ce, val_loss, time.perf_counter() - started, history), probes
