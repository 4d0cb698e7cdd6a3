"""Chat prompts for distilling a draft for an instruction-tuned target: topics × request templates.

The training set is every template applied to every topic, in a fixed shuffled order. The held-out set
(specviz/prompts/sets.py, CHAT_HELDOUT) uses topics and phrasings that appear nowhere in it, so α measured there
is α on prompts the draft never saw (tests/test_chat_prompts.py checks that they do not overlap). The topics and
templates are data, in prompt_data/topics.json.
"""

from __future__ import annotations

import functools
import random
import re

from specviz.prompts.sets import CHAT_HELDOUT
from specviz.training.everyday_prompts import everyday_prompts, prompt_data, world_prompts

_TOPIC_DATA = prompt_data("topics")
TOPICS: list[str] = [topic for group in _TOPIC_DATA["topics"].values() for topic in group]  # by group: science, technology, ...
TEMPLATES: list[str] = _TOPIC_DATA["templates"]


def topic_prompts(seed: int = 0) -> list[str]:
    """Every template applied to every topic, shuffled with a fixed seed."""
    prompts = [template.format(topic=topic) for topic in TOPICS for template in TEMPLATES]
    random.Random(seed).shuffle(prompts)
    return prompts


def training_prompts() -> list[str]:
    """The topic prompts, the everyday requests, then the wider world: in this order, so answers collected for the
    earlier parts still line up."""
    return topic_prompts() + everyday_prompts() + world_prompts()


def word_runs(text: str, length: int = 4) -> set[tuple[str, ...]]:
    """Every run of `length` words in `text`, lower-cased."""
    words = re.findall(r"[a-z']+", text.lower())
    return {tuple(words[start : start + length]) for start in range(len(words) - length + 1)}


def copies_a_held_out_phrase(prompt: str) -> bool:
    """Whether `prompt` shares four words in a row with a held-out chat question (specviz/prompts/sets.py)."""
    return bool(word_runs(prompt) & _held_out_runs())


@functools.cache
def _held_out_runs() -> frozenset[tuple[str, ...]]:
    return frozenset().union(*(word_runs(prompt) for prompt in CHAT_HELDOUT))
