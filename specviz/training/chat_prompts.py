"""Chat prompts for distilling a draft for an instruction-tuned target: topics × request templates.

The training set is every template applied to every topic, in a fixed shuffled order. The held-out set
(specviz/prompts/sets.py, CHAT_HELDOUT) uses topics and phrasings that appear nowhere in it, so α measured there
is α on prompts the draft never saw (tests/test_chat_prompts.py checks that they do not overlap).
"""

from __future__ import annotations

import functools
import random
import re

from specviz.prompts.sets import CHAT_HELDOUT
from specviz.training.everyday_prompts import everyday_prompts, world_prompts

TOPICS = [
    # science and nature
    "photosynthesis",
    "black holes",
    "volcanoes",
    "the water cycle",
    "gravity",
    "DNA",
    "vaccines",
    "earthquakes",
    "the moon's phases",
    "climate change",
    "electricity",
    "magnets",
    "the human heart",
    "bees",
    "rainbows",
    "tides",
    "the immune system",
    "dinosaurs",
    "coral reefs",
    "the periodic table",
    "sound waves",
    "the speed of light",
    "evolution",
    "clouds",
    "glaciers",
    "the solar system",
    "atoms",
    "bacteria",
    "sleep",
    "the brain",
    "rainforests",
    "deserts",
    "whales",
    "mushrooms",
    "comets",
    # technology
    "the internet",
    "smartphones",
    "artificial intelligence",
    "solar panels",
    "electric cars",
    "email",
    "passwords",
    "cloud computing",
    "3D printing",
    "GPS",
    "batteries",
    "robots",
    "video games",
    "social media",
    "search engines",
    "computer viruses",
    "the printing press",
    "the telephone",
    "spreadsheets",
    "programming",
    "databases",
    "open source software",
    "wind turbines",
    "satellites",
    # everyday life
    "cooking pasta",
    "baking bread",
    "saving money",
    "exercise",
    "drinking water",
    "time management",
    "learning a new language",
    "gardening",
    "recycling",
    "public speaking",
    "job interviews",
    "writing a resume",
    "making friends",
    "reading books",
    "meditation",
    "camping",
    "travelling on a budget",
    "keeping a journal",
    "cleaning the kitchen",
    "taking care of a dog",
    "growing tomatoes",
    "coffee",
    "tea",
    "breakfast",
    "running",
    "swimming",
    "chess",
    "photography",
    "painting",
    "playing the guitar",
    # history and society
    "the Roman Empire",
    "ancient Egypt",
    "the Renaissance",
    "the Industrial Revolution",
    "democracy",
    "the Olympic Games",
    "the Great Wall of China",
    "the invention of writing",
    "money",
    "libraries",
    "museums",
    "the first airplane",
    "the Silk Road",
    "castles",
    "pirates",
    "the Vikings",
    "trains",
    # ideas
    "friendship",
    "kindness",
    "curiosity",
    "patience",
    "honesty",
    "teamwork",
    "creativity",
    "happiness",
    "failure",
    "habits",
    "leadership",
    "critical thinking",
    "music",
    "poetry",
    "mathematics",
    "statistics",
]

TEMPLATES = [
    "Explain {topic} in simple terms.",
    "What is {topic}?",
    "Give me three interesting facts about {topic}.",
    "Write a short paragraph about {topic}.",
    "Why is {topic} important?",
    "How does {topic} work?",
    "Describe {topic} to a ten-year-old.",
    "What are the pros and cons of {topic}?",
    "Write a haiku about {topic}.",
    "Summarize the history of {topic} in a few sentences.",
    "What is a common misconception about {topic}?",
    "Give me some tips about {topic}.",
    "Write a short story that involves {topic}.",
    "What should a beginner know about {topic}?",
    "Tell me something surprising about {topic}.",
    "Write a tweet about {topic}.",
    "List five words related to {topic}.",
    "How would you teach {topic} to a class?",
]


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
