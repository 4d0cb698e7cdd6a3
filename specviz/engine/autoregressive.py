"""The baseline: plain autoregressive decoding of the target, same sampling pipeline and seed semantics."""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch

from specviz.engine.events import Event, Step, Summary
from specviz.engine.kv_cache import CachedDecoder
from specviz.engine.sampling import draw
from specviz.engine.settings import DecodeSettings, StopCheck, never_stop
from specviz.engine.start import prefill, run_started
from specviz.engine.vocabulary import Vocabulary


def autoregressive_decode(
    target: CachedDecoder,
    prompt_ids: list[int],
    settings: DecodeSettings,
    vocabulary: Vocabulary,
    should_stop: StopCheck = never_stop,
) -> Iterator[Event]:
    """Yield RunStarted, one Step per target forward, then a Summary."""
    generator = torch.Generator(device=target.device).manual_seed(settings.seed)
    prefill_s = prefill(target, prompt_ids)
    yield run_started("autoregressive", prompt_ids, settings, vocabulary, "none", prefill_s, target.engine, target.rows_exact)

    new_ids: list[int] = []
    last_token = prompt_ids[-1]
    decode_s = 0.0
    stop_reason = "max_new_tokens"
    while len(new_ids) < settings.max_new_tokens:
        if should_stop():
            stop_reason = "stopped"
            break
        step_start = time.perf_counter()
        logits = target.feed([last_token])  # (1, vocab)
        last_token = int(draw(logits, settings.sampling, generator)[0].item())
        step_s = time.perf_counter() - step_start
        decode_s += step_s
        new_ids.append(last_token)
        piece = vocabulary.pieces(prompt_ids + new_ids[:-1], [last_token])[0]
        yield Step(index=len(new_ids) - 1, token_id=last_token, text=piece, step_s=step_s)
        if last_token in vocabulary.end_token_ids:
            stop_reason = "eos"
            break

    yield Summary(
        mode="autoregressive",
        new_token_ids=tuple(new_ids),
        text=vocabulary.text(new_ids),
        wall_s=prefill_s + decode_s,
        prefill_s=prefill_s,
        stop_reason=stop_reason,
        step_s=decode_s / len(new_ids) if new_ids else 0.0,
    )
