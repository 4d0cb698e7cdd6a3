"""What needs torch: step costs per batch size, timed on a device, and CUDA's peak allocator.

Every other module of specviz.deployment is plain Python, numpy and plotly, so the app's page can import them
without loading torch; this one is imported only where models are already loaded.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache, PreTrainedModel

from specviz.analysis.timing import Forward, fastest_seconds
from specviz.deployment.batch import BATCH_SIZES, BatchRow, BatchStepCosts, batch_rows
from specviz.engine.kv_cache import synchronize


def _prefilled_cache(model: PreTrainedModel, prefix: torch.Tensor) -> DynamicCache:
    """A KV cache holding `prefix` (batch, length), filled by the model's plain forward."""
    cache = DynamicCache(config=model.config)
    model(input_ids=prefix, cache=cache, use_cache=True, logits_to_keep=1)
    return cache


def _feeder(model: PreTrainedModel, cache: DynamicCache, new_ids: torch.Tensor) -> Forward:
    """A forward over `new_ids` (batch, k) after the cached prefix, and the undo that crops the cache back to the prefix."""
    length = cache.get_seq_length()

    def forward() -> None:
        model(input_ids=new_ids, cache=cache, use_cache=True, logits_to_keep=new_ids.shape[1])

    def undo() -> None:
        cache.crop(-(cache.get_seq_length() - length))  # transformers' crop takes the count to drop, negated

    return forward, undo


@torch.inference_mode()
def measure_batch_costs(
    target: PreTrainedModel,
    draft: PreTrainedModel,
    vocab_size: int,
    gamma: int,
    batches: Sequence[int] = BATCH_SIZES,
    context: int = 64,
    repeats: int = 5,
    seed: int = 0,
) -> list[BatchStepCosts]:
    """At each batch size: a draft step, a target step and a (γ + 1)-token verify pass after a `context`-token prefix.

    Token ids are random (their values do not change the cost); the three forwards are timed by the one step timer
    (analysis/timing.py:fastest_seconds): interleaved round by round, each the fastest of `repeats` rounds, synchronised.
    """
    device = target.device
    generator = torch.Generator().manual_seed(seed)
    costs = []
    for batch in batches:
        ids = torch.randint(0, vocab_size, (batch, context + gamma + 1), generator=generator).to(device)
        prefix, pending = ids[:, :context], ids[:, context:]  # (batch, context), (batch, γ + 1)
        target_cache, draft_cache = _prefilled_cache(target, prefix), _prefilled_cache(draft, prefix)
        forwards = (
            _feeder(draft, draft_cache, pending[:, :1]),  # a draft step
            _feeder(target, target_cache, pending[:, :1]),  # a target step
            _feeder(target, target_cache, pending),  # a verify pass over γ + 1 tokens
        )
        draft_step_s, target_step_s, verify_s = fastest_seconds(forwards, device, repeats)
        costs.append(BatchStepCosts(batch, draft_step_s, target_step_s, verify_s))
        del target_cache, draft_cache
    return costs


def reset_cuda_peak(device: torch.device) -> None:
    """Start a fresh peak count on a CUDA device (nothing elsewhere)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def cuda_peak_bytes(device: torch.device) -> int | None:
    """CUDA's allocator peak since the last reset, in bytes; None off CUDA (estimate from the tensors there)."""
    if device.type != "cuda":
        return None
    synchronize(device)
    return int(torch.cuda.max_memory_allocated(device))


def measure_batches(pair, gamma: int, batches: Sequence[int], alpha: float, repeats: int = 5) -> list[BatchRow]:
    """Step costs timed at each batch size on the pair's own weights, and the speedup they predict at α."""
    costs = measure_batch_costs(pair.target.model, pair.draft.model, pair.shared_vocab_size, gamma, batches, repeats=repeats)
    return batch_rows(costs, alpha, gamma)
