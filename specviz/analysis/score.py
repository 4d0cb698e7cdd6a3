"""The draft scorecard: how often would this draft be accepted on this text, without generating anything?

One teacher-forced forward of each model over the text gives p and q at every position; after the same
warping the engine samples with, Σₓ min(p(x), q(x)) is the probability that a draft at that position is
accepted (Leviathan et al., Corollary 3.6). Under greedy both distributions are one-hot, so it is 1 where
the two argmaxes agree and 0 elsewhere. The mean over the text estimates α; with τ and ν timed on this
device (specviz.analysis.timing), readings_of_steps predicts tokens per cycle, the speedup and the best γ.

It predicts α during generation as far as the text resembles what the target writes: on the target's
own greedy continuation the positions a run tests are exactly teacher-forced positions (tests/test_score.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from specviz.analysis.readings import Readings, readings_of_steps
from specviz.analysis.timing import StepTimes
from specviz.engine.sampling import warp
from specviz.engine.settings import DecodeSettings, SamplingSettings
from specviz.engine.tally import alpha_analytic
from specviz.models.loading import LoadedPair
from specviz.run.runner import encode_prompt, run

LOGIT_BUDGET = 2**25  # rows × vocabulary per forward: ~128 MB of fp32 logits for each model


@dataclass(frozen=True)
class ScoredText:
    """One text, position by position: overlaps[i] is Σ min(p, q) for predicting token i + 1 from tokens 0..i."""

    token_ids: tuple[int, ...]
    token_texts: tuple[str, ...]
    overlaps: tuple[float, ...]  # len(token_ids) − 1
    target_top: tuple[str, ...]  # the target's most likely token at each scored position, as text
    draft_top: tuple[str, ...]  # the draft's

    @property
    def alpha(self) -> float | None:
        return pooled_alpha((self,))


@dataclass(frozen=True)
class Hard:
    """One of the positions where the draft is least likely to be accepted."""

    text_index: int
    position: int  # index of the token being predicted
    overlap: float
    context: str  # a few tokens before it
    token: str  # the text's own token
    target_top: str
    draft_top: str


@dataclass(frozen=True)
class Scorecard:
    texts: tuple[ScoredText, ...]
    gamma: int
    sampling: SamplingSettings
    times: StepTimes
    readings: Readings

    @property
    def alpha(self) -> float | None:
        return self.readings.alpha

    @property
    def tokens_scored(self) -> int:
        return sum(len(text.overlaps) for text in self.texts)

    def speedup_curve(self, max_gamma: int = 16) -> list[tuple[int, float, float]]:
        """(γ, Leviathan's prediction, the prediction with the measured verify cost ν) for γ = 1..max_gamma."""
        prediction = self.readings.prediction
        return prediction.curve(max_gamma) if prediction else []

    def hardest(self, n: int = 10, context_tokens: int = 6) -> list[Hard]:
        """The n positions with the smallest Σ min(p, q), lowest first."""
        ranked = sorted(
            ((overlap, t, i + 1) for t, text in enumerate(self.texts) for i, overlap in enumerate(text.overlaps)),
            key=lambda entry: entry[0],
        )
        hard = []
        for overlap, t, position in ranked[:n]:
            text = self.texts[t]
            hard.append(
                Hard(
                    text_index=t,
                    position=position,
                    overlap=overlap,
                    context="".join(text.token_texts[max(0, position - context_tokens) : position]),
                    token=text.token_texts[position],
                    target_top=text.target_top[position - 1],
                    draft_top=text.draft_top[position - 1],
                )
            )
        return hard

    def to_dict(self) -> dict:
        m = self.readings
        tokens_per_cycle = m.prediction.tokens_per_cycle if m.prediction else None
        return {
            "alpha": m.alpha,
            "alpha_by_text": [text.alpha for text in self.texts],
            "tokens_scored": self.tokens_scored,
            "gamma": self.gamma,
            "temperature": self.sampling.temperature,
            "top_k": self.sampling.top_k,
            "top_p": self.sampling.top_p,
            "alpha_meaning": "share of positions where the argmaxes agree"
            if self.sampling.greedy
            else "mean of Σ min(p, q) over positions",
            "predicted_tokens_per_cycle": tokens_per_cycle,
            "tau": m.tau,
            "verify_cost": m.verify_cost,
            "predicted_speedup": m.predicted_with_verify_cost,
            "predicted_speedup_leviathan": m.predicted_speedup,
            "best_gamma": m.best_gamma,
            "best_speedup": m.best_speedup,
            "draft_step_ms": 1000 * self.times.draft_step_s,
            "target_step_ms": 1000 * self.times.target_step_s,
            "verify_ms": 1000 * self.times.verify_s,
            "hardest": [vars(hard) for hard in self.hardest(5)],
        }


def pooled_alpha(scored: Iterable[ScoredText]) -> float | None:
    """α over scored texts: the mean Σ min(p, q) over all their positions, each position counted once."""
    scored = list(scored)
    return alpha_analytic(sum(sum(text.overlaps) for text in scored), sum(len(text.overlaps) for text in scored))


def scored_alpha(pair: LoadedPair, texts: Sequence[str], sampling: SamplingSettings) -> float | None:
    """α scored teacher-forced on the texts themselves (no generation, no timing)."""
    return pooled_alpha(score_token_ids(pair, encode_text(pair, text), sampling) for text in texts)


def window_length(pair: LoadedPair) -> int:
    """Tokens per teacher-forced forward: within the models' context and the logit budget."""
    return max(16, min(pair.context_length, 1024, LOGIT_BUDGET // max(1, pair.shared_vocab_size)))


@torch.inference_mode()
def score_token_ids(
    pair: LoadedPair, token_ids: list[int], sampling: SamplingSettings, window: int | None = None, scored_from: int = 1
) -> ScoredText:
    """Σ min(p, q) at every position of a token sequence, in windows that overlap by a quarter for context.

    Tokens before `scored_from` are context only: the result starts at token scored_from − 1.
    """
    window = window or window_length(pair)
    keep = window // 4  # earlier tokens re-read as context by each later window, not scored again
    n = len(token_ids)
    overlaps: list[float] = []
    target_top: list[int] = []
    draft_top: list[int] = []
    next_target = 1  # the next token to predict
    while next_target < n:
        start = max(0, next_target - 1 - keep)
        stop = min(n, start + window)
        ids = torch.tensor([token_ids[start:stop]], device=pair.device)
        last = min(stop, n - 1)  # predict tokens next_target..last, from rows next_target−1−start onwards
        rows = slice(next_target - 1 - start, last - start)
        p_logits = pair.target.model(input_ids=ids).logits[0, rows, : pair.shared_vocab_size].float()  # (k, vocab)
        q_logits = pair.draft.model(input_ids=ids).logits[0, rows, : pair.shared_vocab_size].float()  # (k, vocab)
        p, q = warp(p_logits, sampling), warp(q_logits, sampling)
        overlaps += torch.minimum(p, q).sum(-1).clamp(max=1.0).tolist()
        target_top += p_logits.argmax(-1).tolist()
        draft_top += q_logits.argmax(-1).tolist()
        next_target = last + 1
    text = pair.vocabulary.token_text
    cut = max(0, scored_from - 1)
    return ScoredText(
        tuple(token_ids[cut:]),
        tuple(text(t) for t in token_ids[cut:]),
        tuple(overlaps[cut:]),
        tuple(text(t) for t in target_top[cut:]),
        tuple(text(t) for t in draft_top[cut:]),
    )


def encode_text(pair: LoadedPair, text: str) -> list[int]:
    return list(pair.tokenizer(text, add_special_tokens=True)["input_ids"])


def own_continuation(pair: LoadedPair, prompt: str, sampling: SamplingSettings, n_tokens: int, seed: int = 0) -> ScoredText:
    """What the target itself writes after the prompt (n tokens, under the sampling settings), scored in context."""
    settings = DecodeSettings(max_new_tokens=n_tokens, gamma=1, sampling=sampling, seed=seed)
    prompt_ids = encode_prompt(pair, prompt, n_tokens, 1)
    new_ids = list(list(run(pair, prompt, settings, mode="autoregressive"))[-1].new_token_ids)
    return score_token_ids(pair, prompt_ids + new_ids, sampling, scored_from=len(prompt_ids))


def scorecard(
    pair: LoadedPair,
    texts: list[str],
    sampling: SamplingSettings,
    gamma: int,
    times: StepTimes,
    continue_tokens: int = 0,
    seed: int = 0,
) -> Scorecard:
    """Score every text (or, with continue_tokens, the target's own continuation of each), then read α, τ, ν
    and the predictions through readings_of_steps."""
    if continue_tokens:
        scored = tuple(own_continuation(pair, text, sampling, continue_tokens, seed) for text in texts)
    else:
        scored = tuple(score_token_ids(pair, encode_text(pair, text), sampling) for text in texts)
    if not any(text.overlaps for text in scored):
        raise ValueError("nothing to score: every text is a single token or empty")
    readings = readings_of_steps(times.draft_step_s, times.target_step_s, times.verify_s, gamma, pooled_alpha(scored))
    return Scorecard(scored, gamma, sampling, times, readings)
