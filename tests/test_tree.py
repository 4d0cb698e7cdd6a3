"""A token tree verified in one pass: each node's logits must be those of its path decoded as a chain.

Checked in every weight form and attention path the target uses: to the bit in the row-independent forms (int8,
int4, attending with models/row_attention.py), and within FLOAT_TOLERANCE in float32 (eager and SDPA attention), whose
matrix products (MKL, SDPA) round a row differently with the number of rows beside it even in a chain. Then the
cache, compacted to an accepted path, must be the cache of that path decoded as a chain. The same on the static-cache
fast path (engine/static_cache.py, run eager: the form in which it is bit-identical to transformers).
"""

from __future__ import annotations

import pytest
import torch

from specviz.engine.compiled import FastDecoder, FastModel
from specviz.engine.kv_cache import CachedDecoder, compact_to_path, rollback_to_accepted
from specviz.engine.tree import ROOT, TokenTree, feed_nodes, tree_positions, tree_visibility, verify_tree
from specviz.models.weight_forms import apply_form
from tests.tiny import tiny_llama

VOCAB = 64
PROMPT = [3, 17, 5, 42, 8, 8, 9, 30, 31, 2, 7, 7, 60, 1, 4, 22, 19, 11, 5, 3, 40, 41, 42, 43, 9]
# depth 1: nodes 0, 1; depth 2: 2, 3 under 0 and 4 under 1; depth 3: 5, 6 under 2 and 7 under 4; depth 4: 8 under 7
TREE = TokenTree((11, 12, 13, 14, 15, 16, 17, 18, 19), (ROOT, ROOT, 0, 0, 1, 2, 2, 4, 7))
FLOAT_TOLERANCE = 1e-3  # |Δ logit| in float32, logits of order 10 (measured: under 1e-4 on these models)


def target_in(form: str):
    """A tiny Llama (hidden 64: int4 groups of 32 need it) in a weight form, with the attention path named."""
    model = tiny_llama(VOCAB, seed=0, hidden=64)
    if form in ("int8", "int4"):
        apply_form(model, form)
    elif form in ("eager", "sdpa"):
        model.set_attn_implementation(form)
    return model


def prefilled(model) -> CachedDecoder:
    decoder = CachedDecoder(model, VOCAB)
    decoder.feed(PROMPT[:-1])
    return decoder


def path_as_chain(model, path_tokens: list[int]) -> torch.Tensor:
    """The logits after the last token of the path, the path fed as a chain verify pass."""
    return prefilled(model).feed([PROMPT[-1]] + path_tokens, keep_last=len(path_tokens) + 1)[-1]


def test_tree_shape():
    assert TREE.depths == (1, 1, 2, 2, 2, 3, 3, 3, 4)
    assert TREE.children(ROOT) == (0, 1) and TREE.children(2) == (5, 6) and TREE.children(8) == ()
    assert TREE.path(8) == [1, 4, 7, 8]
    assert TokenTree.chain([5, 6, 7]).is_chain and not TREE.is_chain
    with pytest.raises(ValueError, match="must come before it"):
        TokenTree((1, 2), (1, ROOT))


def test_a_node_sees_the_context_and_its_ancestors_only():
    visible = tree_visibility(TREE, cached_length=4, n_pending=2)  # rows: 2 pending tokens, then the 9 nodes
    assert visible.shape == (11, 4 + 11)
    assert visible[0].tolist() == [True] * 5 + [False] * 10, "the first pending token sees the cache and itself"
    node_7 = visible[2 + 7].tolist()
    nodes_seen = [node for node in range(len(TREE)) if node_7[4 + 2 + node]]
    assert nodes_seen == [1, 4, 7] and all(node_7[:6]), "node 7 sees the cache, both pending tokens, 1 → 4 → 7"
    positions = tree_positions(TREE, first_position=4, n_pending=2).tolist()
    assert positions == [4, 5, 6, 6, 7, 7, 7, 8, 8, 8, 9], "each node sits at the root's position plus its depth"


@pytest.mark.parametrize("form", ["int8", "int4", "sdpa", "eager"])
def test_node_logits_equal_the_path_as_a_chain(form):
    """In a weight form to the bit (a row's logits do not depend on its neighbours); in float32 within rounding."""
    tolerance = 0.0 if form in ("int8", "int4") else FLOAT_TOLERANCE
    model = target_in(form)
    tree_logits, _ = verify_tree(prefilled(model), PROMPT, TREE)
    assert (tree_logits[0] - path_as_chain(model, [])).abs().max().item() <= tolerance, f"{form}: the root's logits moved"
    for node in range(len(TREE)):
        path_tokens = [TREE.token_ids[n] for n in TREE.path(node)]
        difference = (tree_logits[node + 1] - path_as_chain(model, path_tokens)).abs().max().item()
        assert difference <= tolerance, (
            f"{form}: node {node} (path {path_tokens}) differs from its path as a chain by {difference:.3g}; "
            "the tree mask or positions are wrong"
        )


def test_a_wrong_mask_is_caught():
    """Without the tree mask (plain causal attention over the node rows) a branch's node sees its cousins: the
    comparison above must notice."""
    model = target_in("int4")
    decoder = prefilled(model)
    causal = decoder.feed([PROMPT[-1], *TREE.token_ids], keep_last=len(TREE) + 1)
    node = 4  # under node 1: causally it would also see nodes 0, 2, 3
    chain = path_as_chain(model, [TREE.token_ids[n] for n in TREE.path(node)])
    assert not torch.equal(causal[node + 1], chain)


@pytest.mark.parametrize("form", ["int4", "sdpa"])
def test_compacted_cache_is_the_accepted_path_as_a_chain(form):
    model = target_in(form)
    accepted = TREE.path(7)  # 1 → 4 → 7: not a prefix of the node order
    accepted_tokens = [TREE.token_ids[n] for n in accepted]
    new_token = 33
    decoder = prefilled(model)
    tree_start = decoder.cached_length + 1  # after the pending token
    verify_tree(decoder, PROMPT, TREE)
    committed = PROMPT + accepted_tokens + [new_token]
    compact_to_path(decoder, tree_start, accepted)
    pending = rollback_to_accepted(decoder, committed)
    assert pending == [new_token] and decoder.cached_length == len(committed) - 1

    chain = prefilled(model)
    chain.feed([PROMPT[-1]] + accepted_tokens, keep_last=len(accepted) + 1)
    exact = form != "sdpa"
    for layer, (kept, reference) in enumerate(zip(decoder.cache.layers, chain.cache.layers)):
        for name in ("keys", "values"):
            difference = (getattr(kept, name) - getattr(reference, name)).abs().max().item()
            assert difference == 0 if exact else difference < FLOAT_TOLERANCE, (
                f"{form}: layer {layer}'s {name} differ from the path's own cache by {difference:.3g}"
            )
    after_compaction = decoder.feed(pending)[-1]
    after_chain = chain.feed(pending)[-1]
    difference = (after_compaction - after_chain).abs().max().item()
    assert difference == 0 if exact else difference < FLOAT_TOLERANCE, (
        f"{form}: the next step after compaction differs from the chain's by {difference:.3g}"
    )


def test_a_tree_forward_changes_no_process_state():
    """A tree's mask and positions travel with its forward: the model's attention setting and transformers' table of
    attentions are the same before, during and after (a request beside it reads them)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    model = target_in("int4")
    before = (model.config._attn_implementation, sorted(ALL_ATTENTION_FUNCTIONS.keys()))
    seen = []
    for module in model.modules():
        if hasattr(module, "num_key_value_groups"):
            module.register_forward_pre_hook(lambda *_: seen.append(model.config._attn_implementation))
    verify_tree(prefilled(model), PROMPT, TREE)
    assert seen and set(seen) == {before[0]}, f"the attention was switched during the tree's forward: {set(seen)}"
    assert (model.config._attn_implementation, sorted(ALL_ATTENTION_FUNCTIONS.keys())) == before


# -- the static-cache fast path -----------------------------------------------------------------------------------

LONG_PROMPT = (PROMPT * 12)[:-7]  # 293 tokens: softmax rows long enough to be reduced in vector blocks and a tail


def grouped_target(form: str, hidden: int = 128):
    """A tiny Llama with grouped key/value heads (4 query heads over 2, head_dim 32) in a weight form."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{**tiny_llama(VOCAB, hidden=hidden).config.to_dict(), "num_key_value_heads": 2})
    config.max_position_embeddings = 512
    model = LlamaForCausalLM(config).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5 if parameter.dim() > 1 else parameter)
    return apply_form(model, form) if form != "float32" else model


def fast_prefilled(model, prompt: list[int]) -> FastDecoder:
    decoder = FastDecoder(FastModel(model, compile_step=False), VOCAB)
    decoder.feed(prompt[:-1])
    return decoder


@pytest.mark.parametrize("form", ["int8", "int4"])
@pytest.mark.parametrize("prompt", [PROMPT, LONG_PROMPT], ids=["short", "long"])
def test_fast_path_node_logits_equal_one_token_steps_along_the_path_to_the_bit(form, prompt):
    """The strictest reference: plain decoding of the node's path, one token per step, as greedy decoding runs it."""
    model = grouped_target(form)
    tree_logits, _ = verify_tree(fast_prefilled(model, prompt), prompt, TREE)
    for node in range(len(TREE)):
        path_tokens = [TREE.token_ids[n] for n in TREE.path(node)]
        steps = fast_prefilled(model, prompt)
        for token in [prompt[-1], *path_tokens]:
            expected = steps.feed([token])[-1]
        assert torch.equal(tree_logits[node + 1], expected), (
            f"{form}: node {node} (path {path_tokens}) differs from its path decoded step by step by "
            f"{(tree_logits[node + 1] - expected).abs().max():.3g}"
        )
        chain = fast_prefilled(model, prompt).feed([prompt[-1], *path_tokens], keep_last=1)[-1]
        assert torch.equal(tree_logits[node + 1], chain), f"{form}: node {node} differs from its path as a chain pass"


def test_fast_path_node_logits_equal_the_path_as_a_chain_in_float32():
    model = grouped_target("float32")
    tree_logits, _ = verify_tree(fast_prefilled(model, PROMPT), PROMPT, TREE)
    for node in range(len(TREE)):
        path_tokens = [TREE.token_ids[n] for n in TREE.path(node)]
        chain = fast_prefilled(model, PROMPT).feed([PROMPT[-1], *path_tokens], keep_last=1)[-1]
        difference = (tree_logits[node + 1] - chain).abs().max().item()
        assert difference < FLOAT_TOLERANCE, f"node {node} differs from its path as a chain by {difference:.3g}"


def test_fast_path_tree_equals_transformers_tree_to_the_bit():
    """The fast path's tree pass against transformers' (per-row attention over each row's keys): the same logits."""
    model = grouped_target("int4")
    fast_logits, _ = verify_tree(fast_prefilled(model, PROMPT), PROMPT, TREE)
    reference, _ = verify_tree(prefilled(model), PROMPT, TREE)
    assert torch.equal(fast_logits, reference), f"max |Δ logit| {(fast_logits - reference).abs().max():.3g}"


def test_fast_path_a_wrong_mask_is_caught():
    model = grouped_target("int4")
    causal = fast_prefilled(model, PROMPT).feed([PROMPT[-1], *TREE.token_ids], keep_last=len(TREE) + 1)
    node = 4  # under node 1: causally it would also see nodes 0, 2, 3
    chain = fast_prefilled(model, PROMPT).feed([PROMPT[-1], *[TREE.token_ids[n] for n in TREE.path(node)]])[-1]
    assert not torch.equal(causal[node + 1], chain)


def test_fast_path_compaction_leaves_the_accepted_path_as_a_chain_would():
    model = grouped_target("int4")
    accepted = TREE.path(7)  # 1 → 4 → 7: not a prefix of the node order
    accepted_tokens = [TREE.token_ids[n] for n in accepted]
    new_token = 33
    decoder = fast_prefilled(model, PROMPT)
    cache_before = list(decoder.cache)  # compaction moves entries inside the static cache, it allocates none
    tree_start = decoder.cached_length + 1
    verify_tree(decoder, PROMPT, TREE)
    committed = PROMPT + accepted_tokens + [new_token]
    compact_to_path(decoder, tree_start, accepted)
    pending = rollback_to_accepted(decoder, committed)
    assert pending == [new_token] and decoder.cached_length == len(committed) - 1
    assert all(now is before for now, before in zip(decoder.cache, cache_before))

    chain = fast_prefilled(model, PROMPT)
    chain.feed([PROMPT[-1]] + accepted_tokens, keep_last=len(accepted) + 1)
    length = chain.cached_length
    for layer, (ours, theirs) in enumerate(zip(decoder.cache, chain.cache)):  # (2 · kv_heads, length, head_dim) each
        assert torch.equal(ours[:, :length], theirs[:, :length]), f"layer {layer}: keys or values differ from the path's own"
    assert torch.equal(decoder.feed(pending), chain.feed(pending)), "the next step after compaction differs"


def test_a_draft_grows_a_tree_on_the_fast_path_as_on_transformers():
    """feed_nodes (how a draft model grows a tree, depth by depth) gives the same logits on both paths."""
    model = grouped_target("int4")
    fast, reference = fast_prefilled(model, PROMPT), prefilled(model)
    for decoder in (fast, reference):
        decoder.feed([PROMPT[-1]])
    tree_start = fast.cached_length
    with pytest.raises(ValueError, match="ancestor 0 is not in the cache"):
        feed_nodes(fast, TREE, tree_start, [], [2])  # node 2 before its parent 0
    fed: list[int] = []
    for depth_nodes in ([0, 1], [2, 3, 4], [5, 7]):
        got = feed_nodes(fast, TREE, tree_start, fed, depth_nodes)
        expected = feed_nodes(reference, TREE, tree_start, fed, depth_nodes)
        assert torch.equal(got, expected), f"nodes {depth_nodes}: max |Δ logit| {(got - expected).abs().max():.3g}"
        fed += depth_nodes
