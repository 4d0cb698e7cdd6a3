"""The shipped path, compiled, in the quick suite: a token tree's verify pass, a chain's and plain decoding all run
the one AOTInductor package (engine/aot_step.py), and greedy speculation on it equals the target alone.

One small grouped Llama (4 query heads over 2 key/value heads, as SmolLM2 groups 9 over 3) is compiled once per test
session in each of two forms (about 15–25 s each on 2 cores; a second session loads them from Inductor's cache):
int8 weight-only, where rows are independent, so a node's logits must equal its path's one-token steps to the bit;
and float32, where greedy output must equal transformers' own generate().
"""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
import torch

from specviz.drafting.drafters import ModelDrafter
from specviz.engine import DecodeSettings, autoregressive_decode, speculative_decode
from specviz.engine.compiled import FastDecoder, FastModel
from specviz.engine.tree import ROOT, TokenTree, verify_tree
from specviz.engine.tree_shape import TreeShape
from specviz.models.weight_forms import apply_form
from tests.test_greedy_exact import transformers_greedy
from tests.tiny import fake_vocabulary, grouped_llama

VOCAB = 64
PROMPT = [3, 17, 5, 42, 8, 8, 9, 30, 31, 2, 7, 7, 60, 1, 4, 22, 19, 11, 5, 3, 40, 41, 42, 43, 9]
# depth 1: nodes 0, 1; depth 2: 2, 3 under 0 and 4 under 1; depth 3: 5, 6 under 2 and 7 under 4; depth 4: 8 under 7
TREE = TokenTree((11, 12, 13, 14, 15, 16, 17, 18, 19), (ROOT, ROOT, 0, 0, 1, 2, 2, 4, 7))
NEW_TOKENS = 40
CHAINS = [1, 2, 4]
TREES = ["2x1:1", "4x2x1x1:1", "nodes=16,depth=5"]


def compiled(model) -> FastModel:
    fast = FastModel(model, compile_step=True)
    if not fast.report.compiled or fast.build() is None:
        pytest.skip(f"the step cannot compile here: {fast.report.reason}")
    return fast


@pytest.fixture(scope="session")
def int8_target() -> FastModel:
    return compiled(apply_form(grouped_llama(seed=0), "int8"))


@pytest.fixture(scope="session")
def float_target() -> FastModel:
    return compiled(grouped_llama(seed=0))


def only_compiled(fast: FastModel, monkeypatch) -> None:
    """Make an eager forward of `fast` fail: what follows must run the package."""

    def refuse(*args, **kwargs):
        raise AssertionError("this forward ran eager, not on the compiled package")

    monkeypatch.setattr(fast.forward, "forward", refuse)


def prefilled(fast: FastModel, prompt: list[int]) -> FastDecoder:
    decoder = FastDecoder(fast, VOCAB)
    decoder.feed(prompt[:-1])
    return decoder


@pytest.mark.parametrize("prompt", [PROMPT, (PROMPT * 8)[:-3]], ids=["short", "long"])
def test_compiled_tree_node_logits_equal_one_token_steps_along_the_path_to_the_bit(int8_target, prompt, monkeypatch):
    only_compiled(int8_target, monkeypatch)
    tree_logits, _ = verify_tree(prefilled(int8_target, prompt), prompt, TREE)
    for node in range(len(TREE)):
        path_tokens = [TREE.token_ids[n] for n in TREE.path(node)]
        steps = prefilled(int8_target, prompt)
        for token in [prompt[-1], *path_tokens]:
            expected = steps.feed([token])[-1]
        assert torch.equal(tree_logits[node + 1], expected), (
            f"node {node} (path {path_tokens}) differs from its path decoded step by step by "
            f"{(tree_logits[node + 1] - expected).abs().max():.3g} on the compiled package"
        )
    root_step = prefilled(int8_target, prompt).feed([prompt[-1]])[-1]
    assert torch.equal(tree_logits[0], root_step), "the root's row moved"


def test_compiled_chain_pass_rows_equal_one_token_steps_to_the_bit(int8_target, monkeypatch):
    only_compiled(int8_target, monkeypatch)
    decoder = prefilled(int8_target, PROMPT)
    start = decoder.cached_length
    together = decoder.feed([PROMPT[-1], 1, 2, 3, 4], keep_last=5)
    decoder.truncate(start)
    alone = torch.cat([decoder.feed([token]) for token in [PROMPT[-1], 1, 2, 3, 4]])
    assert torch.equal(together, alone), f"max |Δ logit| {(together - alone).abs().max():.2e}"


def test_a_request_runs_compiled_from_its_first_token(int8_target, monkeypatch):
    """No step falls back to eager: a lone first token (its context padded to two slots) runs the package too, and
    gets the logits it gets as the first row of a longer prefill."""
    only_compiled(int8_target, monkeypatch)
    alone = FastDecoder(int8_target, VOCAB)
    assert alone.engine == "compiled"
    first = alone.feed(PROMPT[:1])
    torch.testing.assert_close(first, FastDecoder(int8_target, VOCAB).feed(PROMPT[:3], keep_last=3)[:1], rtol=0, atol=0)


def speculative(fast: FastModel, draft: FastModel, method: str, prompt=PROMPT) -> list[int]:
    """Greedy speculative output on `fast`: a chain of γ drafts ("3"), or a token tree of the shape given."""
    target = FastDecoder(fast, VOCAB)
    if method.isdigit():
        settings = DecodeSettings(max_new_tokens=NEW_TOKENS, gamma=int(method))
        events = speculative_decode(target, ModelDrafter(FastDecoder(draft, VOCAB)), prompt, settings, fake_vocabulary())
    else:
        settings = replace(DecodeSettings(max_new_tokens=NEW_TOKENS), tree=TreeShape.parse(method))
        drafter = ModelDrafter(FastDecoder(draft, VOCAB))
        events = speculative_decode(target, drafter, prompt, settings, fake_vocabulary())
    return list(list(events)[-1].new_token_ids)


def plain(fast: FastModel, prompt=PROMPT) -> list[int]:
    settings = DecodeSettings(max_new_tokens=NEW_TOKENS)
    return list(list(autoregressive_decode(FastDecoder(fast, VOCAB), prompt, settings, fake_vocabulary()))[-1].new_token_ids)


@pytest.fixture(scope="module")
def draft_int8() -> FastModel:
    return FastModel(apply_form(grouped_llama(seed=0, noise=0.05), "int8"), compile_step=False)


@pytest.mark.parametrize("method", [str(gamma) for gamma in CHAINS] + TREES)
def test_compiled_greedy_speculation_equals_the_compiled_target_alone(int8_target, draft_int8, method, monkeypatch):
    only_compiled(int8_target, monkeypatch)
    alone = plain(int8_target)
    got = speculative(int8_target, draft_int8, method)
    assert got == alone, f"{method}: parted from the compiled target alone at token {first_difference(got, alone)}"


@pytest.mark.parametrize("method", [str(gamma) for gamma in CHAINS] + TREES)
def test_compiled_greedy_speculation_equals_transformers_generate_in_float32(float_target, method, monkeypatch):
    draft = FastModel(grouped_llama(seed=0, noise=0.05), compile_step=False)
    reference = transformers_greedy(float_target.model, PROMPT, NEW_TOKENS)
    only_compiled(float_target, monkeypatch)
    assert plain(float_target) == reference, "the compiled target alone parted from generate()"
    got = speculative(float_target, draft, method)
    assert got == reference, f"{method}: parted from generate() at token {first_difference(got, reference)}"


def test_two_requests_at_once_on_one_pair_stay_exact(int8_target, draft_int8, monkeypatch):
    """Issue 34's check on the compiled path: a tree and a chain on one pair in two threads, 20 rounds each."""
    only_compiled(int8_target, monkeypatch)
    prompts = [PROMPT, PROMPT[5:] + [12, 13]]
    expected = {tuple(prompt): plain(int8_target, prompt) for prompt in prompts}
    errors: list[BaseException] = []
    wrong: list[str] = []

    def requests(method: str) -> None:
        try:
            for round_ in range(20):
                prompt = prompts[round_ % 2]
                got = speculative(int8_target, draft_int8, method, prompt)
                if got != expected[tuple(prompt)]:
                    wrong.append(f"{method}, round {round_}: token {first_difference(got, expected[tuple(prompt)])}")
        except BaseException as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    threads = [threading.Thread(target=requests, args=(method,)) for method in ("nodes=16,depth=5", "2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, f"{len(errors)} request(s) failed: {errors[0]!r}"
    assert not wrong, f"outputs parted from the target alone: {wrong}"


def first_difference(got: list[int], expected: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))


def test_the_draft_for_these_tests_is_neither_always_right_nor_always_wrong(int8_target, draft_int8):
    """The checks above mean something only if cycles both accept and reject."""
    target = FastDecoder(int8_target, VOCAB)
    settings = DecodeSettings(max_new_tokens=NEW_TOKENS, gamma=4)
    events = list(speculative_decode(target, ModelDrafter(FastDecoder(draft_int8, VOCAB)), PROMPT, settings, fake_vocabulary()))
    tally = events[-1].tally
    assert 0 < tally.accepted < tally.drafted, f"accepted {tally.accepted} of {tally.drafted}"
