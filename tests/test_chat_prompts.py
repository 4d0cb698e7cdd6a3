"""The held-out chat prompts share no topic and no phrasing with the prompts the smollm2 draft was distilled on."""

import hashlib
import json

from specviz.prompts.sets import CHAT_HELDOUT, CHAT_REWRITE, CODE_QUESTIONS, PROMPTS, load_prompt_set
from specviz.training.chat_prompts import TOPICS, copies_a_held_out_phrase, topic_prompts, training_prompts
from specviz.training.everyday_prompts import everyday_prompts


def test_held_out_chat_prompts_never_name_a_training_topic():
    clashes = [(prompt, topic) for prompt in CHAT_HELDOUT for topic in TOPICS if topic.lower() in prompt.lower()]
    assert not clashes, f"held-out prompts must be unseen in training; these name a training topic: {clashes}"
    assert not set(CHAT_HELDOUT) & set(training_prompts()), "a held-out prompt is also a training prompt"


def test_no_training_prompt_shares_four_words_in_a_row_with_a_held_out_one():
    copies = [prompt for prompt in training_prompts() if copies_a_held_out_phrase(prompt)]
    assert not copies, f"training prompts copy held-out phrasings: {copies[:5]}"
    assert copies_a_held_out_phrase("Explain why the sky is blue, please."), "the check must catch a copied phrasing"
    assert not copies_a_held_out_phrase("Explain why the sea is salty, please."), "and only a copied phrasing"


def test_training_prompts_keep_the_topic_prompts_first_so_committed_answers_line_up():
    prompts = training_prompts()
    assert prompts[: len(topic_prompts())] == topic_prompts()
    assert len(set(prompts)) == len(prompts)
    assert len(everyday_prompts()) > 3000  # every family, all distinct


def test_chat_sets_are_loadable_by_name():
    assert load_prompt_set("chat-heldout") == CHAT_HELDOUT
    assert set(load_prompt_set("chat")) <= set(CHAT_HELDOUT)


def test_the_training_prompts_are_the_ones_the_committed_answers_were_collected_for():
    """The prompts are data (specviz/training/prompt_data/); a changed string or order would misalign every answer
    already collected for them, so the list is pinned: 2,196 topic prompts, 3,711 everyday, 1,113 about the world."""
    prompts = training_prompts()
    digest = hashlib.sha256("\n".join(prompts).encode()).hexdigest()
    assert (len(topic_prompts()), len(everyday_prompts()), len(prompts)) == (2196, 3711, 7020)
    assert digest == "09c6dbfba1dd986b6e16993b6743b4d644a8d4718e5e4930b402c2532ae72341", (
        f"the training prompts changed (sha256 {digest}): answers collected for the old list no longer line up"
    )


def test_the_built_in_prompt_sets_are_the_ones_the_docs_measured_on():
    """The held-out questions and the presets are data (specviz/prompts/builtin.json); every α and speedup the docs
    quote was measured on them, so they are pinned: a changed one must come with those numbers measured again."""
    assert (len(CHAT_HELDOUT), len(CODE_QUESTIONS), [len(PROMPTS[name]) for name in PROMPTS]) == (24, 16, [8, 4, 6, 4, 4])
    digest = hashlib.sha256(json.dumps([CHAT_HELDOUT, CODE_QUESTIONS, CHAT_REWRITE, PROMPTS]).encode()).hexdigest()
    assert digest == "aca3ccecad16975e8a32746c93b73a5bea1f5ddcaf8d36d00be65d5b2c8dfa08", (
        f"the built-in prompts changed ({digest})"
    )
