"""Everyday chat requests, many shapes: the second, broader half of the prompts a chat draft is distilled on.

The first half (chat_prompts.py) asks 18 questions of 122 school topics, so a draft learns those phrasings
and little else: its agreement with the target was 0.55 on answers like them and 0.32 on new questions.
Here each family of request (how-to, why, compare, write, advise, recommend, compute, rewrite, code, ...)
has its own phrasings and its own things to ask about, and a seeded draw mixes them. None names a subject or
copies a phrasing of the held-out questions in specviz/prompts/sets.py (tests/test_chat_prompts.py checks).
The phrasings and the things they ask about are data, in prompt_data/everyday.json and prompt_data/world.json.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
from pathlib import Path

PROMPT_DATA = Path(__file__).with_name("prompt_data")


@functools.cache
def prompt_data(name: str) -> dict[str, list]:
    """The lists of prompt_data/NAME.json by their keys: the things to ask about and each family's phrasings."""
    return json.loads((PROMPT_DATA / f"{name}.json").read_text(encoding="utf-8"))


def _word_problems(rng: random.Random, count: int) -> list[str]:
    """Small arithmetic in words, with fresh numbers each: the target explains its sums in many token shapes."""
    shapes = [
        lambda: f"A shop sells pens for {rng.randint(2, 9)} dollars each. How much do {rng.randint(3, 12)} pens cost?",
        lambda: (
            f"If a train travels {rng.choice([60, 80, 90, 120, 150])} kilometres in {rng.choice([1, 2, 3])} hours, how fast is it going?"
        ),
        lambda: f"What is {rng.randint(12, 99)} plus {rng.randint(12, 99)}?",
        lambda: f"What is {rng.randint(3, 12)} multiplied by {rng.randint(3, 12)}?",
        lambda: f"Convert {rng.randint(2, 40)} kilometres to metres.",
        lambda: f"I have {rng.randint(20, 60)} apples and give away {rng.randint(2, 19)}. How many are left?",
        lambda: f"What is {rng.choice([10, 20, 25, 50])} percent of {rng.choice([40, 80, 120, 200, 360])}?",
        lambda: (
            f"A recipe needs {rng.randint(2, 4)} eggs for {rng.randint(4, 6)} people. How many eggs for {rng.randint(8, 12)} people?"
        ),
        lambda: f"How many minutes are there in {rng.randint(2, 9)} hours?",
        lambda: f"A rectangle is {rng.randint(3, 15)} cm long and {rng.randint(2, 9)} cm wide. What is its area?",
    ]
    return [rng.choice(shapes)() for _ in range(count)]


def _fill(templates: list[str], values, **extra) -> list[str]:
    return [template.format(x=value, **extra) for template in templates for value in values]


def everyday_prompts(count: int | None = None, seed: int = 1) -> list[str]:
    """`count` distinct requests (None: all) drawn evenly from every family, shuffled with a fixed seed."""
    rng = random.Random(seed)
    data = prompt_data("everyday")
    families = [
        _fill(data["task_templates"], data["tasks"]),
        _fill(data["phenomenon_templates"], data["phenomena"]),
        [template.format(a=a, b=b) for template in data["pair_templates"] for a, b in data["pairs"]],
        [
            t.format(form=form, x=x)
            for t, form, x in itertools.product(data["writing_templates"], data["writing_forms"], data["subjects"])
        ],
        _fill(data["message_templates"], data["messages"]),
        [
            t.format(n=n, x=x)
            for t in data["recommendation_templates"]
            for x in data["recommendations"]
            for n in ("three", "five")
        ],
        _fill(data["concept_templates"], data["concepts"]),
        _fill(data["job_templates"], data["jobs"]),
        _fill(data["situation_templates"], data["situations"]),
        _fill(data["animal_templates"], data["animals"]),
        _fill(data["process_templates"], data["processes"]),
        [t.format(n=n, x=x) for t in data["category_templates"] for x in data["categories"] for n in ("three", "five", "four")],
        _fill(data["code_templates"], data["code_tasks"]),
        _fill(data["sentence_templates"], data["sentences"]),
        _fill(data["passage_templates"], data["passages"]),
        [t.format(a=a, b=b) for t in data["opinion_templates"] for a, b in data["questions_of_opinion"]],
        _word_problems(rng, 900),
    ]
    for family in families:
        rng.shuffle(family)
    chosen: list[str] = []
    seen: set[str] = set()
    for round_of_picks in itertools.zip_longest(*families):  # one from each family in turn: small families run out first
        for prompt in round_of_picks:
            if prompt is not None and prompt not in seen:
                seen.add(prompt)
                chosen.append(prompt)
    chosen = chosen[:count]
    rng.shuffle(chosen)
    return chosen


def world_prompts(seed: int = 2) -> list[str]:
    """The third part: people, places, dishes, words, events, what-ifs, translations, roles, tips, sports, habits, books."""
    data = prompt_data("world")
    prompts = [
        *_fill(data["person_templates"], data["people"]),
        *_fill(data["place_templates"], data["places"]),
        *_fill(data["dish_templates"], data["dishes"]),
        *_fill(data["word_templates"], data["words"]),
        *_fill(data["event_templates"], data["events"]),
        *_fill(data["what_if_templates"], data["what_ifs"]),
        *(
            t.format(p=p, l=language)
            for t in data["translation_templates"]
            for p in data["phrases"]
            for language in data["languages"]
        ),
        *_fill(data["role_templates"], data["roles"]),
        *_fill(data["tip_templates"], data["activities"]),
        *_fill(data["sport_templates"], data["sports"]),
        *_fill(data["habit_templates"], data["habits"]),
        *_fill(data["book_templates"], data["books"]),
    ]
    prompts = list(dict.fromkeys(prompts))
    random.Random(seed).shuffle(prompts)
    return prompts
