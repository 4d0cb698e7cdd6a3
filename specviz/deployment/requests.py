"""Both methods over a prompt set, request by request, and token trees beside them where asked: what `report` times."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from specviz.deployment.benchmark import MethodResult
from specviz.deployment.peaks import PeakTracker
from specviz.engine import DecodeSettings
from specviz.engine.tree_shape import TreeShape
from specviz.models.loading import LoadedPair
from specviz.run.runner import encode_prompt, run


@dataclass
class Requests:
    """Both methods over a prompt set, request by request (repeat-major): each one's latencies and summaries."""

    speculative: MethodResult = field(default_factory=lambda: MethodResult("speculative", None))
    autoregressive: MethodResult = field(default_factory=lambda: MethodResult("autoregressive", None))
    trees: dict[str, MethodResult] = field(default_factory=dict)  # per tree shape ("2x2x1:1"), speculative
    longest_length: int = 0  # prompt + new tokens, the longest any request reached


def run_requests(
    pair: LoadedPair,
    prompts: Sequence[str],
    settings: DecodeSettings,
    repeats: int,
    drafter: str = "model",
    peaks: PeakTracker | None = None,
    trees: Sequence[TreeShape] = (),
    log: Callable[[str], None] = lambda line: None,
) -> Requests:
    """Every prompt `repeats` times by both methods, alternating which runs first (a slow drift hits both alike), then
    by each token tree (untracked for memory); each method's first-repeat outputs kept for the exactness check."""
    requests = Requests(trees={shape.text: MethodResult("speculative-tree", None, tree=shape.text) for shape in trees})
    for repeat in range(repeats):
        for index, prompt in enumerate(prompts):
            length = len(encode_prompt(pair, prompt, settings.max_new_tokens, settings.gamma))
            order = ("autoregressive", "speculative") if (repeat + index) % 2 else ("speculative", "autoregressive")
            for mode in order:
                request = lambda mode=mode, prompt=prompt: list(run(pair, prompt, settings, mode=mode, drafter=drafter))  # noqa: E731
                result = getattr(requests, mode)
                summary = result.add(peaks.around(mode, request) if peaks else request())
                requests.longest_length = max(requests.longest_length, length + summary.new_tokens)
                if repeat == 0:
                    result.outputs.append(list(summary.new_token_ids))
            for shape in trees:
                result = requests.trees[shape.text]
                summary = result.add(list(run(pair, prompt, replace(settings, tree=shape), drafter=drafter)))
                if repeat == 0:
                    result.outputs.append(list(summary.new_token_ids))
        log(f"  repeat {repeat + 1}/{repeats} done")
    return requests
