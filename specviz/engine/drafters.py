"""Drafters: strategies that propose the next γ tokens (a draft model, or n-gram prompt lookup)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from specviz.engine.kv_cache import CachedDecoder, rollback_to_accepted
from specviz.engine.sampling import SamplingSettings, sample, warp


@dataclass
class Proposal:
    token_ids: list[int]
    draft_probs: torch.Tensor | None  # (k, vocab) q_i as sampled from; None: deterministic (q is one-hot)
    draft_logits: torch.Tensor | None  # (k, vocab), for display
    n_forwards: int


class Drafter(Protocol):
    name: str

    def start(self, prompt_ids: list[int]) -> None:
        """Forget the last run and read the prompt."""

    def propose(self, committed: list[int], gamma: int, settings: SamplingSettings, generator: torch.Generator) -> Proposal:
        """Propose up to γ tokens to follow `committed`."""

    def rollback(self, committed: list[int]) -> None:
        """Drop whatever state the target rejected."""


class ModelDrafter:
    """A small causal LM sampled autoregressively through its own KV cache."""

    name = "model"

    def __init__(self, decoder: CachedDecoder) -> None:
        self.decoder = decoder

    def start(self, prompt_ids: list[int]) -> None:
        self.decoder.reset()
        if len(prompt_ids) > 1:
            self.decoder.feed(prompt_ids[:-1])

    def propose(self, committed: list[int], gamma: int, settings: SamplingSettings, generator: torch.Generator) -> Proposal:
        if gamma == 0:
            return Proposal([], None, None, 0)
        pending: list[int] | torch.Tensor = committed[self.decoder.cached_length :]
        tokens, probs_rows, logits_rows = [], [], []
        for _ in range(gamma):
            logits = self.decoder.feed(pending)  # (1, vocab)
            probs = warp(logits, settings)
            token = sample(probs, settings, generator)  # (1,), stays on the device: no sync per step
            tokens.append(token)
            probs_rows.append(probs)
            logits_rows.append(logits)
            pending = token
        return Proposal(torch.cat(tokens).tolist(), torch.cat(probs_rows), torch.cat(logits_rows), gamma)

    def rollback(self, committed: list[int]) -> None:
        rollback_to_accepted(self.decoder, committed)


class PromptLookupDrafter:
    """No model: find the latest earlier occurrence of the last n-gram and propose what followed it."""

    name = "lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def start(self, prompt_ids: list[int]) -> None:
        pass

    def propose(self, committed: list[int], gamma: int, settings: SamplingSettings, generator: torch.Generator) -> Proposal:
        return Proposal(lookup_continuation(committed, gamma, self.max_ngram, self.min_ngram), None, None, 0)

    def rollback(self, committed: list[int]) -> None:
        pass


def lookup_continuation(tokens: list[int], gamma: int, max_ngram: int, min_ngram: int) -> list[int]:
    """Up to γ tokens that followed the most recent earlier match of the longest possible suffix n-gram."""
    if gamma == 0:
        return []
    for n in range(min(max_ngram, len(tokens) - 1), min_ngram - 1, -1):
        suffix = tokens[-n:]
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start : start + n] == suffix:
                return tokens[start + n : start + n + gamma]
    return []
