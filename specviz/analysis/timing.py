"""One draft step, one target step and one verify pass, timed on this device: shared by `score` and `hardware`.

What the theory needs from a machine is two ratios (τ and ν), and both are measured here the way the
engine runs: through the KV cache, after a short prefix, synchronised with the device, fastest of repeats
(fastest_seconds: the one step timer, also behind deployment/device.py's batch costs).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from specviz.analysis.readings import Readings, readings_of_steps
from specviz.engine import CachedDecoder
from specviz.engine.compiled import decoder_for
from specviz.engine.kv_cache import synchronize


@dataclass(frozen=True)
class StepTimes:
    draft_step_s: float  # the draft over one token
    target_step_s: float  # the target over one token: an autoregressive step
    verify_s: float  # the target over γ + 1 tokens: one verify pass
    gamma: int
    context: int  # tokens already in the cache when timed
    repeats: int


Forward = tuple[Callable[[], object], Callable[[], None]]  # what is timed, and what undoes it after (untimed)


def fastest_seconds(forwards: Sequence[Forward], device: torch.device, repeats: int) -> list[float]:
    """Each forward's fastest of `repeats` rounds, interleaved round by round, after a warm-up round: the one step timer.

    Each keeps its fastest round (as timeit does): other work on a shared machine only ever adds time, so the
    minimum is the steadiest estimate of the models' own cost. Interleaving makes a slow drift hit all alike, and
    the clock stops only after the device has finished (synchronised), before the undo runs.
    """
    seconds: list[list[float]] = [[] for _ in forwards]
    for _ in range(repeats + 1):
        for (forward, undo), timings in zip(forwards, seconds):
            synchronize(device)
            started = time.perf_counter()
            forward()
            synchronize(device)
            timings.append(time.perf_counter() - started)
            undo()
    return [min(timings[1:]) for timings in seconds]


def _feed(decoder: CachedDecoder, new_ids: list[int]) -> Forward:
    """Feed `new_ids` after what is cached; the undo crops the cache back."""
    length = decoder.cached_length
    return (lambda: decoder.feed(new_ids, keep_last=len(new_ids))), (lambda: decoder.truncate(length))


@torch.inference_mode()
def measure_step_times(
    target: PreTrainedModel,
    draft: PreTrainedModel,
    vocab_size: int,
    gamma: int,
    context: int = 64,
    repeats: int = 20,
    seed: int = 0,
) -> StepTimes:
    """Time both models as the engine runs them, on random token ids (their values do not change the cost).

    A draft step, a target step and a verify pass, each the fastest of `repeats` rounds (fastest_seconds).
    """
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (context + gamma + 1,), generator=generator).tolist()
    prefix, pending = ids[:context], ids[context:]
    target_decoder, draft_decoder = decoder_for(target, vocab_size), decoder_for(draft, vocab_size)
    target_decoder.feed(prefix)
    draft_decoder.feed(prefix)
    forwards = (_feed(draft_decoder, pending[:1]), _feed(target_decoder, pending[:1]), _feed(target_decoder, pending))
    draft_s, step_s, verify_s = fastest_seconds(forwards, target_decoder.device, repeats)
    return StepTimes(
        draft_step_s=draft_s,
        target_step_s=step_s,
        verify_s=verify_s,
        gamma=gamma,
        context=context,
        repeats=repeats,
    )


@torch.inference_mode()
def measure_pass_seconds(
    target: PreTrainedModel, vocab_size: int, max_rows: int, context: int = 64, repeats: int = 10, seed: int = 0
) -> dict[int, float]:
    """A target pass over k rows after `context` cached tokens, for k = 1 … max_rows, as the engine feeds a verify pass:
    each the fastest of `repeats` rounds, every size in every round (fastest_seconds). k = 1 is one target step."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (context + max_rows,), generator=generator).tolist()
    decoder = decoder_for(target, vocab_size)
    decoder.feed(ids[:context])
    sizes = range(1, max_rows + 1)
    seconds = fastest_seconds([_feed(decoder, ids[context : context + rows]) for rows in sizes], decoder.device, repeats)
    return dict(zip(sizes, seconds))


def predicted(times: StepTimes, alpha: float | None, gamma: int | None = None) -> Readings:
    """What the theory predicts on this device at this α (None: τ and ν only)."""
    return readings_of_steps(times.draft_step_s, times.target_step_s, times.verify_s, gamma or times.gamma, alpha)


_measured: dict[tuple[str, int], StepTimes] = {}


def pair_step_times(pair, gamma: int, repeats: int = 10) -> StepTimes:
    """A loaded pair's step times at γ, measured once per process (the app's scorecard reuses them)."""
    key = (pair.name, gamma)
    if key not in _measured:
        _measured[key] = measure_step_times(pair.target.model, pair.draft.model, pair.shared_vocab_size, gamma, repeats=repeats)
    return _measured[key]
