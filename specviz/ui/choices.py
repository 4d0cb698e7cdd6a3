"""What the page offers to choose from: the catalogue's pairs, the preset prompts, and which pairs load in the background.

The catalogue is read on first use (serving/pair_cache.py keeps it), never when a module is imported.
"""

from __future__ import annotations

import os

from specviz.prompts.sets import DOMAINS, PROMPTS
from specviz.serving import pair_cache
from specviz.ui.lessons import Lesson, lessons


def preset_choices() -> list[tuple[str, str]]:
    return [(f"{domain}: {prompt.splitlines()[0][:60]}", prompt) for domain in DOMAINS for prompt in PROMPTS[domain]]


def choice_label(name: str) -> str:
    pair = pair_cache.catalogue().get(name)
    fetched = "fetched on first start" if pair.preload else "fetched when first chosen"
    where = "bundled, offline" if pair.bundled else (f"real model, {fetched}" if pair.offline else "hub download")
    return f"{name} · {pair.description} ({where})"


def pair_choices() -> list[tuple[str, str]]:
    return [(choice_label(name), name) for name in pair_cache.catalogue().pairs]


def real_pairs() -> list[str]:
    """Pairs with a real pretrained target that reaches this machine without the hub: fetched in the background."""
    return [name for name, pair in pair_cache.catalogue().pairs.items() if pair.offline and not pair.bundled]


def background_pairs() -> list[str]:
    """What loads in the background after the default pair: the real pairs that preload (not the big ones, fetched on
    first use), unless SPECVIZ_BACKGROUND_PAIRS=0."""
    if os.environ.get("SPECVIZ_BACKGROUND_PAIRS", "1") == "0":
        return []
    return [name for name in real_pairs() if pair_cache.catalogue().get(name).preload]


def coder_pair() -> str | None:
    """The real pair fetched on first use (the Qwen2.5-Coder pair), for its lesson; None where the catalogue has none."""
    return next((name for name in real_pairs() if not pair_cache.catalogue().get(name).preload), None)


def plain_pair(default_pair: str) -> str:
    """The undistilled draft's pair for lesson 2, where the catalogue has it."""
    return "pycode-plain" if "pycode-plain" in pair_cache.catalogue().pairs else default_pair


def catalogue_lessons(default_pair: str) -> list[Lesson]:
    """The lessons, on this catalogue's pairs: the bundled ones, and the real pair where it reaches this machine."""
    real_pair = next((name for name in real_pairs() if pair_cache.catalogue().get(name).preload), None)
    real_gamma = pair_cache.catalogue().get(real_pair).start_gamma if real_pair else 1
    coder = coder_pair()
    coder_head = bool(coder and pair_cache.catalogue().get(coder).feature_head_ref)
    return lessons(default_pair, plain_pair(default_pair), real_pair, real_gamma, coder, coder_head)
