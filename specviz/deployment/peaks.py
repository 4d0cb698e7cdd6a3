"""A pair's memory as measured: CUDA's allocator peaks around each request where there are any, else the estimate."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from specviz.deployment.device import cuda_peak_bytes, reset_cuda_peak
from specviz.deployment.memory import MemoryReport, ModelMemory, estimated_memory_report
from specviz.models.loading import LoadedPair

CUDA_PEAK = "cuda max_memory_allocated"
ESTIMATED = "estimated from tensors"


def model_memory(pair: LoadedPair) -> tuple[ModelMemory, ModelMemory]:
    """Each model's weight bytes and KV-cache bytes per token, in the pair's dtype."""
    return tuple(
        ModelMemory.of(loaded.reference, loaded.model.config, loaded.parameters, pair.dtype)
        for loaded in (pair.target, pair.draft)
    )


def memory_report(pair: LoadedPair, longest_length: int, gamma: int, peaks: Mapping | None = None) -> MemoryReport:
    """The pair's memory: CUDA's measured peaks when given ({"speculative": b, "autoregressive": b}), else the estimate."""
    target, draft = model_memory(pair)
    if peaks and peaks.get("speculative") and peaks.get("autoregressive"):
        return MemoryReport(target, draft, peaks["autoregressive"], peaks["speculative"], CUDA_PEAK)
    config = (pair.target.model.config, pair.draft.model.config)
    return estimated_memory_report(target, draft, *config, pair.dtype, longest_length, gamma)


@dataclass
class PeakTracker:
    """CUDA's allocator peak per method over many requests; on a CPU it stays empty and the report estimates.

    The draft's weights stay resident while the target runs alone, so the autoregressive peak is read minus them:
    what a deployment of the target alone would hold.
    """

    device: torch.device
    draft_weight_bytes: int
    peaks: dict[str, int] = field(default_factory=dict)

    def around(self, mode: str, request: Callable[[], list]) -> list:
        reset_cuda_peak(self.device)
        events = request()
        peak = cuda_peak_bytes(self.device)
        if peak is not None:
            if mode == "autoregressive":
                peak -= self.draft_weight_bytes
            self.peaks[mode] = max(self.peaks.get(mode, 0), peak)
        return events
