"""From a loaded pair, a prompt and settings to a stream of engine events: the one entry point for CLI and UI."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from specviz import engine  # its names load on first use (PEP 562): importing the runner loads no torch
from specviz.drafting.registry import make_drafter
from specviz.engine.events import Event
from specviz.engine.settings import DecodeSettings, StopCheck, never_stop

if TYPE_CHECKING:
    from specviz.models.loading import LoadedPair

MAX_PROMPT_CHARS = 20_000
DrafterKind = str  # a key of specviz.drafting.registry.STRATEGIES: "model", "adaptive", "dynamic", "lookup", ...


class PromptError(ValueError):
    """An unusable prompt; the message is one sentence for the user."""


def check_prompt_text(prompt: str) -> None:
    """The checks that need no model, so a bad prompt is answered before any loading or waiting."""
    if not prompt or not prompt.strip():
        raise PromptError("The prompt is empty: type something for the models to continue.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise PromptError(f"The prompt is {len(prompt):,} characters; the limit is {MAX_PROMPT_CHARS:,}.")


def encode_prompt(pair: LoadedPair, prompt: str, max_new_tokens: int, gamma: int) -> list[int]:
    """Token ids of the prompt (through the chat template if the pair uses one), checked against the context, which
    must also hold `gamma` drafted tokens (a token tree: its nodes) in the verify pass."""
    check_prompt_text(prompt)
    tokenizer = pair.tokenizer
    if pair.chat_template and tokenizer.chat_template:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    else:
        ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    budget = pair.context_length - max_new_tokens - gamma - 1
    if len(ids) > budget:
        raise PromptError(
            f"The prompt is {len(ids):,} tokens; with {max_new_tokens} new tokens and {gamma} drafted per cycle it must stay under "
            f"{max(budget, 0):,} tokens to fit the models' context of {pair.context_length:,}."
        )
    return list(ids)


def run(
    pair: LoadedPair,
    prompt: str,
    settings: DecodeSettings,
    mode: Literal["speculative", "autoregressive"] = "speculative",
    drafter: DrafterKind = "model",
    should_stop: StopCheck = never_stop,
) -> Iterator[Event]:
    """Validate everything first, then stream the engine's events."""
    settings.validate()
    tree = settings.tree if mode == "speculative" else None
    drafter_made = make_drafter(pair, drafter, tree is not None) if mode == "speculative" else None  # an unknown key fails here
    prompt_ids = encode_prompt(pair, prompt, settings.max_new_tokens, settings.drafted_per_cycle)
    from specviz.engine.compiled import decoder_for  # torch loads here, with the pair

    target = decoder_for(pair.target.model, pair.shared_vocab_size)  # the fast path where the pair has it
    if mode == "autoregressive":
        return engine.autoregressive_decode(target, prompt_ids, settings, pair.vocabulary, should_stop)
    return engine.speculative_decode(target, drafter_made, prompt_ids, settings, pair.vocabulary, should_stop)
