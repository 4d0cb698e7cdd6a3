"""Both methods over a prompt set, request by request: what `run` and `report` time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specviz.deployment.benchmark import MethodResult
from specviz.deployment.peaks import PeakTracker
from specviz.engine import DecodeSettings
from specviz.models.loading import LoadedPair
from specviz.run.runner import encode_prompt, run


@dataclass
class Requests:
    """Both methods over a prompt set, request by request (repeat-major): each one's latencies and summaries."""

    speculative: MethodResult = field(default_factory=lambda: MethodResult("speculative", None))
    autoregressive: MethodResult = field(default_factory=lambda: MethodResult("autoregressive", None))
    longest_length: int = 0  # prompt + new tokens, the longest any request reached


def run_requests(
    pair: LoadedPair,
    prompts: Sequence[str],
    settings: DecodeSettings,
    repeats: int,
    drafter: str = "model",
    peaks: PeakTracker | None = None,
    log: Callable[[str], None] = lambda line: None,
) -> Requests:
    """Every prompt `repeats` times by both methods, alternating which runs first (a slow drift hits both alike)."""
    requests = Requests()
    for repeat in range(repeats):
        for index, prompt in enumerate(prompts):
            length = len(encode_prompt(pair, prompt, settings.max_new_tokens, settings.gamma))
            order = ("autoregressive", "speculative") if (repeat + index) % 2 else ("speculative", "autoregressive")
            for mode in order:
                request = lambda mode=mode, prompt=prompt: list(run(pair, prompt, settings, mode=mode, drafter=drafter))  # noqa: E731
                summary = getattr(requests, mode).add(peaks.around(mode, request) if peaks else request())
                requests.longest_length = max(requests.longest_length, length + summary.new_tokens)
        log(f"  repeat {repeat + 1}/{repeats} done")
    return requests
