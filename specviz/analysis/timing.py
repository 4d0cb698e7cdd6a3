"""One draft step, one target step and one verify pass, timed on this device: shared by `score` and `hardware`.

What the theory needs from a machine is two ratios (τ and ν), and both are measured here the way the
engine runs: through the KV cache, after a short prefix, synchronised with the device, fastest of repeats.
"""

from __future__ import annotations

import time
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


def _timed_feed(decoder: CachedDecoder, new_ids: list[int]) -> float:
    """Seconds to feed `new_ids` after what is cached; the cache is cropped back afterwards."""
    length = decoder.cached_length
    synchronize(decoder.device)
    started = time.perf_counter()
    decoder.feed(new_ids, keep_last=len(new_ids))
    synchronize(decoder.device)
    elapsed = time.perf_counter() - started
    decoder.truncate(length)
    return elapsed


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

    The three measurements are interleaved round by round, and each keeps its fastest round (as timeit
    does): other work on a shared machine only ever adds time, so the minimum is the steadiest estimate
    of the models' own cost. The first round only warms kernels and allocators up.
    """
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (context + gamma + 1,), generator=generator).tolist()
    prefix, pending = ids[:context], ids[context:]
    target_decoder, draft_decoder = decoder_for(target, vocab_size), decoder_for(draft, vocab_size)
    target_decoder.feed(prefix)
    draft_decoder.feed(prefix)
    draft_s, step_s, verify_s = [], [], []
    for _ in range(repeats + 1):
        draft_s.append(_timed_feed(draft_decoder, pending[:1]))
        step_s.append(_timed_feed(target_decoder, pending[:1]))
        verify_s.append(_timed_feed(target_decoder, pending))
    return StepTimes(
        draft_step_s=min(draft_s[1:]),
        target_step_s=min(step_s[1:]),
        verify_s=min(verify_s[1:]),
        gamma=gamma,
        context=context,
        repeats=repeats,
    )


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
