"""The registry of drafting strategies: the one place a drafter is named, for the runner, CLI, bench and app.

A new strategy is one Drafter class (specviz/drafting/drafters.py) plus one `register(Strategy(...))` line
here; docs/architecture.md, "Adding a drafter", walks through it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specviz import engine  # its names load on first use (PEP 562): listing the strategies loads no torch
from specviz.engine.settings import SettingsError

if TYPE_CHECKING:  # the app lists the strategies before transformers is imported; the classes load on first build
    from specviz.drafting.drafters import Drafter
    from specviz.engine import CachedDecoder
    from specviz.models.loading import LoadedPair

DYNAMIC_THRESHOLD = 0.4  # transformers' default assistant_confidence_threshold
DYNAMIC_MAX_WINDOW = 20  # transformers' default num_assistant_tokens


@dataclass(frozen=True)
class Twin:
    """The same strategy in transformers' generate(): for bench's side-by-side rows."""

    generate_kwargs: dict = field(default_factory=dict)  # passed to target.generate (besides the assistant model)
    assistant_config: dict = field(default_factory=dict)  # set on the draft's generation_config for the call
    uses_draft_model: bool = True


@dataclass(frozen=True)
class Strategy:
    key: str  # what --drafter and runner.run(drafter=...) take
    label: str  # what the app's choice shows
    build: Callable[[LoadedPair, bool], Drafter]  # (pair, for token trees) → a fresh drafter
    needs_draft_model: bool = True
    transformers_twin: Callable[[int], Twin] | None = None  # γ → the equivalent transformers settings
    grows_trees: bool = False  # the strategy can draft token trees as well as chains


STRATEGIES: dict[str, Strategy] = {}


def register(strategy: Strategy) -> Strategy:
    STRATEGIES[strategy.key] = strategy
    return strategy


def _drafters():
    from specviz.drafting import drafters  # torch loads with the first drafter built, not when the strategies are listed

    return drafters


def draft_decoder(pair: LoadedPair) -> CachedDecoder:
    from specviz.engine.compiled import decoder_for

    if pair.draft is None:
        raise SettingsError(f"{pair.name} has no draft model: choose the feature or lookup drafter")
    return decoder_for(pair.draft.model, pair.shared_vocab_size)


def _assisted(gamma: int, schedule: str = "constant", threshold: float = 0.0) -> Twin:
    return Twin(
        assistant_config={
            "num_assistant_tokens": gamma,
            "num_assistant_tokens_schedule": schedule,
            "assistant_confidence_threshold": threshold,
        }
    )


register(
    Strategy(
        "model",
        "Draft model, fixed γ",
        lambda pair, tree: _drafters().ModelDrafter(draft_decoder(pair)),
        transformers_twin=_assisted,
        grows_trees=True,
    )
)
register(
    Strategy(
        "adaptive",
        "Draft model, adaptive γ (+2 after a full accept, −1 otherwise)",
        lambda pair, tree: engine.AdaptiveGamma(_drafters().ModelDrafter(draft_decoder(pair))),
        transformers_twin=lambda gamma: _assisted(gamma, schedule="heuristic_transient"),
    )
)
register(
    Strategy(
        "dynamic",
        f"Draft model, dynamic (stop below q = {DYNAMIC_THRESHOLD}, at most {DYNAMIC_MAX_WINDOW})",
        lambda pair, tree: _drafters().DynamicDrafter(draft_decoder(pair), DYNAMIC_THRESHOLD, DYNAMIC_MAX_WINDOW),
        transformers_twin=lambda gamma: _assisted(DYNAMIC_MAX_WINDOW, threshold=DYNAMIC_THRESHOLD),
    )
)


def head_drafter(eagle3: bool) -> Callable[[LoadedPair, bool], Drafter]:
    """The feature drafters over the pair's head: any feature head, or (eagle3) only one in EAGLE-3's standard form
    (models/eagle3_head.py: the same drafting interface). A tree drafts on the eager head, a chain on its compiled step."""

    def build(pair: LoadedPair, tree: bool = False) -> Drafter:
        head = pair.feature_head.head if pair.feature_head is not None else None
        if eagle3:
            from specviz.models.eagle3_head import Eagle3Head  # torch loads with the first drafter built

            if not isinstance(head, Eagle3Head):
                raise SettingsError(
                    f"{pair.name} has no EAGLE-3 head: choose another drafter, or a pair whose feature_head is an EAGLE-3 checkpoint"
                )
        elif head is None:
            raise SettingsError(
                f"{pair.name} has no feature head: choose another drafter, or a pair with one (its models.yaml entry names a feature_head)"
            )
        return _drafters().FeatureDrafter(head, pair.shared_vocab_size, compiled=not tree)

    return build


register(
    Strategy(
        "feature",
        "Feature head (EAGLE-style: reads the target's last hidden state)",
        head_drafter(eagle3=False),
        needs_draft_model=False,
        grows_trees=True,
    )
)
register(
    Strategy(
        "eagle3",
        "EAGLE-3 head (reads the target's low, mid and high layers; the standard checkpoint llama.cpp and vLLM load)",
        head_drafter(eagle3=True),
        needs_draft_model=False,
        grows_trees=True,
    )
)
register(
    Strategy(
        "lookup",
        "Prompt lookup (no draft model)",
        lambda pair, tree: _drafters().PromptLookupDrafter(),
        needs_draft_model=False,
        transformers_twin=lambda gamma: Twin(
            generate_kwargs={"prompt_lookup_num_tokens": gamma, "max_matching_ngram_size": 3}, uses_draft_model=False
        ),
        grows_trees=True,
    )
)


def drafter_keys() -> list[str]:
    return list(STRATEGIES)


def drafter_choices() -> list[tuple[str, str]]:
    """(label, key) pairs, in registration order: what a gr.Radio or gr.Dropdown takes as `choices`."""
    return [(strategy.label, strategy.key) for strategy in STRATEGIES.values()]


def strategy(key: str) -> Strategy:
    if key not in STRATEGIES:
        raise SettingsError(f"unknown drafter {key!r}: choose one of {', '.join(STRATEGIES)}")
    return STRATEGIES[key]


def make_drafter(pair: LoadedPair, key: str, tree: bool = False) -> Drafter:
    """A fresh drafter for one run, for token trees if `tree` (the engine wraps it in the adaptive-γ schedule when the
    settings ask for it)."""
    chosen = strategy(key)
    if tree and not chosen.grows_trees:
        raise SettingsError(f"the {key} drafter drafts chains only: token trees need one of {', '.join(tree_drafter_keys())}")
    return chosen.build(pair, tree)


def tree_drafter_keys() -> list[str]:
    """The strategies that can grow token trees."""
    return [key for key, chosen in STRATEGIES.items() if chosen.grows_trees]
