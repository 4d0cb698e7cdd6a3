"""Drafters: strategies that propose the next tokens, and learn from what the target accepts.

Each is a specviz.engine.drafter.Drafter (the interface the engine calls); a draft model, dynamic
(confidence-stopped) drafting, an EAGLE-style feature head and n-gram prompt lookup live here, and
specviz/drafting/registry.py names them; docs/architecture.md, "Adding a drafter", walks through it.
Every strategy is exact: what is proposed may depend on anything but the target's coming decision, and the
acceptance test is unchanged.
"""

from __future__ import annotations

import math

import torch

from specviz.engine.drafter import WINDOW_FULL, Drafter, Feedback, Proposal
from specviz.engine.kv_cache import CachedDecoder, rollback_to_accepted
from specviz.engine.sampling import SamplingSettings, display_probs, draw
from specviz.models.feature_head import FeatureCache
from specviz.models.head_fast_path import fast_head


class ModelDrafter(Drafter):
    """A small causal LM sampled autoregressively through its own KV cache.

    With a confidence threshold it drafts dynamically: it stops after a draft whose probability
    under q falls below the threshold (transformers' `assistant_confidence_threshold`).
    """

    name = "model"

    def __init__(self, decoder: CachedDecoder, confidence_threshold: float | None = None) -> None:
        self.decoder = decoder
        self.confidence_threshold = confidence_threshold

    def start(self, prompt_ids: list[int], prompt_hidden_states: torch.Tensor | None = None) -> None:
        self.decoder.reset()
        if len(prompt_ids) > 1:
            self.decoder.feed(prompt_ids[:-1])

    def propose(self, committed: list[int], gamma: int, settings: SamplingSettings, generator: torch.Generator) -> Proposal:
        if gamma == 0:
            return Proposal([], None, None, 0, WINDOW_FULL)
        pending: list[int] | torch.Tensor = committed[self.decoder.cached_length :]
        tokens, probs_rows, logits_rows = [], [], []
        stop_reason = WINDOW_FULL
        for step in range(gamma):
            logits = self.decoder.feed(pending)  # (1, vocab)
            token, probs = draw(logits, settings, generator)  # (1,), stays on the device: no sync per step
            tokens.append(token)
            probs_rows.append(probs)
            logits_rows.append(logits)
            pending = token
            if self.confidence_threshold is not None and step + 1 < gamma:
                confidence = display_probs(logits, settings)[0, token].item()  # q(x) as shown; syncs once per draft
                if confidence < self.confidence_threshold:
                    shown = math.floor(confidence * 100) / 100  # rounded down, so the line never reads "0.40 < 0.40"
                    stop_reason = f"confidence {shown:.2f} < {self.confidence_threshold:.2f}"
                    break
        return Proposal(torch.cat(tokens).tolist(), _stacked(probs_rows), torch.cat(logits_rows), len(tokens), stop_reason)

    def rollback(self, committed: list[int]) -> None:
        rollback_to_accepted(self.decoder, committed)


class FeatureDrafter(Drafter):
    """An EAGLE-style head that drafts from the target's own last-layer features (specviz/models/feature_head.py).

    Head position i reads (f_{i-1}, x_i). Every committed position whose previous feature the target has computed
    is fed with true inputs; the first draft of a cycle is the output at the last committed token, and each
    further draft feeds back the head's own predicted feature. Rollback keeps only the true-input positions; the
    verify pass's features (`Feedback.target_hidden_states`) extend what is known for the next cycle.
    """

    name = "feature"
    wants_target_hidden_states = True

    def __init__(self, head, vocab_size: int, compiled: bool = True) -> None:
        self.head = head
        self.vocab_size = vocab_size
        self.fast = fast_head(head) if compiled else None  # the head's compiled draft step, where it has one
        self.target_hidden_layers = head.shape.feature_layers  # the last layer first, then any lower ones it fuses
        self.cache = None
        self.features: torch.Tensor | None = None  # (known, hidden): the target's feature after each committed token
        self.true_length = 0  # head positions fed with true features (the rest of the cache is this cycle's drafts)

    def start(self, prompt_ids: list[int], prompt_hidden_states: torch.Tensor | None = None) -> None:
        self.cache = self.fast.new_cache() if self.fast else FeatureCache()
        width = self.head.shape.feature_width
        device = self.head.kept_ids.device
        self.features = prompt_hidden_states if prompt_hidden_states is not None else torch.zeros(0, width, device=device)
        self.true_length = 0

    @torch.inference_mode()
    def propose(self, committed: list[int], gamma: int, settings: SamplingSettings, generator: torch.Generator) -> Proposal:
        if gamma == 0:
            return Proposal([], None, None, 0, WINDOW_FULL)
        # 1. catch up: head positions true_length+1 … len(committed)−1, each from (f_{i-1}, x_i), all true
        first, last = self.true_length + 1, len(committed) - 1
        if last < first:  # a one-token prompt: no feature yet (the first verify pass makes one)
            return Proposal([], None, None, 0, "no target feature yet")
        device = self.features.device
        token_ids = torch.tensor(committed[first : last + 1], dtype=torch.long, device=device)
        predicted, logits = self._step(token_ids, self.features[first - 1 : last])  # (1, hidden), (1, vocab)
        self.true_length = last
        # 2. draft: read out a token, feed back (f̂, x̂), γ times
        tokens, probs_rows, logits_rows = [], [], []
        for step in range(gamma):
            logits = logits[:, : self.vocab_size].float()
            token, probs = draw(logits, settings, generator)  # (1,)
            tokens.append(token)
            probs_rows.append(probs)
            logits_rows.append(logits)
            if step + 1 < gamma:  # the prediction stands in for the last layer; lower layers are unknown (zeros)
                predicted, logits = self._step(token, self.head.fed_back(predicted))
        return Proposal(torch.cat(tokens).tolist(), _stacked(probs_rows), torch.cat(logits_rows), len(tokens), WINDOW_FULL)

    def _step(self, token_ids: torch.Tensor, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed positions after the head's cache: f̂ at the last one (1, hidden) and its full-width logits (1, vocab)."""
        if self.fast is not None:
            return self.fast.draft_step(token_ids, features, self.cache)  # one compiled call (models/head_fast_path.py)
        predicted = self.head.step(token_ids, features, self.cache)[-1:]
        return predicted, self.head.logits(predicted)

    def rollback(self, committed: list[int]) -> None:
        self.cache.truncate(self.true_length)  # the drafts' positions go; the true-input ones stay

    def update(self, feedback: Feedback) -> None:
        """The verify pass computed f at the pending token and at each draft; those of accepted tokens are true."""
        known = len(feedback.committed) - 1  # features exist for every committed token but the target's new one
        fresh = feedback.target_hidden_states[: known - len(self.features)]
        self.features = torch.cat([self.features, fresh.to(self.features.dtype)])


class PromptLookupDrafter(Drafter):
    """No model: find the latest earlier occurrence of the last n-gram and propose what followed it."""

    name = "lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def propose(self, committed: list[int], gamma: int, settings: SamplingSettings, generator: torch.Generator) -> Proposal:
        tokens = lookup_continuation(committed, gamma, self.max_ngram, self.min_ngram)
        stop_reason = WINDOW_FULL if len(tokens) == gamma else ("no earlier match" if not tokens else "match ran out")
        return Proposal(tokens, None, None, 0, stop_reason)


class DynamicDrafter(ModelDrafter):
    """transformers' default assisted generation: up to 20 drafts, stopping after one with q(x) < 0.4."""

    name = "dynamic"

    def __init__(self, decoder: CachedDecoder, confidence_threshold: float = 0.4, max_window: int = 20) -> None:
        super().__init__(decoder, confidence_threshold)
        self.max_window = max_window

    def window(self, gamma: int) -> int:
        return self.max_window  # the confidence threshold, not γ, decides where a draft ends


def _stacked(probs_rows: list[torch.Tensor | None]) -> torch.Tensor | None:
    """q_1..q_k as one (k, vocab) tensor; None under greedy, where each q_i is one-hot on its draft."""
    return None if not probs_rows or probs_rows[0] is None else torch.cat(probs_rows)


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
