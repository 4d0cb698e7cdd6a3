"""What both decoders do first: prefill the prompt through the KV cache and announce the run."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

import torch

from specviz.engine.events import RunStarted
from specviz.engine.kv_cache import CachedDecoder, synchronize
from specviz.engine.settings import DecodeSettings
from specviz.engine.vocabulary import Vocabulary


def prefill(
    target: CachedDecoder,
    prompt_ids: list[int],
    also: Callable[[torch.Tensor | None], None] = lambda hidden_states: None,
    layers: tuple[int, ...] = (),
) -> float:
    """Feed all but the last prompt token (it is fed with the first step); return the synchronised seconds taken.

    `also` runs inside the timed section (the drafter reads the prompt there); with `with_hidden_states` it is
    handed the target's hidden states of `layers` at every fed position, (len(prompt_ids) − 1, hidden · layers), or None
    when no layers are asked for.
    """
    started = time.perf_counter()
    target.reset()
    hidden_states = None
    if len(prompt_ids) > 1 and layers:
        _, hidden_states = target.feed_with_hidden_states(
            prompt_ids[:-1], keep_last=1, hidden_last=len(prompt_ids) - 1, layers=layers
        )
    elif len(prompt_ids) > 1:
        target.feed(prompt_ids[:-1])
    also(hidden_states)
    synchronize(target.device)
    return time.perf_counter() - started


def run_started(
    mode: Literal["speculative", "autoregressive"],
    prompt_ids: list[int],
    settings: DecodeSettings,
    vocabulary: Vocabulary,
    drafter: str,
    prefill_s: float,
    engine: str = "",
    rows_exact: bool = True,
) -> RunStarted:
    speculative = mode == "speculative"
    return RunStarted(
        mode=mode,
        prompt_token_ids=tuple(prompt_ids),
        prompt_texts=tuple(vocabulary.pieces([], prompt_ids)),
        gamma=settings.gamma if speculative else 0,
        temperature=settings.sampling.temperature,
        top_k=settings.sampling.top_k,
        top_p=settings.sampling.top_p,
        seed=settings.seed,
        drafter=drafter,
        lenience=settings.lenience if speculative else 1.0,
        lossy=settings.lossy and speculative,
        adaptive_gamma=settings.adaptive_gamma and speculative,
        max_new_tokens=settings.max_new_tokens,
        prefill_s=prefill_s,
        engine=engine,
        verification=settings.verification if speculative else "exact",
        threads=torch.get_num_threads(),  # what the run was timed with: the page and `bench` must agree on it
        rows_exact=rows_exact,
    )
