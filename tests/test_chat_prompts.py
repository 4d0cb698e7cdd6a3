"""The held-out chat prompts share no topic with the prompts the smollm2 draft was distilled on."""

from specviz.prompts import CHAT_HELDOUT, load_prompt_set
from specviz.training.chat_prompts import TOPICS, training_prompts


def test_held_out_chat_prompts_never_name_a_training_topic():
    clashes = [(prompt, topic) for prompt in CHAT_HELDOUT for topic in TOPICS if topic.lower() in prompt.lower()]
    assert not clashes, f"held-out prompts must be unseen in training; these name a training topic: {clashes}"
    assert not set(CHAT_HELDOUT) & set(training_prompts()), "a held-out prompt is also a training prompt"


def test_chat_sets_are_loadable_by_name():
    assert load_prompt_set("chat-heldout") == CHAT_HELDOUT
    assert set(load_prompt_set("chat")) <= set(CHAT_HELDOUT)
