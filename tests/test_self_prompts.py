"""Requests the target writes itself (Magpie): whole, new, one line, and never a copy of a held-out question."""

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from specviz.training.distill.collect import end_token_ids
from specviz.training.self_prompts import is_kept, self_prompts, user_turn_prefix, write_requests

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def test_a_kept_request_is_whole_new_one_line_and_copies_no_held_out_question():
    seen: set[str] = set()
    assert is_kept("How do I repot a cactus without hurting my hands?", seen)
    assert not is_kept("Why do cats purr so loudly at night?", seen), "shares 'why do cats purr' with a held-out question"
    assert not is_kept("Hi there", seen), "too short to be a request"
    assert not is_kept("Plan my week.\nAlso my weekend, please.", seen), "requests are kept one per line"
    assert not is_kept("Tell me a joke <|im_start|>", seen)
    seen.add("how do i repot a cactus?")
    assert not is_kept("How do I repot a cactus?", seen), "a request already kept is not kept twice"


def test_a_tokenizer_without_a_chat_template_cannot_write_a_users_turn():
    tokenizer = AutoTokenizer.from_pretrained(ASSETS / "pycode-target")
    assert not tokenizer.chat_template
    with pytest.raises(ValueError, match="chat template"):
        user_turn_prefix(tokenizer)


def test_the_real_target_writes_requests_of_its_own(real_pair, tmp_path):
    model, tokenizer = real_pair.target.model, real_pair.tokenizer
    assert tokenizer.decode(user_turn_prefix(tokenizer)).endswith("<|im_start|>user\n"), "up to where the user's words begin"
    end_ids = end_token_ids(model, tokenizer)
    requests = write_requests(model, tokenizer, end_ids, count=6, seed=3, batch_size=6)
    assert len(requests) == 6 and len({request.lower() for request in requests}) == 6
    assert all(is_kept(request, set()) for request in requests)
    written = self_prompts(model, tokenizer, end_ids, 6, tmp_path, seed=3)
    assert written == requests, "the same seed writes the same requests"
    (tmp_path / "self_prompts-6-seed3.txt").write_text("Kept from an earlier run, please.\n")
    assert self_prompts(model, tokenizer, end_ids, 6, tmp_path, seed=3) == ["Kept from an earlier run, please."], (
        "a rerun with the same count and seed reads the file"
    )


def test_the_committed_self_written_requests_are_new_to_the_held_out_questions(real_pair):
    """The answers the feature head trained on include requests SmolLM2 wrote itself: each went through the chat
    template as a user's turn, and none copies four words in a row of a held-out question (α there stays clean)."""
    from specviz.training.chat_prompts import copies_a_held_out_phrase
    from specviz.training.distill.answers import load_answers

    examples = load_answers(ASSETS / "training" / "smollm2-135m-self-answers.npz")
    prefix = user_turn_prefix(real_pair.tokenizer)
    assert len(examples) >= 5000
    assert all(example.prompt_ids[: len(prefix)] == prefix for example in examples)
    requests = [real_pair.tokenizer.decode(example.prompt_ids[len(prefix) :], skip_special_tokens=True) for example in examples]
    copies = [request for request in requests if copies_a_held_out_phrase(request)]
    assert not copies, f"self-written requests copy held-out phrasings: {copies[:3]}"
    assert len({request.lower() for request in requests}) == len(requests), "no request twice"
