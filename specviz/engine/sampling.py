"""The sampling pipeline shared by draft, target and baseline: temperature, top-k, top-p, then a draw."""

from __future__ import annotations

import torch

from specviz.engine.settings import SamplingSettings


def warp(logits: torch.Tensor, settings: SamplingSettings) -> torch.Tensor:
    """Logits → the distribution actually sampled from (rows sum to 1).

    Under greedy the distribution is one-hot on the argmax, which makes the exact acceptance test
    reduce to "accept while the draft token is the target's argmax".
    """  # (..., vocab) → (..., vocab)
    logits = logits.float()
    if settings.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    logits = logits / settings.temperature
    if settings.top_k > 0 and settings.top_k < logits.shape[-1]:
        kth_largest = torch.topk(logits, settings.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth_largest, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if settings.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (the first token is always kept)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(mass_before >= settings.top_p, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def display_probs(logits: torch.Tensor, settings: SamplingSettings) -> torch.Tensor:
    """What the UI shows as p(x) and q(x): the sampled distribution, or the plain softmax under greedy."""
    if settings.greedy:
        return torch.softmax(logits.float(), dim=-1)
    return warp(logits, settings)


def sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One draw per row from distributions that are not one-hot by construction (greedy never gets here: see draw)."""  # (n, vocab) → (n,)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def draw(
    logits: torch.Tensor, settings: SamplingSettings, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One token per row, and the distribution it was drawn from (None under greedy, where that is one-hot on it)."""  # (n, vocab) → (n,), (n, vocab) | None
    if settings.greedy:
        return logits.argmax(-1), None  # the token warp's one-hot picks, without building it
    probs = warp(logits, settings)
    return sample(probs, generator), probs


def residual(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p − q)): what the target resamples from after a rejection.

    If p ≤ q everywhere (only possible when p == q up to rounding, where a rejection has
    probability zero) fall back to p itself.
    """  # (vocab,) → (vocab,)
    excess = (target_probs - draft_probs).clamp_min(0.0)
    total = excess.sum()
    return excess / total if total > 1e-12 else target_probs
