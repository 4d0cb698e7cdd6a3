"""bench's transformers rows run what they say: transformers reads the assisted-generation settings from the
*draft's* generation_config, so bench sets them there for each call and restores them after."""

import torch

from specviz.deployment.benchmark import TRANSFORMERS_DEFAULT, assistant_settings
from specviz.drafting.registry import strategy
from tests.tiny import tiny_llama

PROMPT = [3, 17, 5, 42, 8, 8, 9]


def forwards_per_cycle(target, draft, assistant_config: dict) -> float:
    """Draft forwards per target forward in one assisted generate() of 30 tokens."""
    calls = {"target": 0, "draft": 0}
    hooks = [
        target.register_forward_hook(lambda *_: calls.__setitem__("target", calls["target"] + 1)),
        draft.register_forward_hook(lambda *_: calls.__setitem__("draft", calls["draft"] + 1)),
    ]
    ids = torch.tensor([PROMPT])
    try:
        with assistant_settings(draft, assistant_config):
            target.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=30,
                do_sample=False,
                pad_token_id=0,
                assistant_model=draft,
            )
    finally:
        for hook in hooks:
            hook.remove()
    return calls["draft"] / calls["target"]


def test_the_gamma_bench_asks_for_is_the_gamma_transformers_uses():
    target, draft = tiny_llama(64, seed=0), tiny_llama(64, seed=0)  # the same model: every draft is accepted
    twin = strategy("model").transformers_twin
    one, five = (
        forwards_per_cycle(target, draft, twin(1).assistant_config),
        forwards_per_cycle(target, draft, twin(5).assistant_config),
    )
    assert one < 1.5 and five > 3, f"draft forwards per cycle: {one:.2f} at γ = 1, {five:.2f} at γ = 5"


def test_assistant_settings_are_restored_after_the_call():
    draft = tiny_llama(64, seed=1)
    before = {key: getattr(draft.generation_config, key, None) for key in TRANSFORMERS_DEFAULT.assistant_config}
    with assistant_settings(draft, {"num_assistant_tokens": 7, "num_assistant_tokens_schedule": "heuristic"}):
        assert draft.generation_config.num_assistant_tokens == 7
    assert {key: getattr(draft.generation_config, key, None) for key in before} == before
